"""Measure a draft/target pair with picogpt's NumPy code: alpha, the cost ratio c, the speedup.

The numbers of the teaching pair's model card (weights/README.md) come from this script:

  alpha    mean over positions of sum_x min(p(x), q(x)) (theory.acceptance_rate), along text
           sampled from the target q at temperature 1 (Algorithm 1), one full forward pass of
           each model over each sampled sequence;
  c        t_draft / t_target: median wall time of one decoding step with a KV cache (model
           call + turning logits into a distribution + sampling), from Algorithm 1's timings;
  speedup  wall time of autoregressive sampling / speculative sampling (Algorithm 2), both at
           temperature 1 for N tokens, for K = 1 .. K_max; each (prompt, seed) runs both ways
           back to back and the speedup is the ratio of the summed times.

Usage, with the project's environment (`make .venv/.installed` installs picogpt into .venv):
    .venv/bin/python tools/measure_teaching_pair.py                  # tiny-draft, tiny-target
    .venv/bin/python tools/measure_teaching_pair.py --json weights/measurements.json
"""

import argparse
import json
import os
import platform
import time

import numpy as np

import picogpt
from picogpt import theory
from picogpt.sampling import autoregressive_sampling, distribution
from picogpt.speculative import speculative_sampling

PROMPTS = (  # KJV-style openings (the teaching pair was trained on the King James Bible)
    "And God said", "In the beginning", "The LORD is my shepherd", "And it came to pass",
    "Blessed are the", "Then Jesus said unto them", "And the king of Israel",
    "For God so loved", "And Moses spake unto", "Thus saith the LORD", "My son, hear",
    "And they went forth", "Behold, I send", "And he said unto them", "Praise ye the LORD",
    "Now the serpent was",
)


def sampled_sequences(target, prompts, N, seed):
    """Text from the target at temperature 1: one sequence (prompt + N ids) per prompt."""
    rng = np.random.default_rng(seed)
    return [prompt + autoregressive_sampling(target, prompt, N, seed=rng).tokens for prompt in prompts]


def acceptance_along(draft, target, ids, n_prompt):
    """sum_x min(p(x), q(x)) at each generated position of ids [n] -> [n - n_prompt]."""
    p = distribution(draft(ids)[n_prompt - 1:-1])   # [n - n_prompt, n_vocab]
    q = distribution(target(ids)[n_prompt - 1:-1])  # [n - n_prompt, n_vocab]
    return theory.acceptance_rate(p, q)


def decode_step_s(model, prompt, N, seed):
    """Median seconds of one cached decoding step (the prefill, the first step, excluded)."""
    return float(np.median(autoregressive_sampling(model, prompt, N, seed=seed).token_times_s[1:]))


def speedups(draft, target, prompts, N, Ks, seeds):
    """For each K: (autoregressive seconds, speculative seconds, observed alpha_hat), summed
    over prompts x seeds, each pair run back to back so both see the same machine load."""
    rows = []
    for K in Ks:
        ars_s = sps_s = 0.0
        accepted = decisions = 0
        for prompt in prompts:
            for seed in seeds:
                ars_s += autoregressive_sampling(target, prompt, N, seed=seed).seconds
                result = speculative_sampling(draft, target, prompt, N, K=K, seed=seed)
                sps_s += result.seconds
                accepted += sum(result.accepted)
                decisions += sum(len(loop.r) for loop in result.loops)
        rows.append(dict(K=K, autoregressive_s=ars_s, speculative_s=sps_s, speedup=ars_s / sps_s,
                         alpha_hat=accepted / decisions))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draft", default="tiny-draft")
    parser.add_argument("--target", default="tiny-target")
    parser.add_argument("-N", type=int, default=128, help="tokens per sampled sequence (default 128)")
    parser.add_argument("--K-max", type=int, default=8)
    parser.add_argument("--speed-prompts", type=int, default=4, help="prompts for the speedup runs")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per prompt for the speedup runs")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args(argv)

    tok = picogpt.tokenizer()
    draft, target = picogpt.load(args.draft), picogpt.load(args.target)
    prompts = [tok.encode(text) for text in PROMPTS]
    print(f"draft p = {draft!r}\ntarget q = {target!r}", flush=True)

    t0 = time.perf_counter()
    sequences = sampled_sequences(target, prompts, args.N, seed=0)
    alphas = np.concatenate([acceptance_along(draft, target, ids, len(prompt))
                             for ids, prompt in zip(sequences, prompts)])
    print(f"alpha = {alphas.mean():.4f} over {alphas.size} positions sampled from q at temperature 1 "
          f"(std of the mean {alphas.std() / np.sqrt(alphas.size):.4f})", flush=True)

    t_draft_s = np.median([decode_step_s(draft, prompt, args.N, seed=1) for prompt in prompts[:4]])
    t_target_s = np.median([decode_step_s(target, prompt, args.N, seed=1) for prompt in prompts[:4]])
    c = t_draft_s / t_target_s
    print(f"decode step: draft {t_draft_s * 1e3:.2f} ms, target {t_target_s * 1e3:.2f} ms, c = {c:.3f}", flush=True)

    rows = speedups(draft, target, prompts[:args.speed_prompts], args.N, range(1, args.K_max + 1),
                    seeds=range(args.seeds))
    for row in rows:
        row["predicted_leviathan"] = theory.predicted_speedup_leviathan(alphas.mean(), row["K"], c)
        print(f"K={row['K']}: speedup {row['speedup']:.2f}x (predicted {row['predicted_leviathan']:.2f}x "
              f"from alpha and c), alpha_hat {row['alpha_hat']:.3f}", flush=True)
    best = max(rows, key=lambda row: row["speedup"])
    print(f"best K = {best['K']}: speedup {best['speedup']:.2f}x "
          f"(predicted best K = {theory.best_K(alphas.mean(), c)})")

    samples = [tok.decode(ids) for ids in sequences[:3]]
    for text in samples:
        print("---\n" + text)
    report = dict(draft=draft.name, target=target.name, N=args.N, alpha=float(alphas.mean()),
                  alpha_positions=int(alphas.size), t_draft_s=t_draft_s, t_target_s=t_target_s, c=c,
                  speedups=rows, best_K=best["K"], best_speedup=best["speedup"],
                  samples=samples, seconds=time.perf_counter() - t0,
                  machine=dict(cpu=platform.processor() or platform.machine(), cores=os.cpu_count(),
                               numpy=np.__version__))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
