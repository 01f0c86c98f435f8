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
- a few rows of a linear weight go to the compiled product (perf/compiled.py: loops that numba
  compiles, applying each weight to every row once loaded), when numba is installed; without
  it, `tiled` cuts W into tiles of ~80 KB and runs one GEMV per row on each (the first row
  brings a tile into L2, the others re-read it from there);
- the LM head (wte.T) takes compiled dot products of each row of wte with every row of x
  (`compiled_head`), or without numba NumPy's GEMV by whole rows of wte (`by_output_rows`);
- one row of a big weight is a GEMV shared among the threads (`split_inputs`), except below
  ONE_CORE_BYTES, where it stays on the calling thread: a helper thread asleep since the last
  product starts tens of microseconds after it is asked, a large share of a small product;
- many rows (a prompt) are a GEMM shared among the threads.
Every candidate is re-runnable in benchmarks/kernels/candidates.py, which measures them side by
side (results in benchmarks/kernels/); `matmul` names its choice in `route`.

Threads: OpenBLAS's own threads spin ~0.1 s after each call and slow whatever runs next (the
other model's call, in a sampling loop), and fight over the cores when the machine is busy. So
the fast path runs OpenBLAS on ONE thread (`use_own_threads`, called when a model first runs on
it) and shares every big product among its own threads, which take chunks from a common
counter: a thread the OS delays does not hold the others up. PICOGPT_THREADS sets how many
(default: the cores this process may use).
"""

import contextlib
import ctypes
import functools
import glob
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import PicoGPTError
from . import compiled

TILE_BYTES = 80 * 1024  # one tile's weights: well inside a 512 KB L2 (64 x 320 floats at XL)
MAX_TILED_ROWS = 16  # more rows than this (a prompt) go to GEMM, which is compute-bound there
BIG_MATRIX = 1 << 20  # weights; smaller matrices go to np.matmul as they are
ONE_CORE_BYTES = 16 << 20  # one row times a smaller weight: OpenBLAS's GEMV on the calling thread alone
CHUNKS_PER_THREAD = 4
BANDS_PER_THREAD = 2  # the compiled product's partial sums: a few, so a delayed thread's band is taken by another
THREADS_ENV = "PICOGPT_THREADS"
MAX_THREADS_PER_CORE = 4  # more threads than cores only take turns; each costs a stack and a share of every product
VECTOR_BYTES = 32  # an AVX2 load; the compiled loops start their vector loads on this boundary


# ---- threads ---------------------------------------------------------------------------------

def n_threads():
    """Threads the fast path uses: $PICOGPT_THREADS, else the cores this process may use.
    (Asked on every product: the variable is read each time, its meaning worked out once.)"""
    return threads_for(os.environ.get(THREADS_ENV, "").strip())


@functools.cache
def threads_for(value):
    """The thread count a value of $PICOGPT_THREADS stands for ('' for unset): a whole number
    from 1 to MAX_THREADS_PER_CORE per usable core, written in ASCII digits."""
    if not value:
        return usable_cores()
    most = MAX_THREADS_PER_CORE * usable_cores()
    if not (value.isascii() and value.isdigit() and len(value) <= 6 and 1 <= int(value) <= most):
        raise PicoGPTError(f"{THREADS_ENV}={value[:20]!r}: expected a whole number of threads from 1 to {most} "
                           f"({MAX_THREADS_PER_CORE} per core this process may use), or unset it to use every core")
    return int(value)


def usable_cores():
    """The cores this process may run on (its CPU affinity where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def openblas_symbol(*names):
    """(name, ctypes function) for the first of `names` found in the OpenBLAS that NumPy ships
    (numpy.libs/ on Linux and Windows, .dylibs/ on macOS), or (None, None)."""
    numpy_dir = os.path.dirname(np.__file__)
    for pattern in ("../numpy.libs/*openblas*", ".libs/*openblas*", ".dylibs/*openblas*", "../numpy/.dylibs/*openblas*"):
        for path in sorted(glob.glob(os.path.join(numpy_dir, pattern))):
            try:
                library = ctypes.CDLL(path)
            except OSError:
                continue
            for name in names:
                if hasattr(library, name):
                    return name, getattr(library, name)
    return None, None


@functools.cache
def openblas_thread_setter():
    """openblas_set_num_threads from the OpenBLAS that NumPy ships, or None if not found."""
    _, setter = openblas_symbol("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
                                "openblas_set_num_threads64_", "openblas_set_num_threads")
    if setter is not None:
        setter.argtypes, setter.restype = [ctypes.c_int], None
    return setter


_blas_pinned = False


def use_own_threads():
    """Run OpenBLAS on one thread from now on, in this whole process (our threads share the
    work instead; see the module docstring). Returns whether OpenBLAS was found."""
    global _blas_pinned
    if not _blas_pinned:
        setter = openblas_thread_setter()
        if setter is None:
            return False
        setter(1)
        _blas_pinned = True
    return True


def prepare():
    """What the fast path needs before a model's first call, done once per process so that no
    timed call pays for it: OpenBLAS on one thread (use_own_threads) and the compiled products
    loaded from numba's cache, or compiled once per install (compiled.enabled)."""
    use_own_threads()
    compiled.enabled()


@contextlib.contextmanager
def openblas_on_all_threads():
    """Within the block, OpenBLAS runs on n_threads() threads of its own (as NumPy uses it
    outside picogpt); afterwards back to one if the fast path pinned it (the bandwidth ceiling
    is measured with OpenBLAS's threaded GEMV)."""
    setter = openblas_thread_setter()
    if setter is not None and _blas_pinned:
        setter(n_threads())
    try:
        yield
    finally:
        if setter is not None and _blas_pinned:
            setter(1)


_pool, _pool_size = None, 0


def pool():
    """Helper threads (n_threads() - 1: the calling thread works too), made on first use."""
    global _pool, _pool_size
    size = max(1, n_threads() - 1)
    if _pool is None or _pool_size != size:
        _pool, _pool_size = ThreadPoolExecutor(max_workers=size, thread_name_prefix="picogpt"), size
    return _pool


class Chunks:
    """range(n_items) cut into chunks that any thread may take, one at a time."""

    def __init__(self, function, n_items, n_chunks):
        self.function, self.n_items = function, n_items
        self.size = -(-n_items // n_chunks)  # ceil
        self.next, self.running, self.error = 0, 0, None
        self.lock = threading.Condition()

    def take(self):
        with self.lock:
            if self.next >= self.n_items or self.error is not None:
                return None
            start, self.next = self.next, self.next + self.size
            self.running += 1
            return start

    def done(self, error=None):
        with self.lock:
            self.running -= 1
            self.error = self.error or error
            self.lock.notify_all()

    def work(self):
        while (start := self.take()) is not None:
            try:
                self.function(start, min(start + self.size, self.n_items))
            except BaseException as error:  # handed to the calling thread
                self.done(error)
                return
            self.done()

    def wait(self):
        """Until every chunk taken is finished (helpers that start later find none left)."""
        with self.lock:
            self.lock.wait_for(lambda: self.running == 0)
        if self.error is not None:
            raise self.error


def parallel(function, n_items, chunks_per_thread=CHUNKS_PER_THREAD):
    """Call function(start, stop) on consecutive chunks of range(n_items), on all threads.

    The calling thread works too, and chunks go to whichever thread is free, so on a busy
    machine, where a helper thread may wait milliseconds for a core, the caller does not wait
    for it: it takes the helper's share and only waits for chunks already being worked on."""
    if n_items <= 0:
        return
    n_helpers = min(n_threads(), n_items) - 1
    chunks = Chunks(function, n_items, (n_helpers + 1) * chunks_per_thread)
    for _ in range(n_helpers):
        pool().submit(chunks.work)
    chunks.work()
    chunks.wait()


def bands(n, n_parts):
    """[(start, stop)] cutting range(n) into n_parts contiguous bands."""
    edges = [n * i // n_parts for i in range(n_parts + 1)]
    return list(zip(edges[:-1], edges[1:]))


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
    """x @ W with the compiled product (perf/compiled.py) for x [n_rows, n_in] C-contiguous:
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
    dot products (perf/compiled.py): bands of W_t's rows shared among the threads; x copied to
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
    "by_output_rows": lambda x, W: by_output_rows(np.ascontiguousarray(x), W.T),
}


def matmul(x, W):
    """x @ W for the forward pass (gpt2.gpt2's `matmul`), reading W once for all rows of x.

    W is a linear weight [n_in, n_out] (C-contiguous) or the LM head wte.T (F-contiguous); small
    matrices, and any other array, go to np.matmul. [n_rows, n_in] -> [n_rows, n_out], float32;
    equal to x @ W up to the order of summation (~1e-6 relative)."""
    return PRODUCTS[route(x, W)](x, W)
