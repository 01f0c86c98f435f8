"""Whose threads should share a one-row product: picogpt's own (picogpt/fast/threads.py), or numba's
parallel loops (`prange`) on one of its threading layers? The cost of one parallel region, then of
one shared product, paired inside fresh processes.

    python benchmarks/kernels/pool.py --processes 4 --blocks 5
    python benchmarks/kernels/pool.py --layers omp,omp-passive --shapes small
    python benchmarks/kernels/pool.py --decodes --shapes small --out benchmarks/kernels/results-pool-decode.json

A decode of GPT-2 small shares 48 products among the threads, XL 192; each pays the wake-up of
the threads that take part (decode_profile.py measures it inside a decode). A pool whose workers
spin a while before they sleep (GNU OpenMP's, by default GOMP_SPINCOUNT iterations; TBB's) may
wake faster than a Python thread blocked on a queue. Each process runs one threading layer:

- omp: numba's OpenMP layer on GNU libgomp, its default wait policy;
- omp-passive: the same with OMP_WAIT_POLICY=passive (workers sleep at once: the spin's share);
- tbb: numba's TBB layer (the `tbb` wheel from PyPI; its libtbb found through LD_LIBRARY_PATH);
- workqueue: numba's own portable layer, the one always present.

and times, in turn, block after block (the order reversed every other block): an empty region on
picogpt's threads (threads.parallel over 2 bands per thread, as compiled_rows cuts them) and an
empty prange region over as many bands; then one row times a weight of GPT-2's shapes with the
compiled band_product over those bands, on picogpt's threads (kernels.compiled_rows) and in a
prange loop, and the package's one-row product (kernels.split_inputs: OpenBLAS per band) beside
them. With --decodes, also whole one-token decodes (128 positions cached) of a model of each
shape's GPT-2 with random weights in memory, three ways: the package's products; the compiled
loops for one row too, on picogpt's threads; the same loops in prange (`prange_matmul`). Every
worker count is the threads picogpt uses (n_threads). The tbb layer needs `pip install tbb` in the
environment. Results: results-pool.json here (or --out).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from picogpt.fast import compiled, kernels, threads
from picogpt.measure import machine

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from candidates import machine as machine_of_run  # noqa: E402

LAYERS = {  # name -> environment of the process ({environment}: this Python's, where the tbb wheel puts libtbb.so.12)
    "omp": {"NUMBA_THREADING_LAYER": "omp"},
    "omp-passive": {"NUMBA_THREADING_LAYER": "omp", "OMP_WAIT_POLICY": "passive"},
    "tbb": {"NUMBA_THREADING_LAYER": "tbb", "LD_LIBRARY_PATH": "{environment}/lib"},
    "workqueue": {"NUMBA_THREADING_LAYER": "workqueue"},
}
SHAPES = {"small": (768, 3072), "xl": (1600, 6400)}  # each model's c_fc, [n_in, n_out]


def prange_loops():
    """An empty prange region and compiled_rows' bands in a prange loop, compiled here."""
    import numba

    band = compiled.loops().band

    @numba.njit(parallel=True)
    def empty(out):
        for k in numba.prange(out.shape[0]):
            out[k] = k

    @numba.njit(parallel=True)
    def rows(x, W, partial, edges, lead):
        for k in numba.prange(partial.shape[0]):
            band(x, W, partial[k], edges[k], edges[k + 1], lead)

    return empty, rows, numba


def items_of(shape):
    """{name: a call to time}: each way of an empty region and of one shared product."""
    empty, rows, numba = prange_loops()
    n_in, n_out = shape
    rng = np.random.default_rng(0)
    W = rng.standard_normal(shape, np.float32) * 0.02
    x = rng.standard_normal((1, n_in), np.float32)
    n_bands = max(1, min(threads.n_threads() * kernels.BANDS_PER_THREAD, n_in // 8))
    edges = np.array([8 * ((n_in // 8) * k // n_bands) for k in range(n_bands)] + [n_in], np.int64)
    out = np.zeros(n_bands, np.int64)
    lead = kernels.lead(W)

    def prange_product():
        partial = kernels.empty_aligned_with((n_bands, 1, n_out), W)
        partial[...] = 0
        rows(x, W, partial, edges, lead)
        return partial.sum(0)

    def nothing(start, stop):
        pass

    items = {"empty region: picogpt's threads": lambda: threads.parallel(nothing, n_bands, kernels.BANDS_PER_THREAD),
             "empty region: prange": lambda: empty(out),
             "one row x W: picogpt's threads (compiled_rows)": lambda: kernels.compiled_rows(x, W),
             "one row x W: prange": prange_product,
             "one row x W: the package's (split_inputs)": lambda: kernels.split_inputs(x, W)}
    expected = x @ W
    for name in ("one row x W: picogpt's threads (compiled_rows)", "one row x W: prange"):
        np.testing.assert_allclose(items[name](), expected, rtol=1e-4, atol=1e-4)
    return items, numba.threading_layer()


def prange_matmul(rows, head_loop):
    """kernels.compiled_matmul with its threads replaced by prange loops: a few rows (one
    included) with band_product over compiled_rows' bands, the LM head with head_product over
    compiled_head's; many rows and small matrices as the package computes them."""
    import numba

    @numba.njit(parallel=True)
    def head_bands(x, E, out, edges, lead):
        for k in numba.prange(len(edges) - 1):
            head_loop(x, E, out, edges[k], edges[k + 1], lead)

    def matmul(x, W):
        route = kernels.route(x, W)
        if route == "numpy" or x.shape[0] > kernels.FEW_ROWS:
            return kernels.PRODUCTS[route](x, W)
        x = np.ascontiguousarray(x)
        if W.flags.c_contiguous:  # x @ W: bands of W's input rows, a partial sum each
            n_in = x.shape[1]
            n_bands = max(1, min(threads.n_threads() * kernels.BANDS_PER_THREAD, n_in // 8))
            edges = np.array([8 * ((n_in // 8) * k // n_bands) for k in range(n_bands)] + [n_in], np.int64)
            partial = kernels.empty_aligned_with((n_bands, x.shape[0], W.shape[1]), W)
            partial[...] = 0
            rows(x, W, partial, edges, kernels.lead(W))
            return partial.sum(0)
        E = W.T  # the LM head: wte [n_vocab, n_embd]
        x_aligned = kernels.empty_aligned_with(x.shape, E)
        x_aligned[...] = x
        out = np.empty((x.shape[0], E.shape[0]), np.float32)
        n_bands = threads.n_threads() * threads.CHUNKS_PER_THREAD
        edges = np.array([E.shape[0] * k // n_bands for k in range(n_bands + 1)], np.int64)
        head_bands(x_aligned, E, out, edges, kernels.lead(E))
        return out
    return matmul


def threads_bands_matmul(x, W):
    """kernels.compiled_matmul, but one row too through the compiled loops on picogpt's threads
    (compiled_rows, compiled_head): the same products as prange_matmul, on the other pool."""
    route = kernels.route(x, W)
    if x.shape[0] == 1 and route in ("split_inputs", "split_outputs"):
        route = "compiled_head" if route == "split_outputs" else "compiled_rows"
    return kernels.PRODUCTS[route](x, W)


def decode_items(model_name):
    """{way: a one-token decode} of a model of GPT-2's shapes with random weights, in memory."""
    from picogpt.gpt2 import GPT2Config
    from picogpt.io.params import expected_shapes, params_from_tensors
    from picogpt.model import GPT2

    n_layer, n_embd, n_head = {"small": (12, 768, 12), "xl": (48, 1600, 25)}[model_name]
    config = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_ctx=1024, n_vocab=50257)
    rng = np.random.default_rng(0)
    tensors = {name: rng.standard_normal(shape, np.float32) * 0.02 for name, shape in expected_shapes(config).items()}
    model = GPT2(params_from_tensors(tensors, config), config, f"random {model_name}").prepare()
    cache = model.new_cache()
    model(list(range(CONTEXT)), cache)
    _, rows, _ = prange_loops()
    ways = {"decode: the package (compiled_matmul)": model.matmul,
            "decode: compiled bands on picogpt's threads": threads_bands_matmul,
            "decode: compiled bands in prange": prange_matmul(rows, compiled.loops().head)}

    def decode(matmul):
        model.matmul = matmul
        model([11], cache)
        cache.truncate(CONTEXT)

    reference = None
    for matmul in ways.values():
        model.matmul = matmul
        logits = model([11], cache)
        cache.truncate(CONTEXT)
        reference = logits if reference is None else reference
        np.testing.assert_allclose(logits, reference, rtol=1e-3, atol=1e-3)
    return {way: (lambda m=matmul: decode(m)) for way, matmul in ways.items()}


CONTEXT = 128  # positions cached before each timed decode


def child(shape_names, blocks, calls, reverse, decodes):
    kernels.choose()  # NumPy's BLAS on one thread, as a model's preparation leaves it
    record = {}
    for shape_name in shape_names:
        items, layer = items_of(SHAPES[shape_name])
        if decodes:
            items |= decode_items(shape_name)
        times = {name: [] for name in items}
        for block in range(blocks):
            order = list(items)[::-1] if (block % 2) ^ reverse else list(items)
            for name in order:
                items[name]()  # the first call after another item's is not timed
                seconds = []
                for _ in range(calls):
                    start = time.perf_counter()
                    items[name]()
                    seconds.append(time.perf_counter() - start)
                times[name].append(float(np.median(seconds)))
        record[shape_name] = times
    return {"threading_layer": layer, "times_s": record}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", default=",".join(LAYERS))
    parser.add_argument("--shapes", default="small,xl")
    parser.add_argument("--processes", type=int, default=4, help="per layer, alternating in order")
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50, help="calls of each item per block")
    parser.add_argument("--decodes", action="store_true", help="also whole one-token decodes, random weights")
    parser.add_argument("--out", type=Path, default=HERE / "results-pool.json")
    parser.add_argument("--child", choices=["forwards", "backwards"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    shapes = args.shapes.split(",")
    if args.child:
        print(json.dumps(child(shapes, args.blocks, args.calls, args.child == "backwards", args.decodes)))
        return
    layers = args.layers.split(",")
    runs = []
    for process in range(args.processes):
        for layer in (layers if process % 2 == 0 else layers[::-1]):
            order = "backwards" if process % 2 else "forwards"
            env = os.environ | {"NUMBA_NUM_THREADS": str(threads.n_threads())} | {
                name: value.format(environment=sys.prefix) for name, value in LAYERS[layer].items()}
            load_before = machine.load_average()
            command = [sys.executable, __file__, "--child", order, "--shapes", args.shapes, "--blocks", str(args.blocks),
                       "--calls", str(args.calls)] + ["--decodes"] * args.decodes
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{layer}: exit status {done.returncode}: {done.stderr.strip()[-2000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            runs.append({"layer": layer, "order": order, "load_before": load_before,
                         "load_after": machine.load_average()} | result)
            empty = result["times_s"][shapes[0]]
            print(f"process {process + 1}/{args.processes} {layer} ({result['threading_layer']}), load "
                  f"{load_before[0]}: empty region threads / prange "
                  f"{1e6 * np.median(empty[next(iter(empty))]):.1f} / {1e6 * np.median(empty['empty region: prange']):.1f} us",
                  flush=True)
    summary = {}
    for layer in layers:
        for shape in shapes:
            pairs = [("empty region: picogpt's threads", "empty region: prange"),
                     ("one row x W: picogpt's threads (compiled_rows)", "one row x W: prange")]
            if args.decodes:
                pairs += [("decode: compiled bands on picogpt's threads", "decode: compiled bands in prange"),
                          ("decode: the package (compiled_matmul)", "decode: compiled bands in prange")]
            for ours, theirs in pairs:
                ratios = [b / a for run in runs if run["layer"] == layer
                          for a, b in zip(run["times_s"][shape][ours], run["times_s"][shape][theirs])]
                what = theirs.split(":")[0]
                if what == "decode":
                    what = f"decode, over {ours.split(': ')[1]}"
                key = f"{layer} | {shape} | {what}"
                summary[key] = {"prange / picogpt's threads": float(np.median(ratios)),
                                "range": [float(min(ratios)), float(max(ratios))],
                                "prange faster in": f"{sum(r < 1 for r in ratios)} of {len(ratios)} blocks",
                                "picogpt's threads, median s": float(np.median(
                                    [t for run in runs if run["layer"] == layer for t in run["times_s"][shape][ours]])),
                                "prange, median s": float(np.median(
                                    [t for run in runs if run["layer"] == layer for t in run["times_s"][shape][theirs]]))}
                print(f"{key:40s} prange / picogpt's threads {np.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}), "
                      f"prange faster in {sum(r < 1 for r in ratios)} of {len(ratios)} blocks")
    record = {"mode": "pool", "machine": machine_of_run(), "command": "benchmarks/kernels/pool.py " + " ".join(
        sys.argv[1:] if argv is None else argv), "blocks": args.blocks, "calls": args.calls, "layers":
        {layer: LAYERS[layer] for layer in layers}, "runs": runs, "summary": summary}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"raw times: {args.out}")


if __name__ == "__main__":
    main()
