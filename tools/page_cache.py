"""How much page cache running a notebook on GPT-2 small + XL touches (a goal of
benchmarks/goals.json: notebook 01 on XL touches one copy of XL's checkpoint and nothing beside it).

1. The course pair's checkpoint files are dropped from the OS page cache (posix_fadvise
   DONTNEED: the clean pages of a file that no process maps go), and fincore confirms it.
2. The notebook runs top to bottom in a fresh kernel with PICOGPT_COURSE_MODELS=gpt2
   (`jupyter nbconvert --execute`, written to a temporary file: the committed notebook is not
   touched), while /proc/meminfo's Cached (every file: libraries, the kernel's own) is sampled.
3. fincore reads back how many bytes of every file in the pair's folders are in the page cache.
The notebook's wall time is recorded too (`seconds`): how long a learner waits for it on this pair.

Without the real GPT-2 downloaded, the pair is the bench's random-weight checkpoints of the
published shapes (`python -m picogpt bench` writes them once; so does this tool), reached
through a temporary PICOGPT_WEIGHTS_DIR of symbolic links. The notebook then prints nonsense
tokens; which bytes it reads does not depend on the values.

    .venv/bin/python tools/page_cache.py --save            # notebook 01 -> benchmarks/page-cache.json
    .venv/bin/python tools/page_cache.py --notebook notebooks/05-speedup.ipynb \
        --out benchmarks/page-cache-05.json --executed 05-on-gpt2.ipynb   # keep the executed copy
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pages
from goals import load_goals

from picogpt.bench.checkpoints import random_checkpoint, shown_path
from picogpt.course.pair import ENV as COURSE_MODELS_ENV
from picogpt.course.pair import PAIRS
from picogpt.io.atomic import write_text_atomically
from picogpt.io.registry import checkpoint_path, is_available
from picogpt.measure import machine
from picogpt.measure.results import results_path

REPO = Path(__file__).resolve().parent.parent
GOAL_FILE = "page-cache.json"  # the goal of benchmarks/goals.json that reads this tool's results
GOAL_NOTEBOOK = "01-gpt2-in-numpy.ipynb"  # the goal is about this notebook only


def goal_gb():
    """The goal's limit in GB, as benchmarks/goals.json states it."""
    return next(g["at_most"] for g in load_goals()[0] if g.get("params", {}).get("file") == GOAL_FILE)


def evict(path, attempts=20):
    """Drop a file's pages from the OS page cache (they are re-read on the next use) and return the
    bytes fincore still finds there (0 unless the OS keeps some). POSIX_FADV_DONTNEED is advice:
    on a busy machine it can leave a page that another core or a read still holds, so it is asked
    again, a little later each time, until fincore confirms the file is out."""
    for attempt in range(attempts):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        left = resident_bytes(path)
        if left == 0:
            return 0
        time.sleep(0.01 * (attempt + 1))
    return left


def resident_bytes(path):
    """Bytes of the file in the page cache (pages.page_cache_bytes: util-linux's fincore)."""
    resident = pages.page_cache_bytes(path)
    if resident is None:
        sys.exit("page_cache: this needs util-linux's fincore (Linux), which was not found or failed")
    return resident


def pair_folders(weights_dir):
    """{name: folder} of the course's GPT-2 pair: the downloaded checkpoints, else symbolic links in
    weights_dir to the random-weight ones of the same shapes."""
    folders = {}
    for name in PAIRS["gpt2"]:
        if is_available(name):
            folders[name] = checkpoint_path(name).parent
        else:
            folders[name] = random_checkpoint(name).parent
        (weights_dir / name).symlink_to(folders[name].resolve(), target_is_directory=True)
    return folders


def sample_cached(stop, samples, every_s=0.5):
    """Append /proc/meminfo's Cached (bytes) to samples until stop is set."""
    while not stop.is_set():
        samples.append(pages.meminfo_bytes().get("Cached", 0))
        stop.wait(every_s)


def run_notebook(notebook, env, out_dir):
    """Execute the notebook in a fresh kernel, written to out_dir; (seconds, Cached samples)."""
    command = [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
               "--ExecutePreprocessor.timeout=1800", "--output-dir", str(out_dir), str(notebook)]
    stop, samples = threading.Event(), []
    sampler = threading.Thread(target=sample_cached, args=(stop, samples), daemon=True)
    sampler.start()
    start = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True)
    finally:
        stop.set()
        sampler.join()
    if done.returncode:
        sys.exit(f"page_cache: {notebook} failed to run:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start, samples


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--notebook", default=str(REPO / "notebooks" / "01-gpt2-in-numpy.ipynb"))
    parser.add_argument("--out", default=None, help="the results file (default: build/bench/page-cache.json, or "
                        "benchmarks/page-cache.json with --save)")
    parser.add_argument("--save", action="store_true", help="write benchmarks/page-cache.json, to commit it")
    parser.add_argument("--executed", help="also keep the executed notebook at this path")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="picogpt-page-cache-") as tmp:
        weights_dir = Path(tmp) / "weights"
        weights_dir.mkdir()
        folders = pair_folders(weights_dir)
        files = sorted(f for folder in folders.values() for f in folder.iterdir() if f.is_file())
        for f in files:
            evict(f)
        before = {f: resident_bytes(f) for f in files}
        env = dict(os.environ, **{COURSE_MODELS_ENV: "gpt2", "PICOGPT_WEIGHTS_DIR": str(weights_dir)})
        cached_before = pages.meminfo_bytes().get("Cached", 0)
        seconds, samples = run_notebook(Path(args.notebook), env, Path(tmp))
        after = {f: resident_bytes(f) for f in files}
        if args.executed:
            shutil.copyfile(Path(tmp) / Path(args.notebook).name, args.executed)
    touched = sum(after.values()) - sum(before.values())
    result = {
        "notebook": shown_path(args.notebook),
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "pair": {name: shown_path(folder) for name, folder in folders.items()},
        "seconds": round(seconds, 1),
        "files": {shown_path(f): {"size": f.stat().st_size, "in_page_cache_before": before[f],
                                  "in_page_cache_after": after[f]} for f in files},
        "checkpoint_bytes_touched": touched,
        "cached_rise_peak_bytes": max(samples, default=cached_before) - cached_before,
        "machine": {"memory_gb": machine.memory_total_gb(), "load_average": machine.load_average()},
    }
    goal = ""
    if Path(args.notebook).name == GOAL_NOTEBOOK:
        result.update(goal_gb=goal_gb(), met=touched <= goal_gb() * 1e9)
        goal = f" (goal <= {result['goal_gb']} GB: {'met' if result['met'] else 'missed'})"
    out = results_path("page-cache.json", args.save, args.out)
    write_text_atomically(out, json.dumps(result, indent=1) + "\n")
    if args.save:
        from render_docs import render_docs
        print("rendered from it:", ", ".join(map(str, render_docs())) or "(no document changed)", file=sys.stderr)
    for f in files:
        print(f"{shown_path(f)}: {before[f] / 1e9:.2f} GB in the page cache before, {after[f] / 1e9:.2f} GB after "
              f"(file {f.stat().st_size / 1e9:.2f} GB)")
    print(f"{result['notebook']} ran in {seconds:.0f} s and touched {touched / 1e9:.2f} GB of the pair's checkpoints"
          f"{goal}; Cached rose by at most "
          f"{result['cached_rise_peak_bytes'] / 1e9:.2f} GB during the run (every file). Written to {out}")


if __name__ == "__main__":
    main()
