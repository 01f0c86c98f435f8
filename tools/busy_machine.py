"""How much a busy machine slows sampling: the teaching pair idle, then beside busy processes.

A laptop with a browser and another notebook kernel open is a loaded machine. This runs the
one speedup measurement (picogpt.measure.speedup.measure_speedup) on the teaching pair twice,
side by side in one process: once on the idle machine, once while `--busy` processes spin on
the CPU (each a bounded `python -c "while True: pass"`, stopped after the measurement), and
writes both with their ratio to build/bench/busy.json (benchmarks/busy.json with --save).

    .venv/bin/python tools/busy_machine.py                 # 2 busy processes, K = 4, N = 64, 3 repeats
    PICOGPT_THREADS=1 .venv/bin/python tools/busy_machine.py --busy 2
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import picogpt
from picogpt.io.atomic import write_text_atomically
from picogpt.measure import speedup
from picogpt.measure.results import results_path

REPO = Path(__file__).resolve().parent.parent
SPIN = "import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"


def busy_processes(n, seconds):
    """n processes that keep a core busy for at most `seconds` (they stop by themselves)."""
    return [subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=seconds)]) for _ in range(n)]


def measure(draft, target, ids, args):
    return speedup.measure_speedup(draft, target, ids, args.N, [args.K], repeats=args.repeats)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--busy", type=int, default=2, help="busy processes beside the measurement")
    parser.add_argument("--K", type=int, default=4)
    parser.add_argument("-N", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="the results file (default: build/bench/busy.json, or "
                        "benchmarks/busy.json with --save)")
    parser.add_argument("--save", action="store_true", help="write benchmarks/busy.json, to commit it")
    args = parser.parse_args(argv)
    draft, target = picogpt.load("tiny-draft"), picogpt.load("tiny-target")
    ids = picogpt.tokenizer().encode("And the LORD said unto")
    idle = measure(draft, target, ids, args)
    spinners = busy_processes(args.busy, seconds=600)
    try:
        time.sleep(1.0)  # let them take their cores
        busy = measure(draft, target, ids, args)
    finally:
        for process in spinners:
            process.kill()
            process.wait()
    slower = {"autoregressive": busy.autoregressive_s.median / idle.autoregressive_s.median,
              "speculative": busy.by_K[args.K].seconds.median / idle.by_K[args.K].seconds.median}
    result = {"command": " ".join(["python tools/busy_machine.py", *(argv or sys.argv[1:])]),
              "threads": os.environ.get("PICOGPT_THREADS") or "default (all cores)", "busy_processes": args.busy,
              "cores": os.cpu_count(), "idle": speedup.as_dict(idle), "busy": speedup.as_dict(busy),
              "slower_when_busy": slower}
    out = results_path("busy.json", args.save, args.out)
    write_text_atomically(out, json.dumps(result, indent=1) + "\n")
    if args.save:
        from render_docs import render_docs
        print("rendered from it:", ", ".join(map(str, render_docs())) or "(no document changed)", file=sys.stderr)
    print(f"{args.busy} busy processes: autoregressive {slower['autoregressive']:.2f}x slower, "
          f"speculative (K = {args.K}) {slower['speculative']:.2f}x slower than idle; "
          f"speedup {idle.by_K[args.K].speedup:.2f}x idle, {busy.by_K[args.K].speedup:.2f}x busy -> {out}")


if __name__ == "__main__":
    main()
