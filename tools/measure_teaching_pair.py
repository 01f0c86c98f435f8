"""Measure a draft/target pair with picogpt's NumPy code: alpha, the in-loop costs, the speedup.

The numbers of the teaching pair's model card (weights/README.md) come from this script:

  alpha    mean over positions of sum_x min(p(x), q(x)) (theory.acceptance_rate), along text
           sampled from the target q at temperature 1 (Algorithm 1), one full forward pass of
           each model over each sampled sequence;
  speedup  measure/speedup.py's one measurement (the bench's and notebook 05's): autoregressive
           (Algorithm 1) against speculative sampling (Algorithm 2) at temperature 1, N tokens
           after the first prompt, for K = 1 .. K_max, interleaved repeats; in-loop costs
           (t_draft, t_target, t_score(K)), medians with their interquartile range, measured
           speedup = median autoregressive / median speculative time, predicted from the in-loop
           costs and alpha_hat.

Usage, with the project's environment (`make .venv/.installed` installs picogpt into .venv):
    .venv/bin/python tools/measure_teaching_pair.py                  # tiny-draft, tiny-target: prints only
    .venv/bin/python tools/measure_teaching_pair.py --json out.json  # also writes the results there
    .venv/bin/python tools/measure_teaching_pair.py --save           # weights/measurements.json, and the
                                                                     # model card's blocks rendered from it
"""

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import render_docs

import picogpt
from picogpt import theory
from picogpt.measure import machine, speedup
from picogpt.sampling import autoregressive_sampling, distribution

MEASUREMENTS = Path(__file__).resolve().parent.parent / "weights" / "measurements.json"  # the model card's source
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draft", default="tiny-draft")
    parser.add_argument("--target", default="tiny-target")
    parser.add_argument("-N", type=int, default=128, help="tokens per sampled sequence (default 128)")
    parser.add_argument("--K-max", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats of the speedup runs (default 5)")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--save", action="store_true", help="write weights/measurements.json and render the "
                        "model card's measured blocks (weights/README.md) from it")
    args = parser.parse_args(argv)
    if args.save and (args.draft, args.target) != ("tiny-draft", "tiny-target"):
        parser.error("--save writes the teaching pair's model card: measure tiny-draft and tiny-target")

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

    m = speedup.measure_speedup(draft, target, prompts[0], args.N, range(1, args.K_max + 1),
                                repeats=args.repeats)
    print("\n".join(speedup.text_lines(m)), flush=True)
    measured_K, predicted_K = m.best_K
    print(f"best K = {measured_K}: speedup {speedup.speedup_text(m.by_K[measured_K])}; predicted best K = {predicted_K}")
    warning = speedup.busy_warning(m, os.cpu_count())
    if warning:
        print(warning)

    samples = [tok.decode(ids) for ids in sequences[:3]]
    for text in samples:
        print("---\n" + text)
    flags = sys.argv[1:] if argv is None else list(argv)
    results = dict(command=shlex.join(["python", "tools/measure_teaching_pair.py", *flags]),
                   draft=draft.name, target=target.name, N=args.N, alpha=float(alphas.mean()),
                   alpha_positions=int(alphas.size), speedup=speedup.as_dict(m), samples=samples,
                   seconds=time.perf_counter() - t0, machine=machine.machine_info())
    paths = ([args.json] if args.json else []) + ([MEASUREMENTS] if args.save else [])
    for path in paths:
        Path(path).write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {path}")
    if args.save:
        changed = render_docs.render_docs()  # every document that quotes it (the model card, the goals)
        print("rendered from it:", ", ".join(map(str, changed)) or "(no document changed)")


if __name__ == "__main__":
    main()
