"""A newcomer's first hour, measured: the README's quick start on a fresh clone, step by step.

    .venv/bin/python tools/first_hour.py                 # prints the figures; writes build/first-hour.json
    .venv/bin/python tools/first_hour.py --save          # also benchmarks/first-hour.json + the README's block
    .venv/bin/python tools/first_hour.py --skip-make-test   # without the test suite (minutes less)
    .venv/bin/python tools/first_hour.py --runs 9        # the README's command in 9 fresh processes (default 5)

It clones this repository's HEAD into a temporary folder and there, as the README says:
- installs (`make` of the virtual environment) and runs `make test`, timed;
- starts `make lab` headless and times it until the course is served;
- runs the README's `speculate --seed 0 --compare` command, exactly as written, as --runs fresh
  processes one after another (the first one on the fresh clone pays numba's compile, once per
  install; the others pay nothing): the text is the same every time, the speedup it prints is the
  range the README states;
- measures the same setting in one process with measure/speedup.measure_speedup, so the command
  line and the in-process measurement can be compared.
The results go to build/first-hour.json (git ignores build/), or with --save to
benchmarks/first-hour.json, from which tools/render_docs.py renders README.md's quick-start
block (`python tools/render_docs.py`).
"""

import argparse
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from browser_test import free_port

from picogpt.io.atomic import write_text_atomically

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


def lab_start_s(clone, env):
    """Seconds from `make lab` (headless) to JupyterLab serving the notebooks."""
    port, token = free_port(), "first-hour"
    start = time.perf_counter()
    server = subprocess.Popen(["make", "-s", "lab", f"LAB_ARGS=--no-browser --port={port} --IdentityProvider.token={token}"],
                              cwd=clone, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - start < 120 and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/?token={token}", timeout=2):
                    return time.perf_counter() - start
            except OSError:
                time.sleep(0.1)
        sys.exit("make lab did not serve the course within 120 s")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def speedup_of(stdout):
    return float(re.search(r"speedup ([0-9.]+)x", stdout).group(1))


def in_process(clone, env):
    """measure/speedup.measure_speedup at the README's setting in one process (seeds 0-2, as --compare)."""
    script = f"""
import json, picogpt
from picogpt.measure.speedup import measure_speedup
draft, target = picogpt.course_models(verbose=False)
m = measure_speedup(draft, target, picogpt.tokenizer().encode({PROMPT!r}), {N}, [{K}], repeats=3, seed={SEED})
print(json.dumps({{"speedup": m.by_K[{K}].speedup, "alpha_hat": m.alpha_hat, "draft": m.draft, "target": m.target}}))
"""
    return json.loads(timed([str(clone / ".venv" / "bin" / "python"), "-c", script], clone, env)[1].stdout)


def load_average():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def measure(skip_make_test, n_runs):
    with tempfile.TemporaryDirectory(prefix="picogpt-first-hour-") as tmp:
        clone = Path(tmp) / "picogpt"
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        env = venv_env(clone)
        results = {"commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True,
                                            text=True).stdout.strip(),
                   "cores": os.cpu_count(), "load_average_before": load_average(), "steps": {}}
        steps = results["steps"]
        print("installing into .venv ...", file=sys.stderr)
        steps["install_s"] = timed(["make", "-s", ".venv/.installed"], clone, env)[0]
        if not skip_make_test:
            print("make test ...", file=sys.stderr)
            steps["make_test_s"] = timed(["make", "-s", "test"], clone, env)[0]
        steps["lab_start_s"] = lab_start_s(clone, env)
        runs = []
        for n in range(n_runs):
            seconds, done = timed(SPECULATE, clone, env)
            runs.append({"seconds": seconds, "speedup": speedup_of(done.stdout),
                         "compiled_here": "compiling the fast kernels" in done.stderr, "load_average": load_average(),
                         "stdout": done.stdout, "stderr_lines": done.stderr.strip().splitlines()[-3:]})
            print(f"run {n + 1}: {seconds:.1f} s, {runs[-1]['speedup']:.2f}x", file=sys.stderr)
        speedups = [run["speedup"] for run in runs]
        results["speculate"] = {"command": COMMAND, "runs": runs, "median_speedup": statistics.median(speedups),
                                "low": min(speedups), "high": max(speedups)}
        results["in_process"] = in_process(clone, env)
        results["load_average_after"] = load_average()
        return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-make-test", action="store_true", help="do not time make test (saves minutes)")
    parser.add_argument("--runs", type=int, default=5, help="fresh processes of the README's command (default 5)")
    parser.add_argument("--save", action="store_true",
                        help="write benchmarks/first-hour.json and render README.md's quick-start block from it")
    args = parser.parse_args(argv)
    if args.runs < 1:
        sys.exit(f"error: --runs {args.runs}: at least one run of the README's command")
    results = measure(args.skip_make_test, args.runs)
    s, inside = results["speculate"], results["in_process"]["speedup"]
    print(f"the README's command in {args.runs} fresh processes: {s['low']:.2f}-{s['high']:.2f}x, median "
          f"{s['median_speedup']:.2f}x; measure_speedup in one process: {inside:.2f}x")
    print(json.dumps(results["steps"]))
    out = REPO / ("benchmarks" if args.save else "build") / "first-hour.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(out, json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")
    if args.save:
        from render_docs import render_docs
        render_docs()


if __name__ == "__main__":
    main()
