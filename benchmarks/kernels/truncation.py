"""Top-k and top-p of a 50,257-token row: picogpt.sampling's against the whole-row np.partition /
np.sort before it (former.py), on rows of every kind, and in the quick start's command.

    python benchmarks/kernels/truncation.py rows --rounds 9        # one filter call, per kind of row
    python benchmarks/kernels/truncation.py command --rounds 6     # the quick start, --top-k 5 / --top-p 0.9

`rows` times, in one process, each filter (top-k 5 and top-p 0.9, before and now) on each kind of
row: the teaching pair's draft row and target rows (K + 1 = 5 of them, as the scoring call hands
them over) after "And God said", random logits, a constant row, and logits of 50 distinct values.
Beside them, in the same rounds, it times what a draft call of the loop costs (one token of the
draft on its KV cache, softmax64 of its logits), and softmax64 of one row alone (the float64
distribution every call pays): truncation is worth its place if it is a small fraction of that.
Every round takes the items in turn (the order reversed every other round), so a change in the
machine's load hits all of them; a ratio is taken within a round.

`command` runs the quick start's command (`python -m picogpt speculate ... --compare --json`) in
fresh processes: without truncation, with --top-k 5 and with --top-p 0.9, each also with the
filters before (former.py's, patched into picogpt.sampling), in a rotating order, and reads the
speedup each printed. Load averages are recorded around every process. Results: results-truncation.json
here (or --out), each mode under its own key.
"""

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import former
import numpy as np

import picogpt
from picogpt import sampling
from picogpt.measure import compare, machine

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from candidates import machine as machine_of_run  # noqa: E402

PROMPT, N, K, TOP_K, TOP_P = "And God said", 64, 4, 5, 0.9
QUICK_START = ["speculate", "--prompt", PROMPT, "-n", str(N), "-K", str(K), "--seed", "0", "--compare", "--json"]
FILTERS = {"before": (former.partition_top_k_filter, former.sort_top_p_filter),
           "now": (sampling.top_k_filter, sampling.top_p_filter)}


def rows_of_every_kind():
    """{kind: probabilities [n_vocab] or [K + 1, n_vocab]} and the draft call to compare with."""
    draft, target = picogpt.course_models(verbose=False)
    ids = picogpt.tokenizer().encode(PROMPT)
    rng = np.random.default_rng(0)
    n_vocab = target.config.n_vocab
    rows = {"teaching pair, draft row": sampling.softmax64(draft(ids)[-1]),
            f"teaching pair, {K + 1} target rows": sampling.softmax64(target(ids + [11] * K)[-(K + 1):]),
            "random logits": sampling.softmax64(rng.standard_normal(n_vocab)),
            "constant": np.full(n_vocab, 1 / n_vocab),
            "50 distinct logits": sampling.softmax64(rng.integers(0, 50, n_vocab).astype(np.float64))}
    cache = draft.new_cache()
    rows_of_every_kind.draft_logits = draft(ids, cache)[-1]  # [n_vocab] float32

    def draft_call():  # one token of the draft on its cache, and its distribution
        sampling.softmax64(draft([11], cache)[-1])
        cache.truncate(len(ids))
    return rows, draft_call


def time_calls(function, calls):
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        function()
        seconds.append(time.perf_counter() - start)
    return float(np.median(seconds))


def measure_rows(rounds, calls):
    rows, draft_call = rows_of_every_kind()
    logits = rows_of_every_kind.draft_logits
    items = {"draft call": draft_call, "softmax64 of one row": lambda: sampling.softmax64(logits)}
    for kind, probs in rows.items():
        for way, (top_k_filter, top_p_filter) in FILTERS.items():
            items[f"{kind} | top-k {TOP_K} | {way}"] = lambda f=top_k_filter, p=probs: f(p, TOP_K)
            items[f"{kind} | top-p {TOP_P} | {way}"] = lambda f=top_p_filter, p=probs: f(p, TOP_P)
    for kind, probs in rows.items():  # the same output, or the comparison means nothing
        for (before, now), control in zip(zip(*FILTERS.values()), (TOP_K, TOP_P)):
            assert np.array_equal(before(probs, control), now(probs, control)), kind
    times = {name: [] for name in items}
    loads = []
    for round_ in range(rounds):
        loads.append(machine.load_average())
        for name in (list(items) if round_ % 2 == 0 else list(items)[::-1]):
            items[name]()  # not timed: the first call after another item's
            times[name].append(time_calls(items[name], calls))
    summary = {}
    for kind in rows:
        for control in (f"top-k {TOP_K}", f"top-p {TOP_P}"):
            before, now = times[f"{kind} | {control} | before"], times[f"{kind} | {control} | now"]
            summary[f"{kind} | {control}"] = {
                "now / before": float(np.median(np.divide(now, before))),
                "now faster in": f"{sum(n < b for n, b in zip(now, before))} of {rounds} rounds",
                "now / draft call": float(np.median(np.divide(now, times["draft call"]))),
                "before / draft call": float(np.median(np.divide(before, times["draft call"])))}
            print(f"{kind:32s} {control:9s} now/before {summary[f'{kind} | {control}']['now / before']:.3f}  "
                  f"now/draft call {summary[f'{kind} | {control}']['now / draft call']:.3f}  "
                  f"before/draft call {summary[f'{kind} | {control}']['before / draft call']:.3f}", flush=True)
    softmax_share = float(np.median(np.divide(times["softmax64 of one row"], times["draft call"])))
    print(f"softmax64 of one row / draft call {softmax_share:.3f}")
    return {"rounds": rounds, "calls": calls, "softmax64 / draft call": softmax_share, "load_before_rounds": loads,
            "load_after": machine.load_average(), "times_s": times, "summary": summary}


def command_line(way, truncation):
    """The quick start in a fresh process, with the filters of `way` patched into picogpt.sampling."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import former; from picogpt import sampling; "
            "sampling.top_k_filter, sampling.top_p_filter = former.partition_top_k_filter, former.sort_top_p_filter; "
            "from picogpt.cli import main; sys.exit(main(sys.argv[2:]))")
    start = [sys.executable, "-m", "picogpt"] if way == "now" else [sys.executable, "-c", code, str(HERE)]
    return start + QUICK_START + truncation


def measure_command(rounds):
    conditions = {"no truncation": [], f"--top-k {TOP_K}": ["--top-k", str(TOP_K)],
                  f"--top-p {TOP_P}": ["--top-p", str(TOP_P)]}
    runs = []
    pairs = [(way, name) for name in conditions for way in FILTERS if not (name == "no truncation" and way == "before")]
    for round_ in range(rounds):
        for way, name in pairs[round_ % len(pairs):] + pairs[:round_ % len(pairs)]:
            load_before = machine.load_average()
            done = subprocess.run(command_line(way, conditions[name]), capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{name}, {way}: exit status {done.returncode}: {done.stderr.strip()[-2000:]}")
            result = json.loads(done.stdout)
            runs.append({"round": round_, "filters": way, "truncation": name, "speedup": result["speedup"],
                         "seconds": result["seconds"], "ars_seconds": result["ars_seconds"],
                         "load_before": load_before, "load_after": machine.load_average()})
            print(f"round {round_ + 1}/{rounds} {name:14s} {way:6s} speedup {result['speedup']:.2f}x, "
                  f"load {load_before[0]}", flush=True)
    summary = {}
    for way, name in pairs:
        ratios = [run["speedup"] / base["speedup"] for run in runs for base in runs
                  if (run["filters"], run["truncation"]) == (way, name) and base["truncation"] == "no truncation"
                  and base["round"] == run["round"]]
        speedups = [run["speedup"] for run in runs if (run["filters"], run["truncation"]) == (way, name)]
        # the goal (within 10% of the speedup without truncation) holds when the 95% sign-test interval of
        # the round-by-round ratio lies above 0.9, fails when it lies below, and is not resolved otherwise
        median, low, high, _ = compare.median_interval(ratios)
        goal = "holds" if low >= 0.9 else "fails" if high < 0.9 else "not resolved"  # nan bounds: not resolved
        summary[f"{name} | {way}"] = {"speedup median": float(np.median(speedups)),
                                      "speedup range": [float(min(speedups)), float(max(speedups))],
                                      "speedup / same round's without truncation": median,
                                      "95% interval of that ratio": [low, high], "within 10%": goal}
        print(f"{name:14s} {way:6s} speedup {np.median(speedups):.2f}x ({min(speedups):.2f}-{max(speedups):.2f}), "
              f"/ without truncation in the same round {median:.2f} (95% interval {low:.2f}-{high:.2f}): "
              f"within 10% {goal}")
    return {"rounds": rounds, "command": "python -m picogpt " + shlex.join(QUICK_START), "runs": runs, "summary": summary}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["rows", "command"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20, help="calls of each item per round (rows)")
    parser.add_argument("--out", type=Path, default=HERE / "results-truncation.json")
    args = parser.parse_args(argv)
    record = json.loads(args.out.read_text()) if args.out.exists() else {}
    result = measure_rows(args.rounds, args.calls) if args.mode == "rows" else measure_command(args.rounds)
    record[args.mode] = {"machine": machine_of_run(), "command": "benchmarks/kernels/truncation.py " + " ".join(
        sys.argv[1:] if argv is None else argv)} | result
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"raw times: {args.out}")


if __name__ == "__main__":
    main()
