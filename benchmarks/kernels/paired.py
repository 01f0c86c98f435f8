"""The products decode_profile.py led to, each against the products before it: one-token decodes of
GPT-2 small and XL, paired block by block inside fresh processes.

    python benchmarks/kernels/paired.py --processes 6                 # a quiet machine
    python benchmarks/kernels/paired.py --processes 6 --busy 2        # beside two busy processes

Each process loads the bench's checkpoints (memory-mapped), caches CONTEXT positions, and then
in each block times --calls one-token decodes with each way of computing the products in turn
(the model's `matmul` swapped; the order reversed from one process to the next), so that a change
in the machine's load hits every way alike. A way is kept only where it is faster than the one
before it in every block of every process. --busy N starts N processes that keep a core busy for
the whole run (tools/busy_machine.py's). Results: results-paired.json here (or --out).
"""

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

import former
import numpy as np

from picogpt.bench.checkpoints import resolve_models
from picogpt.fast import kernels
from picogpt.measure import machine
from picogpt.model import load_checkpoint

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from busy_machine import busy_processes  # noqa: E402
from candidates import machine as machine_of_run  # noqa: E402

CONTEXT = 128


def head_by_outputs(x, W):
    """The products before, except the LM head cut into bands of wte's rows (kernels.split_outputs)."""
    if kernels.route(x, W) == "split_outputs":
        return kernels.split_outputs(x, W)
    return former.one_core_matmul(x, W)


WAYS = {  # each against the one before it
    "before: one row under 16 MiB on the calling thread, the LM head by its inputs (former.one_core_matmul)":
        former.one_core_matmul,
    "+ the LM head by its outputs, bands of wte's rows (kernels.split_outputs)": head_by_outputs,
    "+ every big one-row product on the threads, 2 bands each: the package (kernels.compiled_matmul)":
        kernels.compiled_matmul,
}


def child(models, blocks, calls, reverse):
    """One process: {way: {model: [median seconds of each block]}}."""
    ways = list(WAYS)[::-1] if reverse else list(WAYS)
    loaded = []
    for name, (path, _) in models.items():
        model = load_checkpoint(path, name).prepare()
        ids = np.random.default_rng(0).integers(0, model.config.n_vocab, CONTEXT + 1)
        cache = model.new_cache()
        model(ids[:CONTEXT], cache)
        loaded.append((name, model, cache, ids[CONTEXT:]))
    times = {way: {name: [] for name in models} for way in WAYS}
    for _ in range(blocks):
        for name, model, cache, new in loaded:
            for way in ways:
                model.matmul = WAYS[way]
                model(new, cache)  # the first call after a switch is not timed
                cache.truncate(CONTEXT)
                seconds = []
                for _ in range(calls):
                    start = time.perf_counter()
                    model(new, cache)
                    seconds.append(time.perf_counter() - start)
                    cache.truncate(CONTEXT)
                times[way][name].append(float(np.median(seconds)))
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="gpt2,gpt2-xl")
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--calls", type=int, default=5, help="decodes per way and block")
    parser.add_argument("--busy", type=int, default=0, help="busy processes beside the measurement")
    parser.add_argument("--out", type=Path, default=HERE / "results-paired.json")
    parser.add_argument("--child", choices=["forwards", "backwards"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    models, _ = resolve_models(args.models.split(","))
    if args.child:
        print(json.dumps(child(models, args.blocks, args.calls, args.child == "backwards")))
        return
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    spinners = busy_processes(args.busy, seconds=3600) if args.busy else []
    runs = []
    try:
        for process in range(args.processes):
            order = "backwards" if process % 2 else "forwards"
            load_before = machine.load_average()
            done = subprocess.run([sys.executable, __file__, "--child", order, "--models", args.models, "--blocks",
                                   str(args.blocks), "--calls", str(args.calls)],
                                  capture_output=True, text=True, check=True)
            runs.append({"order": order, "load_before": load_before, "load_after": machine.load_average(),
                         "times_s": json.loads(done.stdout.strip().splitlines()[-1])})
            print(f"process {process + 1}/{args.processes} ({order}), load {load_before[0]}: " + "; ".join(
                f"{name} " + " / ".join(f"{1e3 * np.median(t[name]):.1f}" for t in runs[-1]["times_s"].values())
                for name in models) + " ms", flush=True)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    record = {"mode": "paired", "started": started, "machine": machine_of_run(), "kernel": kernels.compiled.name(),
              "command": "benchmarks/kernels/paired.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "context": CONTEXT, "blocks": args.blocks, "calls": args.calls, "busy_processes": args.busy,
              "ways": list(WAYS), "runs": runs}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    ways = list(WAYS)
    for name in models:
        for before, after in zip(ways, ways[1:]):
            ratios = [a / b for run in runs for a, b in zip(run["times_s"][after][name], run["times_s"][before][name])]
            print(f"{name}: {after[:40]} / the way before: {np.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}), "
                  f"faster in {sum(r < 1 for r in ratios)} of {len(ratios)} blocks")
    print(f"raw times: {args.out}")


if __name__ == "__main__":
    main()
