"""What left picogpt's fast path, or did not join it, kept here so that it stays measured beside
what it runs:

- one row times a weight under ONE_CORE_BYTES on the calling thread, and the LM head's one row
  cut by its inputs (`one_core_matmul`): the package's products before decode_profile.py's profile;
- bands taken by whoever is free (`bands_matmul`): every big one-row and many-row product cut
  into CHUNKS_PER_THREAD bands per thread of picogpt's (`split_input_bands`; for the LM head
  `split_output_bands`, bands of wte's rows);
- OpenBLAS's own threads for the big one-row and many-row products (`blas_threads_matmul`);
- the L2 tiles (`tiled`, `by_output_rows`): NumPy's best few-row product without numba, one
  GEMV per row on tiles of ~80 KB of W (the first row brings a tile into L2, the others re-read
  it from there);
- the thread team (team.py): helper threads that wait in compiled code for the length of one
  model call, so that every product, one row included, starts on every core within a
  microsecond (`team_call`, `team_matmul`);
- the compiled block (block.py): gpt2.py's forward pass for a few positions with a KV cache, the
  work between the products compiled;
- top-k and top-p on one np.partition / np.sort of the whole row (`partition_top_k_filter`,
  `sort_top_p_filter`): picogpt.sampling's truncation before `kth_largest` and `nucleus`, for
  truncation.py, which times the two on rows of every kind and in the quick start's command;
- `FormerPath`: the model call as it was, with all three (a team for each call of a model
  reading at least BIG_MODEL_BYTES per token on at most FEW_ROWS positions, the block for such
  calls with a cache, the team's products inside them), for `candidates.py paths`, which times
  it end to end beside the path that replaced it.
"""

import contextlib
import functools

import numpy as np
from threadpoolctl import ThreadpoolController

from picogpt import sampling
from picogpt.fast import compiled, kernels
from picogpt.fast.kernels import FEW_ROWS, numpy_matmul
from picogpt.fast.threads import CHUNKS_PER_THREAD, n_threads, parallel
from picogpt.gpt2 import gpt2
from picogpt.kv_cache import KVCache
from picogpt.model import GPT2, cache_unchanged_unless_returned

ONE_CORE_BYTES = 16 << 20  # one_core_matmul: one row times a smaller weight stayed on the calling thread
TILE_BYTES = 80 * 1024  # one tile's weights: well inside a 512 KB L2 (64 x 320 floats at XL)
BIG_MODEL_BYTES = 64 << 20  # smaller models (the teaching pair) ran gpt2.py without a team or block
TEAM_MATRIX = 1 << 18  # weights; with a team ready, matrices this big or bigger were shared with it
TEAM_HEAD_BANDS_PER_THREAD = 8  # the LM head's bands on a team: many, each a contiguous run of wte's rows


# ---- one row on one core ----------------------------------------------------------------------

def one_core_matmul(x, W, with_compiled=True):
    """The package's products before the profile (`with_compiled`: kernels.compiled_matmul, else
    numpy_matmul): one row times a weight under ONE_CORE_BYTES by OpenBLAS's GEMV on the calling
    thread (a helper thread's wake-up was thought to cost more than the second core brings), and
    the LM head's one row and many rows cut by its inputs (`kernels.split_inputs`)."""
    route = kernels.route(x, W, with_compiled)
    if x.shape[0] == 1 and route in ("split_inputs", "split_outputs") and W.nbytes < ONE_CORE_BYTES:
        return np.matmul(x, W)
    if route == "split_outputs":
        return kernels.split_inputs(x, W)
    return kernels.PRODUCTS[route](x, W)


# ---- the L2 tiles -----------------------------------------------------------------------------

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
    chunk of tiles; a partial sum per band of b input rows, added at the end."""
    x = np.ascontiguousarray(x)
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
    partial = np.empty((n_bands, n_cols, n_rows, 1, c), np.float32)

    def multiply(start, stop):
        np.matmul(x_bands[start:stop], tiles[start:stop], out=partial[start:stop])

    parallel(multiply, n_bands)
    out = np.empty((n_rows, n_out), np.float32)
    out[:, :out_end].reshape(n_rows, n_cols, c)[...] = partial.sum(0)[:, :, 0].transpose(1, 0, 2)
    if in_end < n_in:
        out[:, :out_end] += x[:, in_end:] @ W[in_end:, :out_end]
    if out_end < n_out:
        out[:, out_end:] = x @ W[:, out_end:]
    return out


def by_output_rows(x, W_t):
    """x @ W_t.T for W_t [n_out, n_in] C-contiguous (wte): whole rows of W_t in tiles of about
    TILE_BYTES, one GEMV per row of x on each tile, tiles shared among the threads."""
    x = np.ascontiguousarray(x)
    n_rows, n_in = x.shape
    n_out = W_t.shape[0]
    c = max(1, min(n_out, TILE_BYTES // (4 * n_in)))
    n_tiles = n_out // c
    end = n_tiles * c
    tiles = W_t[:end].reshape(n_tiles, 1, c, n_in)
    x_column = x.reshape(1, n_rows, n_in, 1)
    out = np.empty((n_rows, n_out), np.float32)
    out_tiles = out[:, :end].reshape(n_rows, n_tiles, c).transpose(1, 0, 2)[..., None]

    def multiply(start, stop):
        np.matmul(tiles[start:stop], x_column, out=out_tiles[start:stop])

    parallel(multiply, n_tiles)
    if end < n_out:
        out[:, end:] = x @ W_t[end:].T
    return out


def tiled_matmul(x, W):
    """The former NumPy path: kernels.numpy_matmul, with a few rows on the L2 tiles."""
    route = kernels.route(x, W, with_compiled=False)
    if route != "split_inputs" or x.shape[0] == 1 or x.shape[0] > FEW_ROWS:
        return numpy_matmul(x, W)
    return by_output_rows(x, W.T) if W.flags.f_contiguous and not W.flags.c_contiguous else tiled(x, W)


# ---- the thread team and the compiled block ----------------------------------------------------

@functools.cache
def team():
    """team.py's Team for n_threads() - 1 helpers, or None (one thread, or no numba)."""
    if n_threads() < 2 or compiled.loops() is None:
        return None
    import team as team_module  # numba's intrinsics: compiled on first use, cached beside it

    return team_module.Team(n_threads() - 1)


_serving = None  # the team of the model call under way, if it has one


@contextlib.contextmanager
def team_call(bytes_per_token=BIG_MODEL_BYTES, n_rows=1):
    """One model call on n_rows positions with a team ready for its length (as the former path
    did for models of at least BIG_MODEL_BYTES per token on at most FEW_ROWS positions)."""
    global _serving
    ready = team() if bytes_per_token >= BIG_MODEL_BYTES and n_rows <= FEW_ROWS else None
    if ready is None or not ready.start():
        yield
        return
    _serving = ready
    try:
        yield
    finally:
        _serving = None
        ready.stop()


def team_matmul(x, W):
    """The former `matmul`: inside a team's call every big few-row product on the team, one row
    included; otherwise kernels.compiled_matmul."""
    head = W.flags.f_contiguous and not W.flags.c_contiguous
    if (_serving is not None and _serving.serving() and W.ndim == 2 and W.dtype == x.dtype == np.float32
            and W.size >= TEAM_MATRIX and x.shape[0] <= FEW_ROWS and (W.flags.c_contiguous or head)):
        x = np.ascontiguousarray(x)
        if head:
            return _serving.head(x, W.T, n_threads() * TEAM_HEAD_BANDS_PER_THREAD)
        return _serving.rows(x, W, n_threads() * kernels.BANDS_PER_THREAD)
    return kernels.compiled_matmul(x, W)


class FormerPath(GPT2):
    """A GPT2 whose call runs as the fast path did before it was simplified: for a model of at
    least BIG_MODEL_BYTES per token on at most FEW_ROWS positions, a team for the call and, with
    a cache, the compiled block; team_matmul for every product. `FormerPath.of(model)` turns a
    loaded model into one (the same weights)."""

    with_block = True

    @classmethod
    def of(cls, model):
        model.__class__ = cls
        return model

    @cache_unchanged_unless_returned
    def __call__(self, ids, cache=None):
        import block  # numba-compiled on first use, cached beside it

        ids = self.validate_inputs(ids, cache)
        self.prepare()
        big = self.bytes_per_token >= BIG_MODEL_BYTES and len(ids) <= FEW_ROWS
        forward = block.gpt2_cached if big and self.with_block and isinstance(cache, KVCache) else None
        with team_call(self.bytes_per_token, len(ids)):
            return self.ensure_finite((forward or gpt2)(ids, self.fast_params, self.config, cache,
                                                         matmul=team_matmul))


class TeamOnly(FormerPath):
    """The former path without the compiled block: a team for each big call, gpt2.py as written
    between the products (which of the two made the former path faster)."""

    with_block = False


# ---- bands taken by whoever is free -------------------------------------------------------------

def split_input_bands(x, W):
    """x @ W with W's rows (the inputs) cut into CHUNKS_PER_THREAD bands per thread, each band's
    partial product written into a slot of its own by whichever thread takes it, the slots
    added at the end. [n_rows, n_in] @ [n_in, n_out] -> [n_rows, n_out]."""
    n_in = W.shape[0]
    n_bands = max(1, min(n_threads() * CHUNKS_PER_THREAD, n_in // 8))
    edges = [n_in * k // n_bands for k in range(n_bands + 1)]
    partial = np.empty((n_bands, x.shape[0], W.shape[1]), np.float32)  # [n_bands, n_rows, n_out]

    def multiply(start, stop):
        for k in range(start, stop):
            np.matmul(x[:, edges[k]:edges[k + 1]], W[edges[k]:edges[k + 1]], out=partial[k])

    parallel(multiply, n_bands)
    return partial.sum(0) if n_bands > 1 else partial[0]


def split_output_bands(x, W):
    """x @ W with W's columns (the outputs) cut into CHUNKS_PER_THREAD bands per thread, each
    written straight into its columns of the result (for the LM head, W = wte.T: bands of
    wte's contiguous rows, nothing to add). [n_rows, n_in] -> [n_rows, n_out]."""
    n_out = W.shape[1]
    n_bands = max(1, min(n_threads() * CHUNKS_PER_THREAD, n_out // 8))
    edges = [n_out * k // n_bands for k in range(n_bands + 1)]
    out = np.empty((x.shape[0], n_out), np.float32)

    def multiply(start, stop):
        for k in range(start, stop):
            out[:, edges[k]:edges[k + 1]] = x @ W[:, edges[k]:edges[k + 1]]

    parallel(multiply, n_bands)
    return out


def bands_matmul(x, W, with_compiled=True):
    """kernels.compiled_matmul (`with_compiled`, else numpy_matmul) with every product it would
    give split_inputs or split_outputs in bands instead."""
    route = kernels.route(x, W, with_compiled)
    if route in ("split_inputs", "split_outputs"):
        return split_output_bands(x, W) if route == "split_outputs" else split_input_bands(x, W)
    return kernels.PRODUCTS[route](x, W)


# ---- OpenBLAS's own threads ---------------------------------------------------------------------

@functools.cache
def blas_pools():
    """threadpoolctl's handles on NumPy's BLAS libraries (their thread counts)."""
    return ThreadpoolController().select(user_api="blas").lib_controllers


def blas_threads_matmul(x, W):
    """kernels.compiled_matmul with every product it would give split_inputs or split_outputs on
    OpenBLAS's own threads (as many as picogpt's), set around the product, then one again."""
    if kernels.route(x, W) not in ("split_inputs", "split_outputs"):
        return kernels.compiled_matmul(x, W)
    for pool in blas_pools():
        pool.set_num_threads(n_threads())
    try:
        return x @ W
    finally:
        for pool in blas_pools():
            pool.set_num_threads(1)


# ---- truncation on the whole row ----------------------------------------------------------------

def partition_top_k_filter(probs, k):
    """sampling.top_k_filter before kth_largest: the k-th largest by np.partition of the whole row."""
    n_vocab = probs.shape[-1]
    if k >= n_vocab:
        return probs
    kth = np.partition(probs, n_vocab - k, axis=-1)[..., n_vocab - k, None]
    return sampling.renormalise(probs, sampling.keep_top(probs, k, kth))


def sort_top_p_filter(probs, top_p):
    """sampling.top_p_filter before nucleus: every row sorted whole, then cumulated."""
    if top_p >= 1:
        return probs
    sorted_probs = -np.sort(-probs, axis=-1)  # descending
    cumulative = sorted_probs.cumsum(axis=-1)
    mass_before = np.concatenate([np.zeros_like(cumulative[..., :1]), cumulative[..., :-1]], axis=-1)
    k = np.maximum(1, (mass_before < top_p - sampling.TOP_P_ROUNDING).sum(axis=-1, keepdims=True))
    kth = np.take_along_axis(sorted_probs, k - 1, axis=-1)
    return sampling.renormalise(probs, sampling.keep_top(probs, k, kth))
