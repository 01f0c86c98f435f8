"""Every multi-row product tried for the fast path, measured on the checkpoint's own layout.

Speculative sampling (Algorithm 2) scores K + 1 positions in one target call. Each linear weight
W [n_in, n_out] (GPT-2's Conv1D layout, as model.safetensors stores it) is then multiplied by a
few rows, x [n_rows, n_in] @ W -> [n_rows, n_out]. On a CPU that product waits on memory, so it
should cost about one decode (one row) if it reads W once for all rows. This script measures
how close each candidate built from NumPy and its OpenBLAS gets: time over all of a model's
linear weights, as a multiple of one row's product `x[:1] @ W`. README.md beside it has the
tables and what they mean; picogpt.fast.kernels.compiled_matmul is the winner (the compiled product
with numba installed, the L2 tiles without).

    python benchmarks/kernels/candidates.py rows --layers 4 --runs 5   # every candidate, n_rows 1..9
    python benchmarks/kernels/candidates.py loop --layers 4            # draft (small, 1 row) / score (XL, 5 rows)
    python benchmarks/kernels/candidates.py busy --layers 4            # beside two busy-loop processes
    python benchmarks/kernels/candidates.py cache                      # GEMV vs GEMM on a tile in cache
    python benchmarks/kernels/candidates.py compute --layers 4         # the compiled loop: arithmetic vs memory
    python benchmarks/kernels/candidates.py one-row --runs 15          # one row: one core, the threads, or a team?
    python benchmarks/kernels/candidates.py between --runs 15          # the work between products: NumPy or compiled

Random weights with GPT-2's shapes (timing does not depend on the values) are written once
under --data as raw float32 files and memory-mapped, like a checkpoint. Every timing is a pass
over all matrices; candidates take turns (interleaved), so a change in the machine's load hits
them all alike. The raw times go to results-<mode>.json beside this script, with the load
average before and after each block. Never run it while the machine is busy, unless measuring
that is the point (`busy`).
"""

import argparse
import contextlib
import ctypes
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import former
import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from picogpt.fast import compiled, kernels, threads

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parent.parent / "weights" / "kernel-bench"  # git-ignored
MODELS = {"xl": 1600, "small": 768}  # n_embd of GPT-2 XL (the target) and GPT-2 small (the draft)
DEPTHS = {"xl": 48, "small": 12}  # their layers, for `between`, which times whole calls
SETTLE_S = 0.3  # OpenBLAS's idle threads spin ~0.1 s after a threaded call; let them stop
BASELINE = "one row, x[:1] @ W, OpenBLAS threads"


# ---- weights ---------------------------------------------------------------------------------

def matrix_shapes(n_embd, n_layer):
    """[(n_in, n_out)] of GPT-2's linear weights: c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj per layer."""
    e = n_embd
    return [(e, 3 * e), (e, e), (e, 4 * e), (4 * e, e)] * n_layer


def make_weights(folder, name, n_embd, n_layer, seed=0):
    """The model's linear weights, memory-mapped from folder/<name>-<n_layer>layers.f32, which is
    written first (random, ~N(0, 0.02)) if missing. [n_in, n_out] float32 arrays, C-contiguous."""
    shapes = matrix_shapes(n_embd, n_layer)
    n_floats = sum(a * b for a, b in shapes)
    path = Path(folder) / f"{name}-{n_layer}layers.f32"
    if not path.exists() or path.stat().st_size != 4 * n_floats:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(".part")
        rng = np.random.default_rng(seed)
        data = np.memmap(part, np.float32, "w+", shape=(n_floats,))
        step = 1 << 24
        for start in range(0, n_floats, step):
            data[start:start + step] = 0.02 * rng.standard_normal(min(step, n_floats - start), dtype=np.float32)
        data.flush()
        del data
        os.replace(part, path)
    data = np.memmap(path, np.float32, "r")
    weights, offset = [], 0
    for n_in, n_out in shapes:
        weights.append(data[offset:offset + n_in * n_out].reshape(n_in, n_out))
        offset += n_in * n_out
    return weights


def random_rows(weights, n_rows, seed=1):
    """{n_in: x [n_rows, n_in]}: the rows each weight is multiplied by."""
    rng = np.random.default_rng(seed)
    return {n_in: rng.standard_normal((n_rows, n_in), dtype=np.float32) for n_in in {W.shape[0] for W in weights}}


# ---- NumPy's OpenBLAS -------------------------------------------------------------------------

def set_blas_threads(n):
    """NumPy's BLAS on n threads from now on (threadpoolctl)."""
    threadpool_limits(limits=n, user_api="blas")


def find_sgemm():
    """cblas_sgemm from the OpenBLAS that NumPy ships (threadpoolctl finds its file), as a
    ctypes function, or None. Symbols with the `64_` suffix take 64-bit integers, others C ints."""
    found = [info["filepath"] for info in threadpool_info() if info.get("internal_api") == "openblas"]
    blas = ctypes.CDLL(found[0]) if found else None
    name = next((name for name in ("scipy_cblas_sgemm64_", "scipy_cblas_sgemm", "cblas_sgemm64_", "cblas_sgemm")
                 if blas is not None and hasattr(blas, name)), None)
    if name is None:
        return None
    sgemm = getattr(blas, name)
    integer = ctypes.c_int64 if name.endswith("64_") else ctypes.c_int
    sgemm.argtypes = [ctypes.c_int] * 3 + [integer] * 3 + [ctypes.c_float, ctypes.c_void_p, integer,
                                                          ctypes.c_void_p, integer, ctypes.c_float,
                                                          ctypes.c_void_p, integer]
    sgemm.restype = None
    return sgemm


ROW_MAJOR, NO_TRANS = 101, 111


def add_product(sgemm, x, W, out, start, stop):
    """out += x[:, start:stop] @ W[start:stop] through cblas_sgemm (beta = 1), nothing copied.
    x [n_rows, n_in], W [n_in, n_out], out [n_rows, n_out], all C-contiguous float32."""
    n_rows, n_in = x.shape
    n_out = W.shape[1]
    sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, n_rows, n_out, stop - start, 1.0,
          x.ctypes.data + 4 * start, n_in, W.ctypes.data + 4 * start * n_out, n_out, 1.0, out.ctypes.data, n_out)


# ---- the candidates: multiply(x, W) -> x @ W ---------------------------------------------------

def one_row(x, W):
    """The baseline: one row's product, OpenBLAS's GEMV. [n_rows, n_in] -> [1, n_out]."""
    return x[:1] @ W


def plain(x, W):
    """OpenBLAS's GEMM as NumPy calls it (it packs W first). [n_rows, n_in] -> [n_rows, n_out]."""
    return x @ W


def one_row_split(x, W):
    """One row, W's input rows cut into one contiguous band per own thread. -> [1, n_out]."""
    return kernels.split_inputs(x[:1], W)


def k_split(x, W):
    """GEMM with W's input rows (K) cut into one band per own thread, partial products added."""
    return kernels.split_inputs(x, W)


def panels_by_band(x, W, b, add_panel):
    """One band of W's input rows per own thread; in each band, add_panel(x, W, out, i, stop)
    adds the panel W[i:stop] (b rows at a time) into the band's partial sum; the bands' sums
    added at the end. [n_rows, n_in] @ [n_in, n_out] -> [n_rows, n_out]."""
    x = np.ascontiguousarray(x)
    parts = threads.bands(W.shape[0], threads.n_threads())
    partial = np.zeros((len(parts), x.shape[0], W.shape[1]), np.float32)  # [n_parts, n_rows, n_out]

    def work(first, last):
        for p in range(first, last):
            lo, hi = parts[p]
            for i in range(lo, hi, b):
                add_panel(x, W, partial[p], i, min(i + b, hi))

    threads.parallel(work, len(parts), chunks_per_thread=1)
    return partial.sum(0)


def row_panels_sgemm(sgemm, b):
    """Contiguous panels W[i:i+b] (b whole input rows), out += x[:, i:i+b] @ panel by sgemm
    (beta = 1, no NumPy temporaries); one band of panels per own thread, the bands' sums added."""
    def add_panel(x, W, out, start, stop):
        add_product(sgemm, x, W, out, start, stop)
    return lambda x, W: panels_by_band(x, W, b, add_panel)


def row_panels_gemv(b):
    """Contiguous panels W[i:i+b], one GEMV per row of x on each (one stacked np.matmul), the
    panels' partial products added. Needs b | n_in (else None: not applicable)."""
    def multiply(x, W):
        n_rows, n_in = x.shape
        n_out = W.shape[1]
        if n_in % b:
            return None
        n_panels = n_in // b
        panels = W.reshape(n_panels, 1, b, n_out)  # [n_panels, 1, b, n_out]
        x_panels = x.reshape(n_rows, n_panels, 1, b).transpose(1, 0, 2, 3)  # [n_panels, n_rows, 1, b]
        partial = np.empty((n_panels, n_rows, 1, n_out), np.float32)

        def work(start, stop):  # [.., n_rows, 1, b] @ [.., 1, b, n_out] -> [.., n_rows, 1, n_out]
            np.matmul(x_panels[start:stop], panels[start:stop], out=partial[start:stop])

        threads.parallel(work, n_panels)
        return partial.sum(0)[:, 0]
    return multiply


def column_blocks(x, W):
    """Column blocks W[:, j:j+c] (strided: c floats of every input row), x @ block each, c as
    in former.tile_shape; shared among own threads. [n_rows, n_in] -> [n_rows, n_out]."""
    n_rows, n_in = x.shape
    n_out = W.shape[1]
    c = former.tile_shape(n_in, n_out)[1]
    n_blocks = n_out // c
    blocks = W[:, :n_blocks * c].reshape(n_in, n_blocks, c).transpose(1, 0, 2)  # [n_blocks, n_in, c]
    out = np.empty((n_rows, n_out), np.float32)
    out_blocks = out[:, :n_blocks * c].reshape(n_rows, n_blocks, c).transpose(1, 0, 2)  # [n_blocks, n_rows, c]

    def work(start, stop):  # [n_rows, n_in] @ [.., n_in, c] -> [.., n_rows, c]
        np.matmul(x, blocks[start:stop], out=out_blocks[start:stop])

    threads.parallel(work, n_blocks)
    if n_blocks * c < n_out:
        out[:, n_blocks * c:] = x @ W[:, n_blocks * c:]
    return out


def tile_view(W, b, c):
    """W [n_in, n_out] as tiles [n_in // b, n_out // c, b, c] (a strided view, whole tiles only)."""
    n_bands, n_cols = W.shape[0] // b, W.shape[1] // c
    return W[:n_bands * b, :n_cols * c].reshape(n_bands, b, n_cols, c).transpose(0, 2, 1, 3)


def tiles_sgemm(x, W):
    """L2-sized tiles (former.tile_shape, ~80 KB), ONE GEMM per tile for all rows, partial
    sums per band of input rows added at the end. [n_rows, n_in] -> [n_rows, n_out]."""
    n_rows, n_in = x.shape
    n_out = W.shape[1]
    b, c = former.tile_shape(n_in, n_out)
    tiles = tile_view(W, b, c)  # [n_bands, n_cols, b, c]
    n_bands, n_cols = tiles.shape[:2]
    x_bands = x[:, :n_bands * b].reshape(n_rows, n_bands, b).transpose(1, 0, 2)[:, None]  # [n_bands, 1, n_rows, b]
    partial = np.empty((n_bands, n_cols, n_rows, c), np.float32)

    def work(start, stop):  # [.., 1, n_rows, b] @ [.., n_cols, b, c] -> [.., n_cols, n_rows, c]
        np.matmul(x_bands[start:stop], tiles[start:stop], out=partial[start:stop])

    threads.parallel(work, n_bands)
    out = np.zeros((n_rows, n_out), np.float32)
    out[:, :n_cols * c] = partial.sum(0).transpose(1, 0, 2).reshape(n_rows, n_cols * c)
    if n_bands * b < n_in:
        out[:, :n_cols * c] += x[:, n_bands * b:] @ W[n_bands * b:, :n_cols * c]
    if n_cols * c < n_out:
        out[:, n_cols * c:] = x @ W[:, n_cols * c:]
    return out


def tiles_gemv(b_target, c_target):
    """former.tiled's scheme (one GEMV per row on each L2-sized tile) with another tile shape:
    b ~ b_target input rows x c ~ c_target outputs, dividing W (else None: not applicable)."""
    def multiply(x, W):
        n_rows, n_in = x.shape
        n_out = W.shape[1]
        b = former.divisor_near(n_in, b_target, b_target // 2, 2 * b_target)
        c = former.divisor_near(n_out, c_target, c_target // 2, 2 * c_target)
        if b is None or c is None:
            return None
        tiles = tile_view(W, b, c)[:, :, None]  # [n_bands, n_cols, 1, b, c]
        n_bands, n_cols = tiles.shape[:2]
        x_bands = x.reshape(n_rows, n_bands, 1, b).transpose(1, 2, 0, 3)[:, :, :, None, :]  # [n_bands, 1, n_rows, 1, b]
        partial = np.empty((n_bands, n_cols, n_rows, 1, c), np.float32)

        def work(start, stop):  # [.., 1, n_rows, 1, b] @ [.., n_cols, 1, b, c] -> [.., n_cols, n_rows, 1, c]
            np.matmul(x_bands[start:stop], tiles[start:stop], out=partial[start:stop])

        threads.parallel(work, n_bands)
        return partial.sum(0)[:, :, 0].transpose(1, 0, 2).reshape(n_rows, n_out)
    return multiply


def first_row_then_sgemm(sgemm, b):
    """Per contiguous panel W[i:i+b]: GEMV for row 0 (streams the panel from memory), then one
    sgemm for the other rows (meant to find it in cache); a band of panels per own thread."""
    def add_panel(x, W, out, start, stop):
        add_product(sgemm, x[:1], W, out[:1], start, stop)
        if x.shape[0] > 1:
            add_product(sgemm, x[1:], W, out[1:], start, stop)
    return lambda x, W: panels_by_band(x, W, b, add_panel)


def transposed_copies(weights):
    """{id(W): W.T as a C-contiguous copy [n_out, n_in]}: the second layout picogpt used to write."""
    return {id(W): np.ascontiguousarray(W.T) for W in weights}


def transposed_blocks(copies, block=64):
    """Reference, the scheme picogpt dropped: on a transposed copy W_t [n_out, n_in], blocks of
    64 output rows, x @ block.T each ([n_rows, n_in] @ [n_in, 64]); one row: W_t's GEMV in
    bands of output rows. Own threads for both."""
    def multiply(x, W):
        W_t = copies[id(W)]
        n_out, n_in = W_t.shape
        n_rows = x.shape[0]
        out = np.empty((n_rows, n_out), np.float32)
        if n_rows == 1:
            parts = threads.bands(n_out, threads.n_threads())

            def gemv(first, last):  # [n, n_in] @ [n_in] -> [n]
                for p in range(first, last):
                    lo, hi = parts[p]
                    np.matmul(W_t[lo:hi], x[0], out=out[0, lo:hi])

            threads.parallel(gemv, len(parts), chunks_per_thread=1)
            return out
        n_blocks = n_out // block
        blocks = W_t[:n_blocks * block].reshape(n_blocks, block, n_in).transpose(0, 2, 1)  # [n_blocks, n_in, block]
        out_blocks = out[:, :n_blocks * block].reshape(n_rows, n_blocks, block).transpose(1, 0, 2)

        def work(start, stop):  # [n_rows, n_in] @ [.., n_in, block] -> [.., n_rows, block]
            np.matmul(x, blocks[start:stop], out=out_blocks[start:stop])

        threads.parallel(work, n_blocks)
        if n_blocks * block < n_out:
            out[:, n_blocks * block:] = x @ W_t[n_blocks * block:].T
        return out
    return multiply


def tiles_per_row_gemv(x, W):
    """NumPy's best (picogpt's product without numba): L2 tiles, one GEMV per row per tile."""
    return former.tiled(x, W)


def compiled_product(x, W):
    """picogpt's product with numba: every row per load of W (fast/compiled.py), bands per thread."""
    return kernels.compiled_rows(np.ascontiguousarray(x), W)


@dataclass(frozen=True)
class Candidate:
    multiply: object  # (x [n_rows, n_in], W [n_in, n_out]) -> [n_rows, n_out], or None if not applicable
    blas_threads: int  # OpenBLAS's thread count while it runs
    during: object = None  # a context a pass runs in, as a model call's products do (a team's call)


def on_a_team(x, W):
    """The compiled product on a team ready for the pass (team.py, former.py), as inside a
    model call of the former fast path."""
    return former.team_matmul(x, W)


def a_team_call():
    """A model call of a big model on the former path: its team ready until the pass ends
    (former.team_call), even if an earlier call found the machine busy (then the team would
    rest: not what is measured)."""
    former.team().cool_until = 0.0
    return former.team_call()


def candidates(sgemm, copies=None):
    """{label: Candidate}, the baseline first. `sgemm` None leaves out the ctypes ones; `copies`
    (transposed_copies) adds the transposed-copy reference."""
    many = threads.n_threads()  # OpenBLAS's threads, or ours, one per core
    found = {
        BASELINE: Candidate(one_row, many),
        "one row, OpenBLAS 1 thread": Candidate(one_row, 1),
        "one row, K split, own threads": Candidate(one_row_split, 1),
        "x @ W, OpenBLAS threads": Candidate(plain, many),
        "x @ W, OpenBLAS 1 thread": Candidate(plain, 1),
        "x @ W, K split, own threads": Candidate(k_split, 1),
        "row panels b=16, per-row GEMV": Candidate(row_panels_gemv(16), 1),
        "row panels b=32, per-row GEMV": Candidate(row_panels_gemv(32), 1),
        "column blocks c~320": Candidate(column_blocks, 1),
        "L2 tiles, one GEMM per tile": Candidate(tiles_sgemm, 1),
        "L2 tiles ~32x800, per-row GEMV": Candidate(tiles_gemv(32, 800), 1),
        "L2 tiles ~100x160, per-row GEMV": Candidate(tiles_gemv(100, 160), 1),
        "L2 tiles, per-row GEMV (former.tiled, without numba)": Candidate(tiles_per_row_gemv, 1),
    }
    if compiled.loops() is not None:
        found["compiled, each weight to all rows (fast/compiled.py)"] = Candidate(compiled_product, 1)
        if former.team() is not None:
            found["compiled, on a team ready for the call (team.py, the former path)"] = \
                Candidate(on_a_team, 1, a_team_call)
    if sgemm is not None:
        for b in (32, 96, 200, 400):
            found[f"row panels b={b}, ctypes sgemm"] = Candidate(row_panels_sgemm(sgemm, b), 1)
        for b in (16, 32):
            found[f"row panels b={b}, row 0 GEMV + sgemm rest"] = Candidate(first_row_then_sgemm(sgemm, b), 1)
    if copies is not None:
        found["REF transposed copy, 64-row blocks"] = Candidate(transposed_blocks(copies), 1)
    return found


def check(candidate, x, W):
    """Max relative difference from x @ W in float64 (None if the candidate does not apply)."""
    with candidate.during() if candidate.during else contextlib.nullcontext():
        got = candidate.multiply(x, W)
    if got is None:
        return None
    reference = x[:got.shape[0]].astype(np.float64) @ np.asarray(W, np.float64)
    return float(np.abs(got - reference).max() / np.abs(reference).max())


# ---- measuring --------------------------------------------------------------------------------

def load_average():
    """The 1-, 5- and 15-minute load averages."""
    return [round(value, 2) for value in os.getloadavg()]


def time_pass(candidate, rows, weights, settle=True):
    """Seconds for one product with every weight (None if not applicable). After a pass on
    OpenBLAS's threads, with settle, waits SETTLE_S so that its spinning threads do not slow
    the next candidate (`loop` measures that effect)."""
    set_blas_threads(candidate.blas_threads)
    start = time.perf_counter()
    with candidate.during() if candidate.during else contextlib.nullcontext():
        for W in weights:
            if candidate.multiply(rows[W.shape[0]], W) is None:
                return None
    seconds = time.perf_counter() - start
    if settle and candidate.blas_threads > 1:
        time.sleep(SETTLE_S)
    return seconds


def interleaved(found, rows, weights, runs, settle=True):
    """{label: [seconds per pass]}: `runs` rounds, each candidate once per round, after one
    untimed pass each (warm-up)."""
    times = {label: [] for label in found}
    for _ in range(runs + 1):
        for label, candidate in found.items():
            times[label].append(time_pass(candidate, rows, weights, settle))
    return {label: values[1:] for label, values in times.items()}


def median_iqr(values):
    """(median, interquartile range) of the values that are not None, or (nan, nan)."""
    values = [v for v in values if v is not None]
    if not values:
        return float("nan"), float("nan")
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return float(median), float(q3 - q1)


def print_ratios(blocks):
    """A markdown table per model: median / the baseline's median at the same n_rows, ± IQR / it."""
    for model in dict.fromkeys(block["model"] for block in blocks):
        mine = [block for block in blocks if block["model"] == model]
        print(f"\n| {model} | " + " | ".join(f"R={block['n_rows']}" for block in mine) + " |")
        print("|---|" + "---|" * len(mine))
        for label in mine[0]["times_s"]:
            cells = []
            for block in mine:
                base = median_iqr(block["times_s"][BASELINE])[0]
                median, iqr = median_iqr(block["times_s"][label])
                cells.append("n/a" if np.isnan(median) else f"{median / base:.2f} ±{iqr / base:.2f}")
            print(f"| {label} | " + " | ".join(cells) + " |")
        print("| baseline ms | " + " | ".join(f"{1e3 * median_iqr(b['times_s'][BASELINE])[0]:.1f}" for b in mine)
              + " |\n| load before -> after | "
              + " | ".join(f"{b['load_before'][0]} -> {b['load_after'][0]}" for b in mine) + " |")


# ---- modes ------------------------------------------------------------------------------------

def rows_mode(args, sgemm):
    """Every candidate at n_rows in args.rows, interleaved, per model."""
    blocks = []
    for model in args.models:
        weights = make_weights(args.data, model, MODELS[model], args.layers)
        copies = transposed_copies(weights) if model == "xl" else None
        found = candidates(sgemm, copies)
        print(f"{model}: {len(weights)} matrices, {sum(W.nbytes for W in weights) / 1e9:.2f} GB", flush=True)
        for n_rows in args.rows:
            rows = random_rows(weights, n_rows)
            for label, candidate in found.items():
                set_blas_threads(candidate.blas_threads)
                error = check(candidate, rows[weights[0].shape[0]], weights[0])
                if error is not None and error > 1e-5:
                    raise SystemExit(f"{label}: differs from x @ W by {error:.1e} (relative) at n_rows={n_rows}")
            load_before = load_average()
            times = interleaved(found, rows, weights, args.runs, settle=args.settle)
            blocks.append({"model": model, "n_rows": n_rows, "load_before": load_before,
                           "load_after": load_average(), "times_s": times})
            print(f"  n_rows={n_rows} load {load_before[0]} -> {blocks[-1]['load_after'][0]}, baseline "
                  f"{1e3 * median_iqr(times[BASELINE])[0]:.1f} ms", flush=True)
        del copies
    print_ratios(blocks)
    return {"blocks": blocks}


def loop_mode(args, sgemm, n_loops=12, k_draft=4, n_score_rows=5):
    """The speculative-sampling pattern: k_draft one-row passes over GPT-2 small's weights, then
    one n_score_rows pass over XL's, then one row over XL's; each threading scheme's in-loop
    times beside the same calls made back to back (isolated)."""
    target = make_weights(args.data, "xl", MODELS["xl"], args.layers)
    draft = make_weights(args.data, "small", MODELS["small"], args.layers)
    x_draft, x_score = random_rows(draft, 1), random_rows(target, n_score_rows)
    x_decode = {n_in: x[:1] for n_in, x in x_score.items()}
    many = threads.n_threads()
    schemes = {  # (draft, target score, target decode)
        "A: OpenBLAS threads throughout": (Candidate(one_row, many), Candidate(plain, many), Candidate(one_row, many)),
        "B: draft on OpenBLAS threads, target kernels.compiled_matmul (OpenBLAS 1 thread)":
            (Candidate(one_row, many), Candidate(kernels.compiled_matmul, 1), Candidate(kernels.compiled_matmul, 1)),
        "C: own threads throughout, OpenBLAS 1 thread (kernels.compiled_matmul)":
            (Candidate(kernels.compiled_matmul, 1), Candidate(kernels.compiled_matmul, 1), Candidate(kernels.compiled_matmul, 1)),
    }
    results = {}
    for label, (draft_call, score_call, decode_call) in schemes.items():
        load_before = load_average()
        isolated = {"score": [time_pass(score_call, x_score, target, False) for _ in range(args.runs + 1)][1:],
                    "draft": [time_pass(draft_call, x_draft, draft, False) for _ in range(2 * args.runs + 1)][1:],
                    "decode": [time_pass(decode_call, x_decode, target, False) for _ in range(args.runs + 1)][1:]}
        in_loop = {"score": [], "draft": [], "decode_after_score": []}
        for _ in range(n_loops):
            for _ in range(k_draft):
                in_loop["draft"].append(time_pass(draft_call, x_draft, draft, False))
            in_loop["score"].append(time_pass(score_call, x_score, target, False))
            in_loop["decode_after_score"].append(time_pass(decode_call, x_decode, target, False))
        results[label] = {"load_before": load_before, "load_after": load_average(),
                          "isolated_s": isolated, "in_loop_s": in_loop}
        print(f"{label} (load {load_before[0]} -> {load_average()[0]}): "
              + ", ".join(f"{what} isolated {1e3 * median_iqr(isolated[what])[0]:.1f} ms" for what in isolated)
              + "; " + ", ".join(f"{what} in loop {1e3 * median_iqr(v)[0]:.1f} ms" for what, v in in_loop.items()),
              flush=True)
    return {"schemes": results, "k_draft": k_draft, "n_score_rows": n_score_rows}


def helper_start_us(n_calls=300, gap_s=0.0005, chunk_s=0.0003):
    """Microseconds from calling threads.parallel to a helper thread starting its first chunk,
    once per call (calls `gap_s` apart, so the helpers are asleep as between two products);
    each chunk sleeps `chunk_s`, releasing the GIL as the compiled product does."""
    delays = []
    for _ in range(n_calls):
        started, first = time.perf_counter(), {}

        def chunk(start, stop):
            first.setdefault(threading.current_thread().name, time.perf_counter() - started)
            time.sleep(chunk_s)

        threads.parallel(chunk, 4, chunks_per_thread=2)
        delays += [1e6 * s for name, s in first.items() if name != threading.main_thread().name]
        time.sleep(gap_s)
    return delays


def one_row_mode(args, sgemm, between=6400):
    """One row, per weight shape of GPT-2 small and XL: OpenBLAS's GEMV on the calling thread
    against the product shared by picogpt's threads, as a decode calls them: one matrix after
    another with a little NumPy work on the calling thread between them (a tanh over `between`
    floats, like GELU's), so the helper threads go to sleep between products as they do in the
    forward pass. Per shape, every matrix of that shape in --layers layers, interleaved passes.
    former.ONE_CORE_BYTES was where the first was thought to stop winning."""
    work = np.ones(between, np.float32)
    found = {"OpenBLAS GEMV, calling thread (picogpt below ONE_CORE_BYTES)": Candidate(one_row, 1),
             "GEMV split, own threads": Candidate(one_row_split, 1)}
    if compiled.loops() is not None:
        found["compiled product, own threads"] = Candidate(compiled_product, 1)
        if former.team() is not None:
            found["compiled product, a team ready for the call (the former path, in a big model's call)"] = \
                Candidate(on_a_team, 1, a_team_call)

    def with_work_between(candidate):
        def multiply(x, W):
            out = candidate.multiply(x, W)
            np.tanh(work)
            return out
        return Candidate(multiply, candidate.blas_threads, candidate.during)

    found = {label: with_work_between(candidate) for label, candidate in found.items()}
    wake_us = helper_start_us() if threads.n_threads() > 1 else []
    if wake_us:
        print(f"a sleeping helper thread starts its first chunk {np.median(wake_us):.0f} us (median; p90 "
              f"{np.percentile(wake_us, 90):.0f} us) after threads.parallel is called", flush=True)
    shapes = []
    for model in args.models:
        weights = make_weights(args.data, model, MODELS[model], args.layers)
        for shape in dict.fromkeys(W.shape for W in weights):
            mine = [W for W in weights if W.shape == shape]
            rows = random_rows(mine, 1)
            load_before = load_average()
            times = interleaved(found, rows, mine, args.runs)
            n_bytes = sum(W.nbytes for W in mine)
            gbs = {label: n_bytes / median_iqr(values)[0] / 1e9 for label, values in times.items()}
            shapes.append({"model": model, "shape": list(shape), "matrix_bytes": mine[0].nbytes, "matrices": len(mine),
                           "load_before": load_before, "load_after": load_average(), "times_s": times, "gbs": gbs})
            print(f"{model} {shape} ({mine[0].nbytes / 1e6:.1f} MB each, load {load_before[0]}): "
                  + ", ".join(f"{label.split(' (')[0]} {rate:.1f} GB/s" for label, rate in gbs.items()), flush=True)
    return {"between_floats": between, "one_core_bytes": former.ONE_CORE_BYTES, "helper_start_us": wake_us,
            "shapes": shapes}


def busy_mode(args, sgemm, busy_s=60):
    """GPT-2 small's weights, 5 rows and 1 row, idle and beside two busy-loop processes
    (`timeout 60`: they stop on their own even if this script is killed)."""
    weights = make_weights(args.data, "small", MODELS["small"], args.layers)
    five = random_rows(weights, 5)
    one = {n_in: x[:1] for n_in, x in five.items()}
    many = threads.n_threads()
    calls = {"x @ W, OpenBLAS threads, 5 rows": (Candidate(plain, many), five),
             "x[:1] @ W, OpenBLAS threads, 1 row": (Candidate(one_row, many), one),
             "kernels.compiled_matmul, 5 rows": (Candidate(kernels.compiled_matmul, 1), five),
             "kernels.compiled_matmul, 1 row": (Candidate(kernels.compiled_matmul, 1), one),
             "x @ W, OpenBLAS 1 thread, 5 rows": (Candidate(plain, 1), five),
             "x[:1] @ W, OpenBLAS 1 thread, 1 row": (Candidate(one_row, 1), one)}

    def measure():
        load_before = load_average()
        times = {label: [] for label in calls}
        for _ in range(2 * args.runs):
            for label, (candidate, rows) in calls.items():
                times[label].append(time_pass(candidate, rows, weights))
        return {"load_before": load_before, "load_after": load_average(), "times_s": times}

    idle = measure()
    busy_loops = [subprocess.Popen(["timeout", str(busy_s), sys.executable, "-c", "while True: pass"])
                  for _ in range(2)]
    try:
        time.sleep(2)
        busy = measure()
    finally:
        for process in busy_loops:
            process.terminate()
            process.wait()
    for label in calls:
        (idle_median, idle_iqr), (busy_median, busy_iqr) = (median_iqr(idle["times_s"][label]),
                                                            median_iqr(busy["times_s"][label]))
        print(f"{label:40s} idle {1e3 * idle_median:7.1f} ms (IQR {1e3 * idle_iqr:.1f})  busy "
              f"{1e3 * busy_median:7.1f} ms (IQR {1e3 * busy_iqr:.1f})  x{busy_median / idle_median:.2f}")
    return {"idle": idle, "busy": busy}


def cache_mode(args, sgemm, n_repeats=4000, tiles=((64, 320), (32, 800), (64, 800), (16, 4800))):
    """One core, one tile of W kept in cache and multiplied n_repeats times (a stride-0 stack):
    GB/s of weights for one GEMV per row (bytes read R times) and for one GEMM for all rows."""
    set_blas_threads(1)
    rng = np.random.default_rng(0)

    def seconds(function):  # median of args.runs calls, after one untimed
        times = []
        for _ in range(args.runs + 1):
            start = time.perf_counter()
            function()
            times.append(time.perf_counter() - start)
        return median_iqr(times[1:])[0]

    results = []
    for b, c in tiles:
        tile = rng.standard_normal((b, c), dtype=np.float32)
        for n_rows in (1, 2, 5, 9):
            x_gemv = rng.standard_normal((n_repeats, n_rows, 1, b), dtype=np.float32)
            out_gemv = np.empty((n_repeats, n_rows, 1, c), np.float32)
            gemv_s = seconds(lambda: np.matmul(x_gemv, np.broadcast_to(tile, (n_repeats, 1, b, c)), out=out_gemv))
            x_gemm = rng.standard_normal((n_repeats, n_rows, b), dtype=np.float32)
            out_gemm = np.empty((n_repeats, n_rows, c), np.float32)
            gemm_s = seconds(lambda: np.matmul(x_gemm, np.broadcast_to(tile, (n_repeats, b, c)), out=out_gemm))
            results.append({"b": b, "c": c, "n_rows": n_rows, "gemv_per_row_gbs": tile.nbytes * n_rows * n_repeats / gemv_s / 1e9,
                            "gemm_gbs": tile.nbytes * n_repeats / gemm_s / 1e9, "load": load_average()})
            print(f"tile {b}x{c} ({tile.nbytes // 1024} KB), {n_rows} rows: per-row GEMV "
                  f"{results[-1]['gemv_per_row_gbs']:.1f} GB/s per row, GEMM {results[-1]['gemm_gbs']:.1f} GB/s of W",
                  flush=True)
    return {"n_repeats": n_repeats, "tiles": results}


def placed_at(shape, offset, rng):
    """Random float32 weights of `shape` starting `offset` bytes past a 32-byte boundary (GPT-2 XL's
    model.safetensors places its tensors 24 bytes past one: safetensors aligns them to 8 bytes)."""
    n = math.prod(shape)
    buffer = np.empty(n + 16, np.float32)
    start = (-buffer.ctypes.data % 32 + offset) // 4
    W = buffer[start:start + n].reshape(shape)
    W[...] = rng.standard_normal(shape, dtype=np.float32)
    return W


def band_pairs(x, W, acc, start, stop, lead=0, segment=256):
    """A register-blocked alternative to fast/compiled.py's band_product, tried for several
    rows: 4 rows of W per pass, each vector of W loaded once into a register and applied to two
    rows of x (6 loads per 8 multiply-adds instead of 9). acc += x[:, start:stop] @ W[start:stop]."""
    n_rows, n_out = x.shape[0], W.shape[1]
    lead = min(lead, n_out)
    n_segments = 1 + (n_out - lead + segment - 1) // segment
    i = start
    while i + 4 <= stop:
        for s in range(n_segments):
            o = 0 if s == 0 else lead + (s - 1) * segment
            e = lead if s == 0 else min(lead + s * segment, n_out)
            w0, w1, w2, w3 = W[i, o:e], W[i + 1, o:e], W[i + 2, o:e], W[i + 3, o:e]
            r = 0
            while r < n_rows:
                r2 = min(r + 1, n_rows - 1)  # an odd last row is computed twice and kept once
                a0, a1, a2, a3 = x[r, i], x[r, i + 1], x[r, i + 2], x[r, i + 3]
                b0, b1, b2, b3 = x[r2, i], x[r2, i + 1], x[r2, i + 2], x[r2, i + 3]
                a, b = acc[r, o:e], acc[r2, o:e]
                for j in range(e - o):
                    u0, u1, u2, u3 = w0[j], w1[j], w2[j], w3[j]
                    sum_a = (a0 * u0 + a1 * u1) + (a2 * u2 + a3 * u3)
                    sum_b = (b0 * u0 + b1 * u1) + (b2 * u2 + b3 * u3)
                    a[j] += sum_a
                    if r2 != r:
                        b[j] += sum_b
                r += 2
        i += 4
    while i < stop:
        for r in range(n_rows):
            for j in range(n_out):
                acc[r, j] += x[r, i] * W[i, j]
        i += 1


def compute_mode(args, sgemm, n_repeats=2000, shape=(64, 1280), row_counts=(1, 2, 5, 9), offset=24):
    """How fast the compiled loop (fast/compiled.py) does its arithmetic, beside how fast memory
    delivers the weights. Arithmetic: W of `shape` (320 KB, stays in each core's L2), placed
    `offset` bytes past a 32-byte boundary as in the checkpoint, multiplied n_repeats times on
    one thread and on every thread at once (each its own W), in GB/s of W; twice: with the
    vector loop starting on the boundary (kernels.lead, as compiled_rows runs it) and from
    column 0 (half the 32-byte loads straddle two cache lines). Memory: passes of kernels.compiled_matmul
    over GPT-2 XL's linear weights (args.layers layers) with one row, in the same GB/s. If the
    arithmetic for R rows is not well above the memory rate, the product of R rows cannot hide
    under the stream of weights from memory: it costs more than one row."""
    kernel = compiled.loops().band
    if kernel is None:
        print("numba is not installed: nothing to measure (pip install 'picogpt[fast]')")
        return {"compute": [], "memory_gbs": None}
    rng = np.random.default_rng(0)
    n_threads = threads.n_threads()

    import numba
    blocked = numba.njit(nogil=True, boundscheck=False, fastmath={"contract"})(band_pairs)

    def arithmetic_gbs(n_rows, threads, aligned, kernel=kernel):  # median of args.runs timings, GB/s of W summed over threads
        Ws = [placed_at(shape, offset, rng) for _ in range(threads)]
        xs = [rng.standard_normal((n_rows, shape[0]), dtype=np.float32) for _ in range(threads)]
        accs = [kernels.empty_aligned_with((n_rows, shape[1]), W) for W in Ws]  # as compiled_rows has them
        leads = [kernels.lead(W) if aligned else 0 for W in Ws]
        rates = []
        for _ in range(args.runs + 1):
            barrier, ends = threading.Barrier(threads + 1), [0.0] * threads

            def work(t):
                barrier.wait()
                for _ in range(n_repeats):
                    kernel(xs[t], Ws[t], accs[t], 0, shape[0], leads[t])
                ends[t] = time.perf_counter()

            workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
            for worker in workers:
                worker.start()
            barrier.wait()
            start = time.perf_counter()
            for worker in workers:
                worker.join()
            rates.append(threads * Ws[0].nbytes * n_repeats / (max(ends) - start) / 1e9)
        return median_iqr(rates[1:])[0]

    weights = make_weights(args.data, "xl", MODELS["xl"], args.layers)
    x = random_rows(weights, 1)
    memory = Candidate(lambda rows, W: kernels.compiled_matmul(rows, W), 1)
    memory_s = median_iqr(interleaved({"memory": memory}, x, weights, args.runs)["memory"])[0]
    memory_gbs = sum(W.nbytes for W in weights) / memory_s / 1e9
    print(f"memory: one row over {len(weights)} matrices of GPT-2 XL, {n_threads} threads: {memory_gbs:.1f} GB/s")
    results = []
    for n_rows in row_counts:
        row = {"n_rows": n_rows, "load": load_average()}
        for aligned, name in ((True, "on_boundary"), (False, "from_column_0")):
            one, every = arithmetic_gbs(n_rows, 1, aligned), arithmetic_gbs(n_rows, n_threads, aligned)
            row[name] = {"one_thread_gbs": one, "all_threads_gbs": every, "all_threads_over_memory": every / memory_gbs}
        one, every = arithmetic_gbs(n_rows, 1, True, blocked), arithmetic_gbs(n_rows, n_threads, True, blocked)
        row["register_blocked"] = {"one_thread_gbs": one, "all_threads_gbs": every,
                                   "all_threads_over_memory": every / memory_gbs}
        print(f"{n_rows} rows, W in L2, {n_threads} threads: {row['on_boundary']['all_threads_gbs']:.1f} GB/s of W "
              f"= {row['on_boundary']['all_threads_over_memory']:.2f}x the memory rate "
              f"(one thread {row['on_boundary']['one_thread_gbs']:.1f}); vector loop from column 0: "
              f"{row['from_column_0']['all_threads_gbs']:.1f} (one thread {row['from_column_0']['one_thread_gbs']:.1f}); "
              f"register-blocked 4x2: {row['register_blocked']['all_threads_gbs']:.1f} "
              f"(one thread {row['register_blocked']['one_thread_gbs']:.1f})", flush=True)
        results.append(row)
    return {"n_repeats": n_repeats, "shape": list(shape), "offset_bytes": offset, "threads": n_threads,
            "memory_gbs": memory_gbs, "compute": results}

def between_mode(args, sgemm, n_past=32, row_counts=(1, 5, 9)):
    """The forward pass's work between the products, without the products: gpt2.py as written
    (NumPy, about 40 operations per layer) against fast/block.py (that work compiled), for a
    call on 1, 5 and 9 new positions after n_past cached ones, each product replaced by an
    array of zeros of its shape. Parameters of GPT-2 small's and XL's shapes and depths (--layers
    is not used for them): the layer norms,
    biases and embeddings random, the matrices stand-ins of the right shape (never read)."""
    from picogpt import gpt2 as reference
    from picogpt.gpt2 import GPT2Config
    from picogpt.kv_cache import KVCache

    if compiled.loops() is None:
        print("numba is not installed: nothing to measure (pip install 'picogpt-speculative[fast]')")
        return {"models": []}
    import block  # numba-compiled on first use
    rng = np.random.default_rng(0)

    def zeros_product(x, W):
        return np.zeros((x.shape[0], W.shape[1]), np.float32)

    results = []
    for model in args.models:
        e, n_layer = MODELS[model], DEPTHS.get(model, args.layers)
        config = GPT2Config(n_layer=n_layer, n_head=e // 64, n_embd=e, n_ctx=1024, n_vocab=50257)
        def vector(n):
            return rng.standard_normal(n, dtype=np.float32)

        def matrix(n_in, n_out):
            return np.broadcast_to(np.float32(0), (n_in, n_out))

        params = {"wte": {"weight": rng.standard_normal((50257, e), dtype=np.float32)},
                  "wpe": {"weight": rng.standard_normal((1024, e), dtype=np.float32)},
                  "ln_f": {"weight": vector(e), "bias": vector(e)},
                  "h": [{"ln_1": {"weight": vector(e), "bias": vector(e)}, "ln_2": {"weight": vector(e), "bias": vector(e)},
                         "attn": {"c_attn": {"weight": matrix(e, 3 * e), "bias": vector(3 * e)},
                                  "c_proj": {"weight": matrix(e, e), "bias": vector(e)}},
                         "mlp": {"c_fc": {"weight": matrix(e, 4 * e), "bias": vector(4 * e)},
                                 "c_proj": {"weight": matrix(4 * e, e), "bias": vector(e)}}} for _ in range(n_layer)]}
        cache = KVCache(n_layer, config.n_head, 64, config.n_ctx)
        reference.gpt2(rng.integers(0, 50257, n_past), params, config, cache, matmul=zeros_product)
        ways = {"gpt2.py (NumPy)": reference.gpt2, "block.py (compiled, candidate)": block.gpt2_cached}
        for n_rows in row_counts:
            ids = rng.integers(0, 50257, n_rows)
            times = {way: [] for way in ways}
            for _ in range(args.runs + 1):
                for way, forward in ways.items():
                    cache.truncate(n_past)
                    start = time.perf_counter()
                    for _ in range(10):
                        cache.truncate(n_past)
                        forward(ids, params, config, cache, matmul=zeros_product)
                    times[way].append((time.perf_counter() - start) / 10)
            times = {way: values[1:] for way, values in times.items()}
            row = {"model": model, "n_layer": n_layer, "n_rows": n_rows, "n_past": n_past, "load": load_average(),
                   "times_s": times}
            results.append(row)
            print(f"{model}, {n_layer} layers, {n_rows} rows after {n_past}: "
                  + ", ".join(f"{way} {1e3 * median_iqr(v)[0]:.2f} ms" for way, v in times.items()), flush=True)
    return {"models": results}


def paths_mode(args, sgemm):
    """The whole fast path, end to end: GPT-2 small drafting for GPT-2 XL (random weights of the
    published shapes under --weights, written once by `python -m picogpt bench`; real ones if
    there), speculative and autoregressive sampling of --tokens tokens at temperature
    --temperature, K = --k, with each way of computing the products in turn, interleaved (per
    repeat: every path once, the same seed), after one warm-up run of each. ms per token."""
    from picogpt.model import GPT2, load_checkpoint
    from picogpt.sampling import autoregressive_sampling
    from picogpt.speculative import speculative_sampling

    def model(name):
        real = args.weights / name / "model.safetensors"
        return load_checkpoint(real if real.exists() else args.weights / f"random-{name}" / "model.safetensors", name)

    draft, target = model("gpt2"), model("gpt2-xl")
    draft.prepare(), target.prepare()
    paths = {  # name: (matmul, the model's class); NumPy's BLAS on one thread, as kernels.choose leaves it
        "picogpt.fast: compiled few rows; one row in 2 bands per thread, the LM head in bands of wte's rows":
            (kernels.compiled_matmul, GPT2),
        "one row under 16 MiB on the calling thread, the LM head by its inputs (former.one_core_matmul)":
            (former.one_core_matmul, GPT2),
        "bands taken by whoever is free, 4 per thread, one row included (former.bands_matmul)":
            (former.bands_matmul, GPT2),
        "OpenBLAS's threads for big one-row and many-row products": (former.blas_threads_matmul, GPT2),
        "former: team + compiled block + compiled products": (former.team_matmul, former.FormerPath),
        "NumPy only: picogpt.fast without numba": (kernels.numpy_matmul, GPT2),
        "NumPy only, bands taken by whoever is free": (numpy_bands, GPT2)}
    if compiled.loops() is None:
        paths = {name: path for name, path in paths.items() if name.startswith("NumPy")}
    ids = np.random.default_rng(0).integers(0, target.config.n_vocab, 32)
    controls = dict(temperature=args.temperature)

    def run(path, kind, seed):
        matmul, kind_of_model = paths[path]
        for m in (draft, target):
            m.__class__, m.matmul = kind_of_model, matmul
        start = time.perf_counter()
        if kind == "speculative":
            result = speculative_sampling(draft, target, ids, args.tokens, K=args.k, seed=seed, **controls)
        else:
            result = autoregressive_sampling(target, ids, args.tokens, seed=seed, **controls)
        seconds = (time.perf_counter() - start) / args.tokens
        time.sleep(SETTLE_S)  # OpenBLAS's threads spin on after a call: not into the next path's run
        return seconds, len(result.tokens)

    times = {path: {"autoregressive": [], "speculative": []} for path in paths}
    for repeat in range(args.runs + 1):  # the first round warms up
        for path in paths:
            for kind in ("autoregressive", "speculative"):
                seconds, _ = run(path, kind, seed=repeat)
                if repeat:
                    times[path][kind].append(seconds)
        if repeat:
            print(f"repeat {repeat}: " + "; ".join(
                f"{path[:24]}: {1e3 * t['autoregressive'][-1]:.0f} / {1e3 * t['speculative'][-1]:.0f} ms"
                for path, t in times.items()), flush=True)
    return {"tokens": args.tokens, "K": args.k, "temperature": args.temperature, "load": load_average(),
            "times_s_per_token": times}


def numpy_bands(x, W):
    """former.bands_matmul without numba."""
    return former.bands_matmul(x, W, with_compiled=False)


def machine():
    """What the numbers were measured on."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "threads": threads.n_threads(), "numpy": np.__version__,
            "python": platform.python_version()}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["rows", "loop", "busy", "cache", "compute", "one-row", "between", "paths"])
    parser.add_argument("--layers", type=int, default=12, help="layers of each model (GPT-2 small and XL: 12 and 48)")
    parser.add_argument("--runs", type=int, default=5, help="interleaved passes per candidate")
    parser.add_argument("--models", default="xl,small", help="rows, one-row: comma-separated, of " + ",".join(MODELS))
    parser.add_argument("--rows", default="1-9", help="rows: n_rows, as 1-9 or 1,2,5")
    parser.add_argument("--no-settle", dest="settle", action="store_false",
                        help=f"rows: no {SETTLE_S} s pause after a pass on OpenBLAS's threads")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder for the random weights")
    parser.add_argument("--out", type=Path, default=None, help="JSON file (default results-<mode>.json here)")
    parser.add_argument("--weights", type=Path, default=HERE.parent.parent / "weights",
                        help="paths: the folder holding gpt2/ and gpt2-xl/ (or random-gpt2/ and random-gpt2-xl/)")
    parser.add_argument("--tokens", type=int, default=64, help="paths: tokens per run")
    parser.add_argument("--k", type=int, default=4, help="paths: drafted tokens per loop")
    parser.add_argument("--temperature", type=float, default=3.0, help="paths: the sampling temperature")
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    if any(m not in MODELS for m in args.models):
        parser.error(f"--models {','.join(args.models)}: expected names from {', '.join(MODELS)}")
    if "-" in args.rows:
        first, last = args.rows.split("-")
        args.rows = list(range(int(first), int(last) + 1))
    else:
        args.rows = [int(n) for n in args.rows.split(",")]
    return args


def main(argv=None):
    args = parse_args(argv)
    sgemm = find_sgemm()
    if sgemm is None:
        print("note: cblas_sgemm not found in NumPy's OpenBLAS: the ctypes candidates are left out")
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    modes = {"rows": rows_mode, "loop": loop_mode, "busy": busy_mode, "cache": cache_mode, "compute": compute_mode,
             "one-row": one_row_mode, "between": between_mode, "paths": paths_mode}
    results = modes[args.mode](args, sgemm)
    set_blas_threads(1)
    record = {"mode": args.mode, "started": started, "machine": machine(), "sgemm_found": sgemm is not None,
              "command": "benchmarks/kernels/candidates.py " + " ".join(sys.argv[1:] if argv is None else argv),
              **results}
    out = args.out or HERE / f"results-{args.mode}.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"raw times: {out}")


if __name__ == "__main__":
    main()
