"""Fast matrix products for decoding: the `matmul` that picogpt/model.py hands the forward pass.

Decoding a token reads every weight once and does two flops per weight, so on a CPU it is
bound by memory bandwidth, not arithmetic. Scoring K+1 positions in one call (speculative
sampling, Algorithm 2) should then cost about as much as decoding one, *if* the matrix product
streams each weight once for all rows. NumPy's BLAS (OpenBLAS) does that for one row (a
matrix-vector product, GEMV) but not for a few: its matrix-matrix product first copies ("packs")
the weights into cache-sized panels, and for 2-9 rows that copy costs more than the arithmetic.
Measured at GPT-2 XL shapes on one core: `x @ W` with 5 rows takes ~3.5x as long as with 1 row.

What we do instead (see `python -m picogpt bench` and benchmarks/README.md for the numbers),
on weights laid out transposed, [n_out, n_in] (perf/layout.py makes them):
- one row through a big matrix: OpenBLAS's GEMV, `weight_t @ x`, which streams the weights on
  all cores at the machine's bandwidth (the bench's ceiling is measured with it);
- a few rows (2..16, speculative scoring): blocks of up to 64 output rows,
  `[n_rows, n_in] @ [n_in, 64]`, each small enough for OpenBLAS's copy-free small-matrix kernel
  and read once for all rows; for a big matrix the blocks are shared out among the cores by our
  own threads, each writing its part of the result in place;
- small matrices (under BIG_MATRIX weights, e.g. the embedded pair's layers) stay on one core,
  as blocks: handing work to a thread costs tens of microseconds, more than they take;
- many rows (a long prompt) go to the ordinary GEMM, which is compute-bound there.

`matmul(x, weight)` computes the same product as `x @ weight` for the weights the forward
pass multiplies by; only the summation order inside each dot product differs (~1e-6).
"""

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

MAX_BLOCK_ROWS = 64  # output rows per block (16 to 128 measured alike for 2..5 rows, cold caches)
SMALL_GEMM = 1_000_000  # block rows * n_in * n_rows: above ~1e6 OpenBLAS packs again (measured)
MAX_STREAMED_ROWS = 16  # more input rows than this (a long prompt) go to the ordinary GEMM
BIG_MATRIX = 1 << 20  # weights; bigger matrices are multiplied on all cores (measured, see above)


def n_threads():
    """CPU cores this process may use (the `bench` compares PyTorch at the same count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


_pool = None


def pool():
    """Helper threads, one per core, created on first use; NumPy releases the GIL in matmul."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=n_threads(), thread_name_prefix="picogpt")
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


def parallel(function, n_items, chunks_per_thread=4):
    """Call function(start, stop) on consecutive chunks of range(n_items), on all cores.

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


def rows_per_block(n_in, n_rows):
    """Output rows per block: at most 64, and small enough to stay on the unpacked kernel."""
    return max(1, min(SMALL_GEMM // (n_in * n_rows), MAX_BLOCK_ROWS))


def matmul_transposed(x, weight_t):
    """x @ weight_t.T, streaming weight_t [n_out, n_in] once: [n_rows, n_in] -> [n_rows, n_out]."""
    n_rows = x.shape[0]
    if n_rows > MAX_STREAMED_ROWS:
        return x @ weight_t.T  # GEMM for long prompts
    if n_rows == 1 and weight_t.size >= BIG_MATRIX:
        return (weight_t @ x[0])[None]  # GEMV: [n_out, n_in] @ [n_in] on OpenBLAS's threads
    return streamed(x, weight_t)


def streamed(x, weight_t):
    """x @ weight_t.T in blocks of output rows, [n_rows, n_in] @ [n_in, block] each, every
    block read once for all rows; shared out among the cores when weight_t is big.
    [n_rows, n_in] -> [n_rows, n_out]."""
    n_rows = x.shape[0]
    n_out, n_in = weight_t.shape
    if n_rows == 1:  # a single row would go to OpenBLAS's GEMV, which starts threads of its own
        x = np.concatenate([x, np.zeros_like(x)])
    out = np.empty((x.shape[0], n_out), np.float32)
    block = min(rows_per_block(n_in, x.shape[0]), n_out)
    n_blocks = n_out // block
    end = n_blocks * block
    blocks_in = weight_t[:end].reshape(n_blocks, block, n_in).transpose(0, 2, 1)  # [n, n_in, block]
    blocks_out = out[:, :end].reshape(-1, n_blocks, block).transpose(1, 0, 2)  # [n, n_rows, block]

    def multiply(start, stop):  # [n_rows, n_in] @ [n, n_in, block] -> [n, n_rows, block]
        np.matmul(x, blocks_in[start:stop], out=blocks_out[start:stop])

    if weight_t.size >= BIG_MATRIX:
        parallel(multiply, n_blocks)
    else:
        multiply(0, n_blocks)
    if end < n_out:  # the last n_out % block rows
        np.matmul(x, weight_t[end:].T, out=out[:, end:])
    return out[:n_rows]


def transpose(weight, out=None):
    """A C-contiguous copy of weight.T, made in bands of 64 rows (cache-friendly)."""
    n_in, n_out = weight.shape
    out = np.empty((n_out, n_in), np.float32) if out is None else out
    for start in range(0, n_in, 64):
        out[:, start:start + 64] = weight[start:start + 64].T
    return out


class TransposedWeight:
    """A linear layer's weight [n_in, n_out], stored transposed, `.t` [n_out, n_in]:
    `matmul(x, weight)` multiplies by it with `matmul_transposed`."""

    def __init__(self, weight_t):
        self.t = weight_t

    @property
    def shape(self):
        return self.t.shape[::-1]


class TiedEmbedding:
    """GPT-2's token embedding wte [n_vocab, n_embd]: `wte[ids]` looks rows up, and `wte.T`,
    the LM head [n_embd, n_vocab], is already stored transposed, so it needs no copy."""

    def __init__(self, wte):
        self.wte = wte
        self.T = TransposedWeight(wte)

    def __getitem__(self, ids):
        return self.wte[ids]


def matmul(x, weight):
    """x @ weight for the forward pass (gpt2.gpt2's `matmul`): a TransposedWeight goes to
    matmul_transposed, any other array to np.matmul. [n_rows, n_in] -> [n_rows, n_out]."""
    if isinstance(weight, TransposedWeight):
        return matmul_transposed(x, weight.t)
    return x @ weight
