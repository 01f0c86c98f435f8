"""The fast path: model.py's forward pass, unchanged, with weights laid out for decoding.

Decoding a token reads every weight once and does two flops per weight, so on a CPU it is
bound by memory bandwidth, not arithmetic. Scoring K+1 positions in one call (speculative
sampling, Algorithm 2) should then cost about as much as decoding one, *if* the matrix product
streams each weight once for all rows. NumPy's BLAS (OpenBLAS) does that for one row (a
matrix-vector product, GEMV) but not for a few: its matrix-matrix product first copies ("packs")
the weights into cache-sized panels, and for 2-9 rows that copy costs more than the arithmetic.
Measured at GPT-2 XL shapes on one core: `x @ W` with 5 rows takes ~3.5x as long as with 1 row.

What we do instead (see `python -m picogpt bench` and benchmarks/README.md for the numbers):
- keep each linear layer's weight transposed, [n_out, n_in] (the layout of PyTorch's nn.Linear),
  in one contiguous array, made once by `prepare` (for big models: once per checkpoint, kept
  in a file beside it, see `transposed_weights`);
- one row through a big matrix: OpenBLAS's GEMV, `weight_t @ x`, which streams the weights on
  all cores at the machine's bandwidth (the bench's ceiling is measured with it);
- a few rows (2..16, speculative scoring): blocks of up to 64 output rows,
  `[n_rows, n_in] @ [n_in, 64]`, each small enough for OpenBLAS's copy-free small-matrix kernel
  and read once for all rows; for a big matrix the blocks are shared out among the cores by our
  own threads, each writing its part of the result in place;
- small matrices (under BIG_MATRIX weights, e.g. the embedded pair's layers) stay on one core,
  as blocks: handing work to a thread costs tens of microseconds, more than they take;
- many rows (a long prompt) go to the ordinary GEMM, which is compute-bound there.

The forward pass itself is `model.gpt2`, called with prepared parameters: `x @ weight` on a
`TransposedWeight` runs `TransposedWeight.__rmatmul__`. So the fast path computes the same
functions in the same order; only the summation order inside each dot product differs (~1e-6).
"""

import os
import shutil
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .checkpoint import read_metadata, read_safetensors, write_safetensors
from .errors import CheckpointError, PicoGPTError
from .hardware import available_memory_bytes

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
    """A linear layer's weight, used as `x @ weight` for weight [n_in, n_out] like any array,
    but stored transposed, `.t` [n_out, n_in], and multiplied by `matmul_transposed`."""

    __array_ufunc__ = None  # tells NumPy that `x @ self` is ours: Python calls __rmatmul__

    def __init__(self, weight_t):
        self.t = weight_t

    @property
    def shape(self):
        return self.t.shape[::-1]

    def __rmatmul__(self, x):
        return matmul_transposed(x, self.t)


class TiedEmbedding:
    """GPT-2's token embedding wte [n_vocab, n_embd]: `wte[ids]` looks rows up, and `wte.T`,
    the LM head [n_embd, n_vocab], is already stored transposed, so it needs no copy."""

    def __init__(self, wte):
        self.wte = wte
        self.T = TransposedWeight(wte)

    def __getitem__(self, ids):
        return self.wte[ids]


LINEARS = (("attn", "c_attn"), ("attn", "c_proj"), ("mlp", "c_fc"), ("mlp", "c_proj"))
CACHE_MIN_BYTES = 256 * 2**20  # smaller models are transposed in memory in well under a second
LAYOUT = "picogpt-fast-1"  # written into the cache file; change it when the layout changes


def linear_weights(params):
    """{checkpoint name: weight [n_in, n_out]} of every linear layer, in order."""
    return {f"h.{i}.{group}.{name}.weight": block[group][name]["weight"]
            for i, block in enumerate(params["h"]) for group, name in LINEARS}


def transpose_all(weights):
    """Transposed copies of a list of weights, made on all cores."""
    transposed = [None] * len(weights)

    def transpose_some(start, stop):
        for i in range(start, stop):
            transposed[i] = transpose(weights[i])

    parallel(transpose_some, len(weights))
    return transposed


# ---- the transposed copy on disk, beside the checkpoint ---------------------------------------
# Transposing GPT-2 XL's 5.9 GB of linear weights takes seconds (a strided copy, ~2 GB/s per
# core, plus the fresh memory), in every process that loads it. So for big models it is done
# once and written beside the checkpoint; later loads memory-map it: ready at once, and every
# process (each notebook kernel) shares the same pages of the OS page cache.

def cache_path(checkpoint):
    return Path(checkpoint).with_name(Path(checkpoint).stem + ".picogpt-fast.safetensors")


def stamp(checkpoint):
    """What the cache was made from: it is remade when the checkpoint changes."""
    stat = Path(checkpoint).stat()
    return {"layout": LAYOUT, "source_bytes": str(stat.st_size), "source_mtime_ns": str(stat.st_mtime_ns)}


def wants_cache_file(params):
    return sum(w.nbytes for w in linear_weights(params).values()) >= CACHE_MIN_BYTES


def cache_is_fresh(checkpoint):
    """Whether the cache file beside `checkpoint` exists and was made from it as it is now."""
    path = cache_path(checkpoint)
    try:
        return path.exists() and read_metadata(path) == stamp(checkpoint)
    except (CheckpointError, OSError):
        return False


def read_cache(checkpoint, names):
    """The cached transposed weights (memory-mapped), or None if missing, stale or unreadable."""
    try:
        if not cache_is_fresh(checkpoint):
            return None
        tensors = read_safetensors(cache_path(checkpoint))
        return [tensors[name] for name in names]
    except (CheckpointError, KeyError, OSError):
        return None


def write_cache(path, names, transposed, cache_stamp):
    """Write the cache if the disk has room; returns whether it did."""
    n_bytes = sum(t.nbytes for t in transposed)
    try:
        if shutil.disk_usage(path.parent).free < n_bytes + 2**30:
            print(f"picogpt: not enough free disk for {path.name} ({n_bytes / 1e9:.1f} GB): the fast "
                  "layout is made in memory on every load instead", file=sys.stderr)
            return False
        print(f"picogpt: writing the fast layout once, {path} ({n_bytes / 1e9:.1f} GB)", file=sys.stderr)
        write_safetensors(path, dict(zip(names, transposed)), metadata=cache_stamp)
        return True
    except OSError as e:
        print(f"picogpt: could not write {path} ({e}): the fast layout stays in memory", file=sys.stderr)
        return False


def transposed_weights(params, checkpoint=None):
    """The transposed linear weights: from the cache file for a big model loaded from
    `checkpoint` (making the file first if needed), else copied in memory."""
    weights = linear_weights(params)
    names = list(weights)
    if checkpoint is None or not wants_cache_file(params):
        return transpose_all(list(weights.values()))
    cached = read_cache(checkpoint, names)
    if cached is None:
        transposed = transpose_all(list(weights.values()))
        if not write_cache(cache_path(checkpoint), names, transposed, stamp(checkpoint)):
            return transposed
        del transposed  # use the file instead: its pages are shared with other processes
        cached = read_cache(checkpoint, names)
    return cached if cached is not None else transpose_all(list(weights.values()))


def prepare(params, checkpoint=None):
    """Parameters for the fast path: the same nested dict, with every linear weight a
    TransposedWeight and wte a TiedEmbedding (see transposed_weights for where they come from)."""
    transposed = iter(transposed_weights(params, checkpoint))
    prepared = {**params, "wte": {"weight": TiedEmbedding(params["wte"]["weight"])}, "h": []}
    for block in params["h"]:
        prepared["h"].append({**block, "attn": dict(block["attn"]), "mlp": dict(block["mlp"])})
        for group, name in LINEARS:
            layer = prepared["h"][-1][group]
            layer[name] = {"weight": TransposedWeight(next(transposed)), "bias": block[group][name]["bias"]}
    return prepared


# ---- in memory: a private copy instead of the mapped files ---------------------------------
# Mapped weights are shared by every process and ready at once, but they are read through the
# OS page cache, which holds a file in pieces as big as free memory allowed when it was read.
# How fast they stream then varies: on the bench machine GPT-2 XL decoded 24% slower from the
# mapped files than from a private copy in one run (benchmarks/README.md, "Mapped weights"). A
# copy is fresh memory, laid out in order, mostly in 2 MB pages, and stayed at 1.12-1.14x the
# bandwidth floor in every committed run; it costs seconds and the weights' size in every
# process. (llama.cpp's --no-mmap makes the same trade.)

MEMORY_MARGIN = 2**30  # bytes left free for everything else when copying the weights in


def arrays_of(node):
    """Every array in a (prepared) parameter tree, in the order `copied` visits them."""
    found = []
    copied(node, copy=lambda array: found.append(array) or array)
    return found


def copied(node, copy=np.array):
    """The same tree with every array replaced by copy(array): by default a copy in this
    process's memory."""
    if isinstance(node, dict):
        return {key: copied(child, copy) for key, child in node.items()}
    if isinstance(node, list):
        return [copied(child, copy) for child in node]
    if isinstance(node, TiedEmbedding):
        return TiedEmbedding(copy(node.wte))
    if isinstance(node, TransposedWeight):
        return TransposedWeight(copy(node.t))
    return copy(node)


def check_fits(n_bytes, name):
    """Raise a clear error if copying n_bytes would leave less than MEMORY_MARGIN free."""
    available = available_memory_bytes()
    if available is not None and n_bytes + MEMORY_MARGIN > available:
        raise PicoGPTError(f"copying {name}'s weights into memory needs {n_bytes / 1e9:.1f} GB, and "
                           f"{available / 1e9:.1f} GB is available: load it without in_memory "
                           "(memory-mapped), or close other programs or notebook kernels")


def in_memory(prepared, name="the model"):
    """prepared parameters copied out of the mapped files, after checking that they fit."""
    n_bytes = sum(a.nbytes for a in arrays_of(prepared))
    check_fits(n_bytes, name)
    if n_bytes >= CACHE_MIN_BYTES:
        print(f"picogpt: copying {name}'s weights into memory ({n_bytes / 1e9:.1f} GB)", file=sys.stderr)
    return copied(prepared)


copy_array = np.array  # what copy_in_place copies with (the tests slow it down)


def copy_in_place(node):
    """Replace every array of a prepared tree by a copy, one at a time, in place. A forward pass
    running meanwhile reads each weight when it gets to it, old or new: the same numbers."""
    if isinstance(node, dict):
        for key, child in node.items():
            if isinstance(child, np.ndarray):
                node[key] = copy_array(child)
            else:
                copy_in_place(child)
    elif isinstance(node, list):
        for child in node:
            copy_in_place(child)
    elif isinstance(node, TiedEmbedding):
        node.wte = node.T.t = copy_array(node.wte)
    elif isinstance(node, TransposedWeight):
        node.t = copy_array(node.t)


def in_memory_in_background(prepared, name="the model"):
    """(parameters, thread): the model runs at once on the mapped weights, and a background
    thread copies them into memory one array at a time, swapping each in as it is done; thread
    is None, with a note, when the copy would not fit (the weights then stay mapped)."""
    prepared = copied(prepared, copy=lambda array: array)  # its own dicts: the model's params stay as they are
    try:
        check_fits(sum(a.nbytes for a in arrays_of(prepared)), name)
    except PicoGPTError as e:
        print(f"picogpt: {e}; it stays memory-mapped", file=sys.stderr)
        return prepared, None
    thread = threading.Thread(target=copy_in_place, args=(prepared,), name=f"picogpt-copy-{name}", daemon=True)
    thread.start()
    return prepared, thread
