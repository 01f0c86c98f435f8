"""A newcomer's first hour, measured: the README's quick start on a fresh clone, step by step.

    .venv/bin/python tools/first_hour.py                 # prints the figures; writes build/first-hour.json
    .venv/bin/python tools/first_hour.py --save          # also benchmarks/first-hour.json + the README's block
    .venv/bin/python tools/first_hour.py --skip-make-test   # without make test and make quick (minutes less)
    .venv/bin/python tools/first_hour.py --runs 9        # the README's command in 9 + 9 fresh processes (default 5)
    .venv/bin/python tools/first_hour.py --busy 0        # without the runs beside busy processes

It clones this repository's HEAD into a temporary folder and there, as the README says:
- starts `make lab` headless and times it until the course is served: the first time, when it
  makes .venv (installing, and compiling picogpt's kernels), and again once .venv exists;
- runs `make test` and `make quick`, timed;
- runs the README's `speculate --seed 0 --compare` command, exactly as written, as --runs fresh
  processes one after another on the machine as it is, then --runs more beside --busy processes
  that keep a core busy each (tools/busy_machine.py's; the load a browser and a second notebook
  kernel put on a laptop), started --settle seconds before, so that the load average shows them;
  beside them too, `make lab` once .venv exists, then on the clone without its .venv (a first
  install and compile again), so that the README's durations include a busy machine.
  The machine's 1-minute load average is recorded before and after every run: a shared machine's
  own load moves, and the figures are read beside it. The text is the same every time; the
  speedups printed are the ranges the README states;
- measures the same setting in one process with measure/speedup.measure_speedup, so the command
  line and the in-process measurement can be compared.
The results go to build/first-hour.json (git ignores build/), or with --save to
benchmarks/first-hour.json, which keeps what every earlier save measured (each run's speedup, load
average and seconds, and each step's seconds), so that the ranges it states span days and loads; from it tools/render_docs.py
renders README.md's quick-start block (`python tools/render_docs.py`).
"""

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from browser_test import free_port
from busy_machine import busy_processes
from render_docs import first_hour_summary, render_docs

from picogpt.io.atomic import write_text_atomically
from picogpt.measure.compare import fewest_pairs

REPO = Path(__file__).resolve().parent.parent
COMMAND = '.venv/bin/python -m picogpt speculate --prompt "And God said" -n 64 -K 4 --seed 0 --compare'  # the README's
SPECULATE = shlex.split(COMMAND)
PROMPT, N, K, SEED = "And God said", 64, 4, 0  # its settings, for the in-process measurement


def timed(command, cwd, env, timeout=1800):
    """(seconds, CompletedProcess) of a command run to its end."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds, done


def venv_env(clone):
    """The environment of a shell with the clone's .venv activated."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PICOGPT_")}
    env["VIRTUAL_ENV"] = str(clone / ".venv")
    env["PATH"] = f"{clone / '.venv' / 'bin'}{os.pathsep}{env['PATH']}"
    return env


def lab_start_s(clone, env, limit_s=120):
    """Seconds from `make lab` (headless) to JupyterLab serving the notebooks."""
    port, token = free_port(), "first-hour"
    start = time.perf_counter()
    server = subprocess.Popen(["make", "-s", "lab", f"LAB_ARGS=--no-browser --port={port} --IdentityProvider.token={token}"],
                              cwd=clone, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - start < limit_s and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/?token={token}", timeout=2):
                    return time.perf_counter() - start
            except OSError:
                time.sleep(0.1)
        sys.exit(f"make lab did not serve the course within {limit_s} s")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def speedup_of(stdout):
    return float(re.search(r"speedup ([0-9.]+)x", stdout).group(1))


def verdict_of(stdout):
    """What the run's own verdict (measure/compare.py's, printed under its speedup) concluded:
    'faster', 'slower' or 'not resolved' (None if it printed none)."""
    found = re.search(r"^  (not resolved|speculative sampling (faster|slower) than autoregressive sampling)", stdout,
                      re.MULTILINE)
    return None if found is None else (found.group(2) or found.group(1))


def in_process(clone, env):
    """measure/speedup.measure_speedup at the README's setting in one process (seeds and repeats as --compare)."""
    script = f"""
import json, picogpt
from picogpt.measure.speedup import measure_speedup
draft, target = picogpt.course_models(verbose=False)
m = measure_speedup(draft, target, picogpt.tokenizer().encode({PROMPT!r}), {N}, [{K}], repeats={fewest_pairs()}, seed={SEED})
print(json.dumps({{"speedup": m.by_K[{K}].speedup, "alpha_hat": m.alpha_hat, "draft": m.draft, "target": m.target}}))
"""
    return json.loads(timed([str(clone / ".venv" / "bin" / "python"), "-c", script], clone, env)[1].stdout)


def load_average():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def command_runs(clone, env, n_runs, label):
    """The README's command in n_runs fresh processes: each run's seconds, the speedup it printed,
    and the load average before and after it; with their low, high and median speedup."""
    runs = []
    for n in range(n_runs):
        before = load_average()
        seconds, done = timed(SPECULATE, clone, env)
        runs.append({"seconds": seconds, "speedup": speedup_of(done.stdout), "verdict": verdict_of(done.stdout),
                     "load_average_before": before,
                     "compiled_here": "compiling the fast kernels" in done.stderr, "load_average": load_average(),
                     "stdout": done.stdout, "stderr_lines": done.stderr.strip().splitlines()[-3:]})
        print(f"{label} run {n + 1}: {seconds:.1f} s, {runs[-1]['speedup']:.2f}x, load average "
              f"{runs[-1]['load_average']}", file=sys.stderr)
    speedups = [run["speedup"] for run in runs]
    return {"runs": runs, "median_speedup": statistics.median(speedups), "low": min(speedups), "high": max(speedups)}


def measure(skip_make_test, n_runs, n_busy, settle_s):
    with tempfile.TemporaryDirectory(prefix="picogpt-first-hour-") as tmp:
        clone = Path(tmp) / "picogpt"
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        env = venv_env(clone)
        results = {"date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                   "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True,
                                            text=True).stdout.strip(),
                   "cores": os.cpu_count(), "load_average_before": load_average(), "steps": {}}
        steps = results["steps"]
        print("make lab on the fresh clone (it makes .venv first) ...", file=sys.stderr)
        steps["lab_first_s"] = lab_start_s(clone, env, limit_s=1800)
        steps["lab_start_s"] = lab_start_s(clone, env)
        if not skip_make_test:
            for target in ("test", "quick"):
                print(f"make {target} ...", file=sys.stderr)
                steps[f"make_{target}_s"] = timed(["make", "-s", target], clone, env)[0]
        results["speculate"] = {"command": COMMAND, **command_runs(clone, env, n_runs, "alone:")}
        if n_busy:
            spinners = busy_processes(n_busy, seconds=settle_s + 60 * n_runs + 1800)
            try:
                print(f"{n_busy} busy processes; {settle_s} s for the load average to show them ...", file=sys.stderr)
                time.sleep(settle_s)
                results["busy"] = {"busy_processes": n_busy, "settle_s": settle_s,
                                   **command_runs(clone, env, n_runs, f"beside {n_busy} busy processes:")}
                print("make lab beside them, then again on a clone without .venv ...", file=sys.stderr)
                busy_steps = results["busy"]["steps"] = {"lab_start_s": lab_start_s(clone, env)}
                shutil.rmtree(clone / ".venv")  # the compiled kernels live inside it: a first time again
                busy_steps["lab_first_s"] = lab_start_s(clone, env, limit_s=1800)
            finally:
                for process in spinners:
                    process.kill()
                    process.wait()
        results["in_process"] = in_process(clone, env)
        results["load_average_after"] = load_average()
        return results


def with_earlier(results, out):
    """results, with every earlier save of `out` kept as its summary: the README's ranges then span
    the days the command was measured on, not one run's hour."""
    try:
        before = json.loads(out.read_text())
    except (OSError, ValueError):
        return results
    return results | {"earlier": [*before.pop("earlier", []), first_hour_summary(before)]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-make-test", action="store_true", help="do not time make test and make quick (saves minutes)")
    parser.add_argument("--runs", type=int, default=5, help="fresh processes of the README's command, alone and "
                        "beside the busy processes (default 5 each)")
    parser.add_argument("--busy", type=int, default=2, help="busy processes beside the second set of runs (default 2; "
                        "0: none)")
    parser.add_argument("--settle", type=int, default=60, help="seconds the busy processes spin before the runs "
                        "beside them start, so that the 1-minute load average shows them (default 60)")
    parser.add_argument("--save", action="store_true",
                        help="write benchmarks/first-hour.json and render README.md's quick-start block from it")
    args = parser.parse_args(argv)
    if args.runs < 1:
        sys.exit(f"error: --runs {args.runs}: at least one run of the README's command")
    results = measure(args.skip_make_test, args.runs, args.busy, args.settle)
    inside = results["in_process"]["speedup"]
    for label, s in (("alone", results["speculate"]), (f"beside {args.busy} busy processes", results.get("busy"))):
        if s:
            print(f"the README's command in {args.runs} fresh processes, {label}: {s['low']:.2f}-{s['high']:.2f}x, "
                  f"median {s['median_speedup']:.2f}x")
    print(f"measure_speedup in one process: {inside:.2f}x")
    print(json.dumps(results["steps"]))
    out = REPO / ("benchmarks" if args.save else "build") / "first-hour.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.save:
        results = with_earlier(results, out)
    write_text_atomically(out, json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")
    if args.save:
        render_docs()


if __name__ == "__main__":
    main()
