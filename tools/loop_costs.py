"""Where the README command's time goes inside the sampling loops, on the teaching pair.

    .venv/bin/python tools/loop_costs.py            # prints the breakdown; writes build/bench/loop-costs.json
    .venv/bin/python tools/loop_costs.py --save     # benchmarks/loop-costs.json

The teaching pair's costs are per call more than per byte (48 thin target layers, a 2-layer
draft, and a 50,257-token vocabulary on every row), so its speedup is decided by everything a
drafted token and a loop pay besides the products. This tool runs the README command's setting
(`speculate --prompt "And God said" -n 64 -K 4`, temperature 1) in one process: a warm-up, then
--repeats interleaved rounds of speculative and autoregressive sampling, seeds 0, 1, 2, ..., with
a timer around each part of the library's loops (a wrapper around the functions named in PARTS,
exclusive time: a part's figure leaves out the parts inside it). Per drafted token: the draft's
forward pass, its call's checks, turning 50,257 logits into p, sampling from p; per loop: the
scoring call's forward pass and checks, the K + 1 rows of q, the accept/reject step, the caches'
roll-back, and what is left (the loop's own bookkeeping); the same for one autoregressive token.
Every figure is the mean over a run (the prompt's prefill included, as the user waits for it),
then the median over the runs. Each round also runs both algorithms once without the timers, so
the timers' own cost is measured beside them (`uninstrumented_s`).
"""

import argparse
import json
import os
import sys
import time
from collections import defaultdict

import numpy as np

import picogpt
from picogpt import model as model_module
from picogpt import rejection, sampling, speculative
from picogpt.io.atomic import write_text_atomically
from picogpt.kv_cache import KVCache
from picogpt.measure.machine import load_average, machine_info
from picogpt.measure.results import results_path

PROMPT, N, K = "And God said", 64, 4  # the README's command
REPEATS = 5  # rounds, seeds 0 .. REPEATS - 1

# (owner, attribute, part): each function is wrapped by a timer that charges its exclusive time to
# the part, under the parts it runs inside (draft/call/checks: a check inside a draft model call)
PARTS = [
    (speculative, "draft_tokens", "draft"),
    (speculative, "score", "score"),
    (speculative, "token_by_token", "step"),
    (model_module.GPT2, "__call__", "call"),
    (model_module.GPT2, "validate_inputs", "checks"),
    (model_module.GPT2, "ensure_checkpoint_unchanged", "checks"),
    (model_module.GPT2, "ensure_finite", "checks"),
    (sampling, "validate_controls", "checks"),
    (speculative, "distribution", "distribution"),
    (sampling, "distribution", "distribution"),
    (speculative, "sample", "sample"),
    (sampling, "sample", "sample"),
    (rejection, "sample", "sample"),
    (rejection, "residual", "residual"),
    (KVCache, "truncate", "roll-back"),
]

# the table: (row, unit, [paths whose exclusive times add up to it]); unit: per drafted token,
# per loop, per autoregressive token
ROWS = [
    ("draft: forward pass", "drafted token", ["speculative/draft/call"]),
    ("draft: the call's checks (ids, cache, file, finite logits)", "drafted token", ["speculative/draft/call/checks"]),
    ("draft: logits -> p (50,257 probabilities)", "drafted token",
     ["speculative/draft/distribution", "speculative/draft/distribution/checks"]),
    ("draft: sampling x ~ p", "drafted token", ["speculative/draft/sample"]),
    ("draft: the drafting loop itself", "drafted token", ["speculative/draft"]),
    ("score: forward pass on the new positions", "loop", ["speculative/score/call"]),
    ("score: the call's checks", "loop", ["speculative/score/call/checks"]),
    ("score: logits -> q (K + 1 rows)", "loop", ["speculative/score/distribution",
                                                 "speculative/score/distribution/checks"]),
    ("score: the rest of the step", "loop", ["speculative/score"]),
    ("accept/reject (steps 3-4)", "loop", ["speculative/step", "speculative/step/sample",
                                           "speculative/step/residual"]),
    ("roll-back of both caches", "loop", ["speculative/roll-back"]),
    ("bookkeeping (the loop's own lines, its trace, the run's set-up)", "loop", ["speculative"]),
    ("autoregressive: forward pass", "token", ["autoregressive/call"]),
    ("autoregressive: the call's checks", "token", ["autoregressive/call/checks"]),
    ("autoregressive: logits -> q", "token", ["autoregressive/distribution", "autoregressive/distribution/checks"]),
    ("autoregressive: sampling", "token", ["autoregressive/sample"]),
    ("autoregressive: the rest", "token", ["autoregressive"]),
]


class Timers:
    """Exclusive wall time per path of nested parts ("speculative/draft/call"), while installed."""

    def __init__(self):
        self.stack, self.seconds, self.calls, self.installed = [], defaultdict(float), defaultdict(int), []

    def region(self, name, function, *args, **kwargs):
        return self.wrap_function(function, name)(*args, **kwargs)

    def wrap_function(self, function, part):
        def timed(*args, **kwargs):
            path = f"{self.stack[-1][0]}/{part}" if self.stack else part
            self.stack.append([path, 0.0])
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                _, inside = self.stack.pop()
                self.seconds[path] += elapsed - inside
                self.calls[path] += 1
                if self.stack:
                    self.stack[-1][1] += elapsed
        timed.__wrapped__ = function
        return timed

    def install(self):
        for owner, attribute, part in PARTS:
            original = vars(owner)[attribute]
            self.installed.append((owner, attribute, original))
            setattr(owner, attribute, self.wrap_function(original, part))
        # the loop finds its verifier by name in speculative.VERIFIERS: the timed one takes its place there
        self.default_step = speculative.VERIFIERS["token"]
        speculative.VERIFIERS["token"] = speculative.token_by_token

    def remove(self):
        for owner, attribute, original in reversed(self.installed):
            setattr(owner, attribute, original)
        self.installed.clear()
        speculative.VERIFIERS["token"] = self.default_step

    def take(self):
        taken = dict(self.seconds), dict(self.calls)
        self.seconds.clear()
        self.calls.clear()
        return taken


def one_round(draft, target, ids, seed, timers):
    """One seed: each algorithm once timed part by part, then once without timers."""
    timers.install()
    try:
        result = timers.region("speculative", speculative.speculative_sampling, draft, target, ids, N, K=K, seed=seed)
        spec_parts, spec_calls = timers.take()
        ar = timers.region("autoregressive", sampling.autoregressive_sampling, target, ids, N, seed=seed)
        ar_parts, ar_calls = timers.take()
    finally:
        timers.remove()
    plain_spec = speculative.speculative_sampling(draft, target, ids, N, K=K, seed=seed)
    plain_ar = sampling.autoregressive_sampling(target, ids, N, seed=seed)
    return {"seed": seed, "loops": len(result.loops), "drafted": sum(loop.K for loop in result.loops),
            "tokens_per_loop": result.tokens_per_loop, "alpha_hat": result.alpha_hat,
            "speculative_s": result.seconds, "autoregressive_s": ar.seconds,
            "uninstrumented_s": {"speculative": plain_spec.seconds, "autoregressive": plain_ar.seconds},
            "exclusive_s": {**spec_parts, **ar_parts}, "calls": {**spec_calls, **ar_calls}}


def per_unit(run, unit):
    return {"drafted token": run["drafted"], "loop": run["loops"], "token": N}[unit]


def summary(runs):
    """The table's rows: median over runs of each row's mean seconds per unit, and its share of a run."""
    rows = []
    for label, unit, paths in ROWS:
        per = [sum(run["exclusive_s"].get(p, 0.0) for p in paths) / per_unit(run, unit) for run in runs]
        share = [sum(run["exclusive_s"].get(p, 0.0) for p in paths)
                 / run["speculative_s" if not label.startswith("autoregressive") else "autoregressive_s"]
                 for run in runs]
        rows.append({"part": label, "per": unit, "seconds": float(np.median(per)), "share_of_run": float(np.median(share))})
    return rows


def measure(repeats):
    draft, target = picogpt.course_models(verbose=False)
    ids = picogpt.tokenizer().encode(PROMPT)
    before = load_average()
    speculative.speculative_sampling(draft, target, ids, 8, K=K, seed=0)  # warm-up: first reads, compiled kernels
    sampling.autoregressive_sampling(target, ids, 8, seed=0)
    timers = Timers()
    runs = [one_round(draft, target, ids, seed, timers) for seed in range(repeats)]
    spec = [run["uninstrumented_s"]["speculative"] for run in runs]
    ar = [run["uninstrumented_s"]["autoregressive"] for run in runs]
    return {"command": "tools/loop_costs.py" + (f" --repeats {repeats}" if repeats != REPEATS else ""),
            "setting": {"draft": draft.name, "target": target.name, "prompt": PROMPT, "N": N, "K": K,
                        "temperature": 1.0, "seeds": list(range(repeats))},
            "machine": machine_info(), "cores": os.cpu_count(), "load_average_before": before,
            "load_average_after": load_average(), "rows": summary(runs),
            "uninstrumented": {"speculative_s": float(np.median(spec)), "autoregressive_s": float(np.median(ar)),
                               "speedup": float(np.median(ar) / np.median(spec))},
            "instrumented": {"speculative_s": float(np.median([r["speculative_s"] for r in runs])),
                             "autoregressive_s": float(np.median([r["autoregressive_s"] for r in runs]))},
            "runs": runs}


def text_lines(results):
    s, u, i = results["setting"], results["uninstrumented"], results["instrumented"]
    lines = [f"{s['draft']} -> {s['target']}, {s['prompt']!r}, N = {s['N']}, K = {s['K']}, seeds "
             f"{s['seeds'][0]}-{s['seeds'][-1]}; load average {results['load_average_before']} -> "
             f"{results['load_average_after']}",
             f"without timers: speculative {u['speculative_s'] * 1e3:.0f} ms, autoregressive "
             f"{u['autoregressive_s'] * 1e3:.0f} ms, speedup {u['speedup']:.2f}x (medians); with them "
             f"{i['speculative_s'] * 1e3:.0f} / {i['autoregressive_s'] * 1e3:.0f} ms",
             f"{'part':<62} {'us':>8}  per            share of its run"]
    for row in results["rows"]:
        lines.append(f"{row['part']:<62} {row['seconds'] * 1e6:8.0f}  {row['per']:<14} {row['share_of_run']:6.1%}")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS, help=f"rounds, seeds 0 .. repeats - 1 (default {REPEATS})")
    parser.add_argument("--save", action="store_true", help="write benchmarks/loop-costs.json (to commit)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        sys.exit(f"error: --repeats {args.repeats}: at least one round")
    results = measure(args.repeats)
    print("\n".join(text_lines(results)))
    out = results_path("loop-costs.json", save=args.save)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(out, json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")
    if args.save:
        from render_docs import render_docs
        print("rendered from it:", ", ".join(render_docs()) or "(no document changed)")


if __name__ == "__main__":
    main()
