"""Fast matrix products for decoding: the `matmul` that picogpt/model.py hands gpt2.py.

They read the checkpoint's own weights, exactly the arrays gpt2.py multiplies by: linear weights
W [n_in, n_out] (GPT-2's Conv1D layout, C-contiguous, memory-mapped from model.safetensors) and
the LM head wte.T (an F-contiguous view of wte [n_vocab, n_embd]). Nothing is copied or written.

Decoding a token reads every weight once for two flops per weight, so on a CPU it waits on
memory, not arithmetic. Scoring K + 1 positions in one call (Algorithm 2) should then cost
about one decode, *if* the product reads each weight once for all rows. NumPy's OpenBLAS does
not: its GEMM copies ("packs") the weights before multiplying, and its unpacked small-matrix
kernel is off for AVX2 CPUs, so `x @ W` for 2-9 rows runs well below memory speed. Its
matrix-vector product (GEMV) is the one fast primitive: it streams weights at full bandwidth,
and re-reads weights already in L2 several times faster. So:
- a few rows of a linear weight go to the compiled product (fast/compiled.py: loops that numba
  compiles, applying each weight to every row once loaded), when numba is installed; without
  it, `tiled` cuts W into tiles of ~80 KB and runs one GEMV per row on each (the first row
  brings a tile into L2, the others re-read it from there);
- the LM head (wte.T) takes compiled dot products of each row of wte with every row of x
  (`compiled_head`), or without numba NumPy's GEMV by whole rows of wte (`by_output_rows`);
- one row of a big weight is a GEMV shared among the threads (`split_inputs`), except below
  ONE_CORE_BYTES, where it stays on the calling thread: a helper thread asleep since the last
  product starts tens of microseconds after it is asked, a large share of a small product;
- many rows (a prompt) are a GEMM shared among the threads;
- inside one call of a big model on a few positions (`call`, which model.py wraps around each
  call), a team of helper threads waits in compiled code for the length of the call
  (fast/team.py): then every few-row product, one row included, is the compiled product on all
  cores (`team_rows`, `team_head`), each starting within a microsecond.
Every candidate is re-runnable in benchmarks/kernels/candidates.py, which measures them side by
side (results in benchmarks/kernels/); `matmul` names its choice in `route`.

Threads: big products are shared among picogpt's own threads (fast/threads.py), with OpenBLAS
on one thread (fast/openblas.py); `prepare` sets that up before a model's first call.
"""

import contextlib
import math

import numpy as np

from ..kv_cache import KVCache
from . import compiled, openblas
from .threads import CHUNKS_PER_THREAD, bands, n_threads, parallel

TILE_BYTES = 80 * 1024  # one tile's weights: well inside a 512 KB L2 (64 x 320 floats at XL)
MAX_TILED_ROWS = 16  # more rows than this (a prompt) go to GEMM, which is compute-bound there
BIG_MATRIX = 1 << 20  # weights; smaller matrices go to np.matmul as they are
ONE_CORE_BYTES = 16 << 20  # one row times a smaller weight: OpenBLAS's GEMV on the calling thread alone
BANDS_PER_THREAD = 2  # the compiled product's partial sums: a few, so a delayed thread's band is taken by another
VECTOR_BYTES = 32  # an AVX2 load; the compiled loops start their vector loads on this boundary
BIG_MODEL_BYTES = 64 << 20  # a model reading fewer bytes per token (the teaching pair) runs gpt2.py without a team:
# its per-operation costs, which make its 48-layer target expensive, are the costs it was trained to teach
TEAM_MATRIX = 1 << 18  # weights; with a team ready, matrices this big or bigger are shared with it
TEAM_HEAD_BANDS_PER_THREAD = 8  # the LM head's bands: many, each a contiguous run of wte's rows


def team():
    """The compiled kernels' Team (fast/team.py) for n_threads(), or None (one thread, or no numba)."""
    return compiled.team(n_threads() - 1) if n_threads() > 1 and compiled.enabled() else None


_serving = None  # the team of the model call under way, if it has one


def serving():
    """The team ready for the calling thread's model call (`call`), or None."""
    return _serving if _serving is not None and _serving.serving() else None


@contextlib.contextmanager
def call(bytes_per_token, n_rows=1):
    """One model call on n_rows positions: with a team ready for its length if the model is big
    enough and its products are few-row ones (a prompt's are not: waiting helpers would only take
    turns with the threads that share them), the team is free, and the machine was not found busy
    a moment ago (fast/team.py)."""
    global _serving
    ready = team() if bytes_per_token >= BIG_MODEL_BYTES and n_rows <= MAX_TILED_ROWS else None
    if ready is None or not ready.start():
        yield
        return
    _serving = ready
    try:
        yield
    finally:
        _serving = None
        ready.stop()


def forward(n_rows, cache, bytes_per_token):
    """The forward pass for a call on n_rows positions with `cache`: fast/block.py's
    gpt2_cached (the work between products compiled) for a few positions with a KV cache of a
    model of at least BIG_MODEL_BYTES per token when the compiled kernels run, else None
    (gpt2.gpt2 as written)."""
    if (cache is None or not isinstance(cache, KVCache) or n_rows > MAX_TILED_ROWS or bytes_per_token < BIG_MODEL_BYTES
            or not compiled.enabled()):
        return None
    return compiled.compile_kernels()["block"].gpt2_cached


def prepare():
    """What the fast path needs before a model's first call, done once per process so that no
    timed call pays for it: OpenBLAS on one thread (openblas.use_own_threads) and the compiled
    products loaded from numba's cache, or compiled once per install (compiled.enabled)."""
    openblas.use_own_threads()
    compiled.enabled()


# ---- the products ----------------------------------------------------------------------------

def split_inputs(x, W):
    """x @ W with W's rows (the inputs) cut into one band per thread, the partial products
    added: one row (GEMV) or many (GEMM). [n_rows, n_in] @ [n_in, n_out] -> [n_rows, n_out]."""
    parts = bands(W.shape[0], min(n_threads(), W.shape[0]))
    partial = [None] * len(parts)

    def multiply(start, stop):
        for i in range(start, stop):
            lo, hi = parts[i]
            partial[i] = x[:, lo:hi] @ W[lo:hi]

    parallel(multiply, len(parts), chunks_per_thread=1)
    return np.sum(partial, axis=0, dtype=np.float32) if len(partial) > 1 else partial[0]


def divisor_near(n, target, low, high):
    """The divisor of n in [low, high] closest to target, or None."""
    divisors = [d for d in range(max(1, low), min(high, n) + 1) if n % d == 0]
    return min(divisors, key=lambda d: abs(d - target)) if divisors else None


def tile_shape(n_in, n_out):
    """(b, c): tiles of b input rows x c output columns, about TILE_BYTES, dividing W if they can."""
    c = divisor_near(n_out, 320, 128, 512) or min(n_out, 320)
    b = max(8, min(n_in, TILE_BYTES // (4 * c)))
    return divisor_near(n_in, b, max(8, b // 2), 2 * b) or b, c


def tiled(x, W):
    """x @ W for a few rows, W [n_in, n_out] C-contiguous: for each tile, one GEMV per row (the
    first streams the tile from memory, the rest re-read it from L2), all in one np.matmul per
    chunk of tiles; a partial sum per band of b input rows, added at the end.
    [n_rows, n_in] -> [n_rows, n_out]."""
    n_rows, n_in = x.shape
    n_out = W.shape[1]
    b, c = tile_shape(n_in, n_out)
    n_bands, n_cols = n_in // b, n_out // c
    in_end, out_end = n_bands * b, n_cols * c
    row_stride, col_stride = W.strides
    tiles = np.lib.stride_tricks.as_strided(  # a view of W: [n_bands, n_cols, 1, b, c]
        W, (n_bands, n_cols, 1, b, c), (b * row_stride, c * col_stride, 0, row_stride, col_stride),
        writeable=False)
    x_bands = x[:, :in_end].reshape(n_rows, n_bands, b).transpose(1, 0, 2)[:, None, :, None, :]
    partial = np.empty((n_bands, n_cols, n_rows, 1, c), np.float32)  # [n_bands, n_cols, n_rows, 1, c]

    def multiply(start, stop):  # [.., 1, n_rows, 1, b] @ [.., n_cols, 1, b, c] -> [.., n_cols, n_rows, 1, c]
        np.matmul(x_bands[start:stop], tiles[start:stop], out=partial[start:stop])

    if W.size >= BIG_MATRIX:
        parallel(multiply, n_bands)
    else:
        multiply(0, n_bands)
    out = np.empty((n_rows, n_out), np.float32)
    out[:, :out_end].reshape(n_rows, n_cols, c)[...] = partial.sum(0)[:, :, 0].transpose(1, 0, 2)
    if in_end < n_in:  # input rows left over (none at GPT-2's shapes)
        out[:, :out_end] += x[:, in_end:] @ W[in_end:, :out_end]
    if out_end < n_out:  # output columns left over
        out[:, out_end:] = x @ W[:, out_end:]
    return out


def team_rows(x, W):
    """x @ W for x [n_rows, n_in] C-contiguous, on the team of the model call under way: the
    compiled product in bands of W's input rows, one partial sum each, added at the end."""
    return serving().rows(x, W, n_threads() * BANDS_PER_THREAD)


def team_head(x, W_t):
    """x @ W_t.T for W_t = wte [n_out, n_in] on the team of the model call under way: bands of
    W_t's rows, each computing its own columns of the result (compiled_head's arithmetic)."""
    return serving().head(x, W_t, n_threads() * TEAM_HEAD_BANDS_PER_THREAD)


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
    """x @ W with the compiled product (fast/compiled.py) for x [n_rows, n_in] C-contiguous:
    W's input rows cut into bands of a multiple of 8 rows, a partial sum per band (taken by
    any thread), added at the end. [n_rows, n_in] @ [n_in, n_out] -> [n_rows, n_out]."""
    kernel = compiled.compile_kernel()
    n_rows, n_in = x.shape
    n_bands = max(1, min(n_threads() * BANDS_PER_THREAD, n_in // 8)) if W.size >= BIG_MATRIX else 1
    edges = [8 * ((n_in // 8) * k // n_bands) for k in range(n_bands)] + [n_in]
    partial = empty_aligned_with((n_bands, n_rows, W.shape[1]), W)  # [n_bands, n_rows, n_out]
    partial[...] = 0
    lead_columns = lead(W)

    def multiply(start, stop):
        for k in range(start, stop):
            kernel(x, W, partial[k], edges[k], edges[k + 1], lead_columns)

    parallel(multiply, n_bands, chunks_per_thread=BANDS_PER_THREAD)
    return partial.sum(0) if n_bands > 1 else partial[0]


def compiled_head(x, W_t):
    """x @ W_t.T for W_t [n_out, n_in] C-contiguous (the LM head: W_t is wte) with the compiled
    dot products (fast/compiled.py): bands of W_t's rows shared among the threads; x copied to
    cross 32-byte boundaries where W_t's rows do. The order of summation follows that offset, so
    a memory-mapped wte and a copy of it (in_memory) give logits equal to ~1e-7, not bit for bit.
    [n_rows, n_in] -> [n_rows, n_out]."""
    head = compiled.compile_head()
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


def by_output_rows(x, W_t):
    """x @ W_t.T for W_t [n_out, n_in] C-contiguous (the LM head: W_t is wte): whole rows of W_t
    in tiles of about TILE_BYTES, one GEMV per row of x on each tile (full dot products, nothing
    to add up), tiles shared among the threads. [n_rows, n_in] -> [n_rows, n_out]."""
    n_rows, n_in = x.shape
    n_out = W_t.shape[0]
    c = max(1, min(n_out, TILE_BYTES // (4 * n_in)))
    n_tiles = n_out // c
    end = n_tiles * c
    tiles = W_t[:end].reshape(n_tiles, 1, c, n_in)  # contiguous: [n_tiles, 1, c, n_in]
    x_column = x.reshape(1, n_rows, n_in, 1)
    out = np.empty((n_rows, n_out), np.float32)
    out_tiles = out[:, :end].reshape(n_rows, n_tiles, c).transpose(1, 0, 2)[..., None]  # [n_tiles, n_rows, c, 1]

    def multiply(start, stop):  # [.., 1, c, n_in] @ [1, n_rows, n_in, 1] -> [.., n_rows, c, 1]
        np.matmul(tiles[start:stop], x_column, out=out_tiles[start:stop])

    if W_t.size >= BIG_MATRIX:
        parallel(multiply, n_tiles)
    else:
        multiply(0, n_tiles)
    if end < n_out:
        out[:, end:] = x @ W_t[end:].T
    return out


def route(x, W):
    """Which product `matmul` computes x @ W with, by name (a key of PRODUCTS)."""
    plain = W.ndim == 2 and W.dtype == np.float32 and x.dtype == np.float32 and W.size >= BIG_MATRIX
    head = W.flags.f_contiguous and not W.flags.c_contiguous  # the LM head: wte.T, a view of wte
    if W.ndim == 2 and W.dtype == x.dtype == np.float32 and W.size >= TEAM_MATRIX \
            and x.shape[0] <= MAX_TILED_ROWS and (W.flags.c_contiguous or head) and serving() is not None:
        return "team_head" if head else "team_rows"  # helpers ready: every row on every thread
    if not plain or not (W.flags.c_contiguous or head):
        return "numpy"  # a small or unusual matrix: np.matmul as it is
    if x.shape[0] > MAX_TILED_ROWS:
        return "split_inputs"  # a prompt: GEMM, bands of W's input rows on all threads
    if x.shape[0] == 1 and W.nbytes < ONE_CORE_BYTES:
        return "one_core"  # one row, a smaller weight: OpenBLAS's GEMV on the calling thread
    if compiled.enabled():
        return "compiled_head" if head else "compiled_rows"  # each weight once for all rows
    if head:
        return "by_output_rows"  # whole rows of wte in L2 tiles, one GEMV per row of x
    return "split_inputs" if x.shape[0] == 1 else "tiled"  # one row: GEMV on all threads


PRODUCTS = {  # route -> x @ W, x [n_rows, n_in] -> [n_rows, n_out]
    "numpy": np.matmul,
    "one_core": np.matmul,
    "split_inputs": split_inputs,
    "tiled": lambda x, W: tiled(np.ascontiguousarray(x), W),
    "compiled_rows": lambda x, W: compiled_rows(np.ascontiguousarray(x), W),
    "compiled_head": lambda x, W: compiled_head(np.ascontiguousarray(x), W.T),
    "team_rows": lambda x, W: team_rows(np.ascontiguousarray(x), W),
    "team_head": lambda x, W: team_head(np.ascontiguousarray(x), W.T),
    "by_output_rows": lambda x, W: by_output_rows(np.ascontiguousarray(x), W.T),
}


def matmul(x, W):
    """x @ W for the forward pass (gpt2.gpt2's `matmul`), reading W once for all rows of x.

    W is a linear weight [n_in, n_out] (C-contiguous) or the LM head wte.T (F-contiguous); small
    matrices, and any other array, go to np.matmul. [n_rows, n_in] -> [n_rows, n_out], float32;
    equal to x @ W up to the order of summation (~1e-6 relative)."""
    return PRODUCTS[route(x, W)](x, W)
