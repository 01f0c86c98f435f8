"""Does the page size of the weights' memory matter? An experiment for benchmarks/README.md.

    .venv/bin/python tools/page_sizes.py [--model gpt2-xl] [--runs 7]   # after `make .venv/.installed`

Every address the CPU reads is translated through page tables; a small cache of recent
translations (the TLB) covers a few MB of 4 KB pages, or GBs of 2 MB pages ("huge pages").
Decoding streams every weight once per token, so it needs a translation for every page. Which
size the weights get depends on the OS: a private copy gets 2 MB pages when it asks for them
(NumPy does, Linux's transparent huge pages permitting), while memory-mapped files get them
only if the page cache happened to hold the file in 2 MB pieces, which depends on how
fragmented free memory was when the file was read. `python -m picogpt bench` records the share
for each engine; this tool isolates the effect. It copies the model's fast-path weights into
anonymous memory three times (in huge pages; in 4 KB pages; in 4 KB pages scattered over
physical memory) and times one-token decode at context 128 on each, beside the bandwidth
ceiling, in interleaved rounds. Writes build/bench/page-sizes.json (benchmarks/ with --save). Linux only; needs memory
for three copies of the weights (GPT-2 XL: three times 6.2 GB).
"""

import argparse
import json
import mmap
import sys
import time

import numpy as np
import pages

from picogpt.bench.checkpoints import resolve_models
from picogpt.bench.decode import Engine, prompt_ids
from picogpt.bench.rounds import ceiling_tasks, describe_ceiling, interleaved
from picogpt.io.atomic import write_text_atomically
from picogpt.io.params import leaves, map_leaves
from picogpt.measure import machine
from picogpt.measure.results import results_path
from picogpt.model import load_checkpoint

LAYOUTS = {  # name: (advice, first touch of the pages in a random order)
    "2 MB pages": (mmap.MADV_HUGEPAGE, False),
    "4 KB pages": (mmap.MADV_NOHUGEPAGE, False),
    "4 KB pages, scattered": (mmap.MADV_NOHUGEPAGE, True),
}


def copier(n_bytes, advice, scatter):
    """copy(array) for map_leaves: consecutive copies in one anonymous mapping, advised before
    any page of it exists (the page size is chosen when a page is first touched). With scatter,
    the pages are first touched in a random order: the OS hands out physical pages roughly in
    the order they are asked for, so neighbouring addresses land far apart in physical memory,
    as a file's pages do when it is read into the page cache of a long-running machine."""
    region = mmap.mmap(-1, n_bytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region.madvise(advice)
    if scatter:
        pages = np.random.default_rng(0).permutation(n_bytes // mmap.PAGESIZE) * mmap.PAGESIZE
        np.frombuffer(region, np.uint8)[pages] = 0
    offset = 0

    def copy(array):
        nonlocal offset
        out = np.frombuffer(region, array.dtype, array.size, offset).reshape(array.shape)
        out[...] = array
        offset += -(-array.nbytes // 64) * 64  # keep every array 64-byte aligned
        return out

    return copy


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2-xl", help="a model name (random weights if not downloaded)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", default=None, help="the results file (default: build/bench/page-sizes.json, or "
                        "benchmarks/page-sizes.json with --save)")
    parser.add_argument("--save", action="store_true", help="write benchmarks/page-sizes.json, to commit it")
    args = parser.parse_args()
    (label, (path, source)), = resolve_models([args.model])[0].items()
    model = load_checkpoint(path).prepare()
    n_bytes = sum(-(-a.nbytes // 64) * 64 for a in leaves(model.fast_params))
    engines = {}
    for name, (advice, scatter) in LAYOUTS.items():
        print(f"copying {n_bytes / 1e9:.1f} GB of weights into memory in {name}", file=sys.stderr, flush=True)
        copy = load_checkpoint(path)
        copy.fast_params = map_leaves(copier(n_bytes, advice, scatter), model.fast_params)
        engines[name] = Engine(copy)
    ids = prompt_ids(129, model.config.n_vocab)
    for engine in engines.values():
        engine.start(ids[:128])
    matrices, x = machine.bandwidth_matrices(int(1.6e9))
    tasks = {("ceiling", way): task for way, task in ceiling_tasks(matrices, x).items()}
    for name, engine in engines.items():
        tasks[(name, 1)] = (lambda e=engine: e.forward(ids[128:129]), lambda e=engine: e.rollback(128))
    print(f"timing {args.runs} interleaved rounds", file=sys.stderr, flush=True)
    times = interleaved(tasks, args.runs, 1)
    ceiling = describe_ceiling({way: t for (kind, way), t in times.items() if kind == "ceiling"}, matrices)
    floor_s = model.bytes_per_token / 1e9 / ceiling["gb_per_s"]
    results = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "model": label, "source": source,
               "command": " ".join(["python tools/page_sizes.py", *sys.argv[1:]]), "machine": machine.machine_info(),
               "context": 128, "ceiling": ceiling, "floor_s": floor_s, "engines": {}}
    for name, engine in engines.items():
        median = float(np.median(times[(name, 1)]))
        results["engines"][name] = {"median_s": median, "vs_floor": median / floor_s, "runs_s": times[(name, 1)],
                                    "huge_page_fraction": pages.huge_page_fraction(leaves(engine.model.fast_params))}
    out = results_path("page-sizes.json", args.save, args.out)
    write_text_atomically(out, json.dumps(results, indent=1) + "\n")
    if args.save:
        from render_docs import render_docs
        print("rendered from it:", ", ".join(map(str, render_docs())) or "(no document changed)", file=sys.stderr)
    print(f"{label}: ceiling {ceiling['gb_per_s']:.1f} GB/s, floor {floor_s * 1e3:.1f} ms")
    for name, e in results["engines"].items():
        share = "?" if e["huge_page_fraction"] is None else f"{e['huge_page_fraction']:.0%}"
        print(f"  weights in {name}: decode {e['median_s'] * 1e3:.1f} ms = {e['vs_floor']:.2f}x floor "
              f"({share} of that memory in 2 MB pages)")
    print(f"saved {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
