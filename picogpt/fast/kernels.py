"""Fast matrix products for decoding: the `matmul` that model.py chooses once, when a model is
prepared (`choose`), and hands gpt2.py for every weight product.

They read the checkpoint's own weights, exactly the arrays gpt2.py multiplies by: linear weights
W [n_in, n_out] (GPT-2's Conv1D layout, C-contiguous, memory-mapped from model.safetensors) and
the LM head wte.T (an F-contiguous view of wte [n_vocab, n_embd]). Nothing is copied or written.

Decoding a token reads every weight once for two flops per weight, so on a CPU it waits on
memory, not arithmetic. Scoring K + 1 positions in one call (Algorithm 2) should then cost
about one decode, *if* the product reads each weight once for all rows. NumPy's OpenBLAS does
not: its GEMM copies ("packs") the weights before multiplying, and its unpacked small-matrix
kernel is off for AVX2 CPUs, so `x @ W` for 2-16 rows runs well below memory speed. Its
matrix-vector product (GEMV) is the one fast primitive: it streams weights at full bandwidth.
So, by the number of rows of x:
- one row: OpenBLAS's GEMV with W's input rows cut into bands for the threads (`split_inputs`): one
  core streams about half of what two do (benchmarks/kernels/results-profile-before.json), which
  outweighs waking a helper thread, even for GPT-2 small's 7-9 MB matrices; for the LM head,
  wte's rows, its outputs, in bands that the threads take (`split_outputs`);
- a few rows (the scoring call): picogpt's own loops compiled by numba (compiled.py), which apply
  each weight to every row once loaded (`compiled_rows`, and `compiled_head` for wte.T); without
  numba, a GEMM per band of W's input rows (`split_inputs`, as for a prompt);
- many rows (a prompt): a GEMM per band of W's input rows, on every thread (`split_inputs`; the
  LM head's `split_outputs`).
Small or unusual matrices go to np.matmul as they are. The candidates that did not earn their
place (L2 tiles of GEMVs, a thread team waiting in compiled code for the length of a call, the
work between products compiled) are measured beside these in benchmarks/kernels/.

Threads: big products are shared among picogpt's own threads (threads.py), with NumPy's BLAS on
one thread; `choose` sets that up before a model's first call.
"""

import math

import numpy as np

from . import compiled
from .threads import CHUNKS_PER_THREAD, bands, blas_on_one_thread, n_threads, parallel

FEW_ROWS = 16  # more rows than this (a prompt) go to GEMM, which is compute-bound there
BIG_MATRIX = 1 << 20  # weights; smaller matrices go to np.matmul as they are
BANDS_PER_THREAD = 2  # partial sums per thread: a few, so that a delayed thread's band is taken by another
VECTOR_BYTES = 32  # an AVX2 load; the compiled loops start their vector loads on this boundary


def choose():
    """The matmul for this process, decided once when a model is prepared: `compiled_matmul`
    when numba's loops run here (and PICOGPT_KERNEL allows them), else `numpy_matmul`. NumPy's
    BLAS goes on one thread first (threads.blas_on_one_thread): picogpt's threads share its products."""
    blas_on_one_thread()
    return compiled_matmul if compiled.enabled() else numpy_matmul


def route(x, W, with_compiled=True):
    """Which product computes x @ W, by name: 'numpy', 'split_inputs', 'split_outputs'
    (the LM head), 'compiled_rows' or 'compiled_head' (the compiled ones only `with_compiled`)."""
    head = W.ndim == 2 and W.flags.f_contiguous and not W.flags.c_contiguous  # the LM head: wte.T, a view of wte
    if not (W.ndim == 2 and W.dtype == x.dtype == np.float32 and W.size >= BIG_MATRIX
            and (W.flags.c_contiguous or head)):
        return "numpy"  # a small or unusual matrix: np.matmul as it is
    n_rows = x.shape[0]
    if n_rows == 1 or n_rows > FEW_ROWS or not with_compiled:
        return "split_outputs" if head else "split_inputs"
    return "compiled_head" if head else "compiled_rows"


def numpy_matmul(x, W):
    """x @ W for gpt2.gpt2's `matmul`, with NumPy's OpenBLAS alone. [n_rows, n_in] -> [n_rows, n_out]."""
    return PRODUCTS[route(x, W, with_compiled=False)](x, W)


def compiled_matmul(x, W):
    """x @ W for gpt2.gpt2's `matmul`, a few rows with numba's compiled loops (each weight read
    once for all rows), one row and many with OpenBLAS. Equal to x @ W up to the order of
    summation (~1e-6 relative). [n_rows, n_in] -> [n_rows, n_out]."""
    return PRODUCTS[route(x, W)](x, W)


# ---- the products ----------------------------------------------------------------------------

def split_inputs(x, W):
    """x @ W with W's rows (the inputs) cut into BANDS_PER_THREAD bands per thread, taken by
    whichever thread is free, the partial products added: one row (GEMV) or many (GEMM).
    [n_rows, n_in] @ [n_in, n_out] -> [n_rows, n_out]."""
    parts = bands(W.shape[0], min(n_threads() * BANDS_PER_THREAD, W.shape[0]))
    partial = [None] * len(parts)

    def multiply(start, stop):
        for i in range(start, stop):
            lo, hi = parts[i]
            partial[i] = x[:, lo:hi] @ W[lo:hi]

    parallel(multiply, len(parts), chunks_per_thread=BANDS_PER_THREAD)
    return np.sum(partial, axis=0, dtype=np.float32) if len(partial) > 1 else partial[0]


def split_outputs(x, W):
    """x @ W for the LM head, W = wte.T (a view of wte [n_out, n_in], C-contiguous), with wte's
    rows (the outputs) cut into bands that the threads take: each band is whole rows of wte, one
    dot product with x each, where `split_inputs` would give every thread half of every row.
    [n_rows, n_in] -> [n_rows, n_out]."""
    W_t = W.T  # wte [n_out, n_in]
    out = np.empty((x.shape[0], W_t.shape[0]), np.float32)
    parts = bands(W_t.shape[0], n_threads() * CHUNKS_PER_THREAD)

    def multiply(start, stop):
        for lo, hi in parts[start:stop]:
            out[:, lo:hi] = x @ W_t[lo:hi].T

    parallel(multiply, len(parts))
    return out


def lead(array):
    """Columns before the first 32-byte boundary of `array`'s rows (0 to 7 float32s; every row
    starts at the same offset when a row's bytes are a multiple of 32, as at all GPT-2 shapes).
    The compiled loops start their vector loads there: a 32-byte (AVX) load that straddles two
    cache lines costs about two, and model.safetensors aligns tensors to 8 bytes only."""
    return (-array.ctypes.data % VECTOR_BYTES) // array.itemsize


def empty_aligned_with(shape, array):
    """An uninitialised float32 array of `shape` that starts at the same offset from a 32-byte
    boundary as `array`: its columns then cross 32-byte boundaries where `array`'s do."""
    n = math.prod(shape)
    buffer = np.empty(n + VECTOR_BYTES // 4, np.float32)
    skip = (array.ctypes.data - buffer.ctypes.data) % VECTOR_BYTES // 4
    return buffer[skip:skip + n].reshape(shape)


def compiled_rows(x, W):
    """x @ W with the compiled band_product for x [n_rows, n_in] C-contiguous: W's input rows
    cut into bands of a multiple of 8 rows, a partial sum per band (taken by any thread), added
    at the end. [n_rows, n_in] @ [n_in, n_out] -> [n_rows, n_out]."""
    band = compiled.loops().band
    n_rows, n_in = x.shape
    n_bands = max(1, min(n_threads() * BANDS_PER_THREAD, n_in // 8))
    edges = [8 * ((n_in // 8) * k // n_bands) for k in range(n_bands)] + [n_in]
    partial = empty_aligned_with((n_bands, n_rows, W.shape[1]), W)  # [n_bands, n_rows, n_out]
    partial[...] = 0
    lead_columns = lead(W)

    def multiply(start, stop):
        for k in range(start, stop):
            band(x, W, partial[k], edges[k], edges[k + 1], lead_columns)

    parallel(multiply, n_bands, chunks_per_thread=BANDS_PER_THREAD)
    return partial.sum(0) if n_bands > 1 else partial[0]


def compiled_head(x, W_t):
    """x @ W_t.T for W_t [n_out, n_in] C-contiguous (the LM head: W_t is wte) with the compiled
    head_product: bands of W_t's rows shared among the threads; x copied to cross 32-byte
    boundaries where W_t's rows do. The order of summation follows that offset, so a
    memory-mapped wte and a copy of it (in_memory) give logits equal to ~1e-7, not bit for bit.
    [n_rows, n_in] -> [n_rows, n_out]."""
    head = compiled.loops().head
    n_out = W_t.shape[0]
    x_aligned = empty_aligned_with(x.shape, W_t)
    x_aligned[...] = x
    out = np.empty((x.shape[0], n_out), np.float32)
    n_bands = n_threads() * CHUNKS_PER_THREAD
    edges = [n_out * k // n_bands for k in range(n_bands + 1)]
    lead_columns = lead(W_t)

    def multiply(start, stop):
        for k in range(start, stop):
            head(x_aligned, W_t, out, edges[k], edges[k + 1], lead_columns)

    parallel(multiply, n_bands)
    return out


PRODUCTS = {  # route -> x @ W, x [n_rows, n_in] -> [n_rows, n_out]
    "numpy": np.matmul,
    "split_inputs": split_inputs,
    "split_outputs": split_outputs,
    "compiled_rows": lambda x, W: compiled_rows(np.ascontiguousarray(x), W),
    "compiled_head": lambda x, W: compiled_head(np.ascontiguousarray(x), W.T),
}
