"""The GPT2 object: a config, its parameters, and the forward pass of picogpt/gpt2.py.

`model(ids)` runs `gpt2.gpt2` with the fast matrix product chosen when the model is prepared
(picogpt/fast/kernels.py: the same products, each reading a weight once for all rows);
`model.plain(ids)` runs it with np.matmul, exactly as gpt2.py reads. `load_checkpoint` reads a safetensors file;
`load` a model by name or path (io/registry.py says where each name lives).
"""

import functools
import sys
from pathlib import Path

import numpy as np

from .errors import CheckpointError, PicoGPTError, shown
from .fast import kernels
from .gpt2 import gpt2
from .io.checkpoint import identity_now, map_checkpoint, tensors_of
from .io.memory import ensure_fits
from .io.params import (
    check_config_fits,
    config_from_hf,
    config_from_json,
    infer_config,
    leaves,
    map_leaves,
    params_from_tensors,
    strip_names,
    validate_config,
)
from .io.registry import model_names, pinned_config, resolve
from .kv_cache import KVCache
from .sampling import Model

ANNOUNCE_BYTES = 256 * 2**20  # copies into memory bigger than this say so (they take seconds)


def cache_unchanged_unless_returned(call):
    """A model call (`call(model, ids, cache, *tree)`, a tree's positions and mask) that raises,
    for non-finite logits or a Ctrl-C, leaves its KV cache exactly as it was: holding the
    positions it held before (a call writes after them, so their keys and values are untouched). gpt2() advances the cache after
    its last layer; the length it held is restored here, in the outermost frame of the call,
    whose `return` lies inside the `try`: no instruction of picogpt's runs after the advance
    outside it. (A `with` block's exit, which runs after its body has returned its value, left
    such a gap.) An interrupt Python delivers after the call has returned is raised in the
    caller, with the call's positions held: docs/guarantees.md."""

    @functools.wraps(call)
    def call_that_keeps_its_cache_on_error(model, ids, cache=None, *tree, **tree_by_name):
        n_held = cache.length if isinstance(cache, KVCache) else None
        try:
            return call(model, ids, cache, *tree, **tree_by_name)
        except BaseException:
            if n_held is not None:
                cache.length = n_held
            raise

    return call_that_keeps_its_cache_on_error


class GPT2(Model):
    """A loaded GPT-2. `model(ids)` is the full forward pass; `model(ids, cache)` decodes;
    `model(ids, cache, positions, mask)` scores a token tree (gpt2.gpt2, picogpt/tree.py).

    Both run `gpt2` with `self.matmul`, the product fast/kernels.py chose when the model was
    prepared (the fast path), which reads the same weights once for all rows on all cores;
    `model.plain(...)` runs `gpt2` as written, with np.matmul (the reference path). Both read
    the checkpoint's own arrays, memory-mapped, or copied into memory with in_memory=True
    (`copied_into_memory`). Treat `params` as read-only.

    A model loaded from a file checks before each call that the file is still the one it
    mapped (`ensure_checkpoint_unchanged`): a checkpoint rewritten in place would silently give
    other weights, and one truncated would kill the process with a bus error on the next read.
    """

    def __init__(self, params, config, name="gpt2", checkpoint=None, in_memory=False, checkpoint_identity=None):
        if not isinstance(in_memory, bool):
            raise PicoGPTError(f"in_memory={in_memory!r}: expected False (memory-mapped weights) or True "
                               "(copied into memory when the model is first run)")
        self.params, self.config, self.name = params, validate_config(config, name), name
        # the file params were read from, if any: absolute, so that os.chdir does not lose it
        self.checkpoint = Path(checkpoint).absolute() if checkpoint is not None else None
        # what that file was when it was read (io/checkpoint.py's file_identity)
        self.checkpoint_identity = checkpoint_identity or (identity_now(checkpoint) if checkpoint else None)
        self.in_memory = in_memory  # copy the fast path's weights out of the mapped file
        self.fast_params = None  # the weights the fast path reads, once prepared
        self.matmul = None  # the fast path's product, chosen once prepared (fast/kernels.py)

    def __repr__(self):
        c = self.config
        return (f"GPT2({self.name!r}: {self.n_params / 1e6:.1f}M parameters, n_layer={c.n_layer}, "
                f"n_head={c.n_head}, n_embd={c.n_embd}, n_ctx={c.n_ctx}, n_vocab={c.n_vocab})")

    @property
    def arrays(self):
        return leaves(self.params)

    @property
    def n_params(self):
        return sum(a.size for a in self.arrays)

    @property
    def nbytes(self):
        """Bytes of float32 weights."""
        return sum(a.nbytes for a in self.arrays)

    @functools.cached_property
    def bytes_per_token(self):
        """Bytes of weights one decoding step reads: all of them, except that wpe is read one row."""
        wpe = self.params["wpe"]["weight"]
        return self.nbytes - wpe.nbytes + wpe[0].nbytes

    def new_cache(self):
        return KVCache(**self.shape_of_cache())

    def validate_ids(self, ids, n_past=0):
        ids = self.validate_vocabulary(ids)
        if n_past + ids.size > self.config.n_ctx:
            raise PicoGPTError(f"{n_past + ids.size} positions exceed {self.name}'s context of "
                               f"{self.config.n_ctx} tokens; shorten the prompt or generate fewer")
        return ids

    def validate_vocabulary(self, ids):
        """ids as int64, if they are a non-empty 1-D sequence of ids in the vocabulary."""
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise PicoGPTError(f"expected a non-empty 1-D sequence of token ids, got shape "
                               f"{ids.shape} of {ids.dtype}")
        bad = ids[(ids < 0) | (ids >= self.config.n_vocab)]
        if bad.size:
            raise PicoGPTError(f"token id {int(bad[0])} is outside {self.name}'s vocabulary "
                               f"of {self.config.n_vocab} (ids 0..{self.config.n_vocab - 1})")
        return ids.astype(np.int64)

    def shape_of_cache(self):
        """The shape a KVCache must have to hold this model's keys and values."""
        c = self.config
        return dict(n_layer=c.n_layer, n_head=c.n_head, head_dim=c.head_dim, n_ctx=c.n_ctx)

    def validate_cache(self, cache):
        """Refuse a KVCache made for a model of another shape (a draft's cache given to the target)."""
        if isinstance(cache, KVCache) and cache.model_shape != self.shape_of_cache():
            made_for = ", ".join(f"{k}={v}" for k, v in cache.model_shape.items())
            mine = ", ".join(f"{k}={v}" for k, v in self.shape_of_cache().items())
            raise PicoGPTError(f"this cache was made for a model with {made_for}, not {self.name} "
                               f"({mine}): give each model its own cache, from {self.name}.new_cache()")

    def validate_inputs(self, ids, cache, positions=None, mask=None):
        self.validate_cache(cache)
        n_past = len(cache) if cache is not None else 0
        if positions is None and mask is None:
            return self.validate_ids(ids, n_past)
        return self.validate_tree(ids, n_past, positions, mask)

    def validate_tree(self, ids, n_past, positions, mask):
        """A token tree's call (picogpt/tree.py): ids in the vocabulary, `positions` [n_new] whole
        numbers below the context (a tree's positions go as deep as its depth, not as far as its
        number of nodes: its branches share position numbers) and `mask` [n_new, n_past + n_new]
        (validate_mask)."""
        ids = self.validate_vocabulary(ids)
        positions = array_or_none(positions if positions is not None else np.arange(n_past, n_past + ids.size))
        if (positions is None or positions.shape != ids.shape or not np.issubdtype(positions.dtype, np.integer)
                or positions.min() < 0):
            got = "rows of unequal length" if positions is None else f"shape {positions.shape} of {positions.dtype}"
            raise PicoGPTError(f"a tree's positions must be {ids.size} whole numbers >= 0, one per token, got {got}")
        if positions.max() >= self.config.n_ctx:
            raise PicoGPTError(f"position {int(positions.max())} is past {self.name}'s context of "
                               f"{self.config.n_ctx} tokens (positions 0..{self.config.n_ctx - 1}); draft a shallower tree")
        if mask is not None:
            validate_mask(mask, (ids.size, n_past + ids.size))
        return ids

    def ensure_finite(self, logits):
        """The logits, if every one is finite; else a PicoGPTError naming the likely cause.
        One pass over [n_new, n_vocab] numbers, small next to the forward pass's matmuls."""
        if not np.isfinite(logits).all():
            raise PicoGPTError(f"{self.name} produced non-finite logits (NaN or inf): its weights hold "
                               "NaN or inf or values that overflow float32, or its config is wrong "
                               f"(layer_norm_epsilon={self.config.layer_norm_epsilon:g}); check the "
                               "checkpoint and its config.json")
        return logits

    def ensure_checkpoint_unchanged(self):
        """Raise CheckpointError if the checkpoint file changed since it was read (rewritten,
        truncated, replaced or deleted): one stat call, nothing read from the file."""
        if self.checkpoint_identity is not None and identity_now(self.checkpoint) != self.checkpoint_identity:
            raise CheckpointError(f"{self.checkpoint} changed on disk since {self.name} was loaded (rewritten, "
                                  "truncated, replaced or deleted), so the weights mapped from it can no longer "
                                  "be trusted: load it again (picogpt.load)")

    def reads_checkpoint(self):
        """Whether the fast path reads the checkpoint file: always, except once in_memory=True
        has copied the weights into this process."""
        return not (self.in_memory is True and self.fast_params is not None)

    def prepare(self):
        """Get ready for the fast path, once: choose its product (kernels.choose: the compiled
        loops loaded or compiled, OpenBLAS on one thread, picogpt's threads sharing the work) and
        its weights: the mapped arrays as they are, or with in_memory=True copied into this
        process now (the file checked again after the copy, which must not mix two versions)."""
        if self.fast_params is None:
            matmul = kernels.choose()
            fast_params = copied_into_memory(self.params, self.name) if self.in_memory else self.params
            if self.in_memory:
                self.ensure_checkpoint_unchanged()
            self.matmul, self.fast_params = matmul, fast_params
        return self

    @cache_unchanged_unless_returned
    def __call__(self, ids, cache=None, positions=None, mask=None):
        ids = self.validate_inputs(ids, cache, positions, mask)
        if self.reads_checkpoint():
            self.ensure_checkpoint_unchanged()
        self.prepare()
        return self.ensure_finite(gpt2(ids, self.fast_params, self.config, cache, self.matmul, positions,
                                       float32_or_none(mask)))

    @cache_unchanged_unless_returned
    def plain(self, ids, cache=None, positions=None, mask=None):
        """The same logits from the checkpoint's arrays as they are, by gpt2.py with np.matmul:
        the reference path (it always reads the checkpoint file, in_memory or not)."""
        ids = self.validate_inputs(ids, cache, positions, mask)
        self.ensure_checkpoint_unchanged()
        return self.ensure_finite(gpt2(ids, self.params, self.config, cache, positions=positions,
                                       mask=float32_or_none(mask)))


class ModelView(Model):
    """A model seen through another object that records, times or memoises its calls: the same
    config, name, caches and input checks; a subclass changes `__call__`. speculative_sampling and
    autoregressive_sampling take it wherever they take a model."""

    def __init__(self, model):
        self.model, self.config, self.name = model, model.config, model.name

    def new_cache(self):
        return self.model.new_cache()

    def validate_ids(self, ids, n_past=0):
        return self.model.validate_ids(ids, n_past)

    def __call__(self, ids, cache=None, positions=None, mask=None):
        return self.model(ids, cache, positions, mask)


def copied_into_memory(params, name):
    """params copied out of the mapped file, after checking that they fit.

    Memory-mapped weights (the default) are ready at once, nothing is written anywhere, and every
    process (each notebook kernel) shares the same pages of the OS page cache; they are the file,
    so the model checks before each call that it has not changed. A copy (in_memory=True) costs
    seconds and the weights' size in every process, and no longer depends on the file; the page
    cache holds a file in pieces as big as free memory allowed when it was read, so mapped weights
    can stream slower than a fresh copy laid out in 2 MB pages (the bench measures both:
    benchmarks/README.md, "Mapped weights"; llama.cpp's --no-mmap makes the same trade)."""
    n_bytes = sum(a.nbytes for a in leaves(params))
    ensure_fits(n_bytes, f"copying {name}'s weights into memory", "load it without in_memory "
                "(memory-mapped), or close other programs or notebook kernels")
    if n_bytes >= ANNOUNCE_BYTES:
        print(f"picogpt: copying {name}'s weights into memory ({n_bytes / 1e9:.1f} GB)", file=sys.stderr)
    return map_leaves(np.array, params)


def array_or_none(values):
    """np.asarray(values), or None where NumPy cannot make an array of them (ragged rows)."""
    try:
        return np.asarray(values)
    except (ValueError, TypeError):
        return None


def validate_mask(mask, shape):
    """Refuse a tree's attention mask unless it is a grid of numbers of `shape` [n_new, n_past +
    n_new], each 0 where a token may see a key and -inf where it may not (or another number
    added to the scores), with no NaN or +inf (either makes the softmax NaN: logits that would
    otherwise be blamed on the weights) and no row that sees no key at all (0 / 0)."""
    array = array_or_none(mask)
    if array is None or array.shape != shape:
        got = "rows of unequal length" if array is None else f"shape {list(array.shape)}"
        raise PicoGPTError(f"a tree's mask must be [n_new, n_past + n_new] = [{shape[0]}, {shape[1]}] (rows of "
                           f"equal length), got {got}")
    if array.dtype.kind not in "iuf":
        raise PicoGPTError(f"a tree's mask must hold numbers (0 where a token may see a key, -inf where it may "
                           f"not), got {shown(array.dtype, 40)}")
    scores = float32_or_none(array)
    if np.isnan(scores).any() or np.isposinf(scores).any():
        what = "NaN" if np.isnan(scores).any() else "+inf (or a number too large for float32)"
        raise PicoGPTError(f"a tree's mask holds {what}, which would make the attention's softmax NaN: use 0 "
                           "where a token may see a key and -inf where it may not")
    blind = np.flatnonzero(np.isneginf(scores).all(axis=1))
    if blind.size:
        raise PicoGPTError(f"row {int(blind[0])} of a tree's mask sees no key (every entry -inf), so its softmax "
                           "divides 0 by 0: every token sees at least itself")


def float32_or_none(mask):
    """A tree's attention mask in float32, so that adding it keeps the scores in float32."""
    return None if mask is None else np.asarray(mask, np.float32)


def checked_checkpoint(path, config=None):
    """(path, mapped file, config) of a model.safetensors file (or the folder holding it) and
    its config (`config`, else the config.json beside it, else inferred from the shapes), once
    everything is checked on the header, before a tensor is read: the config against the
    tensors' shapes, and the memory that widening F16 or BF16 weights to float32 would take."""
    path = Path(path).absolute()  # the file, wherever the working folder is later (links kept)
    if path.is_dir():
        path = path / "model.safetensors"
    mapped = map_checkpoint(path)
    shapes = strip_names(mapped.shapes(), path)
    config_path = path.with_name("config.json")
    if config is None:
        config = config_from_json(config_path) if config_path.exists() else infer_config(shapes, path)
    check_config_fits(config, shapes, path)
    ensure_fits(mapped.widened_bytes(), f"widening {path}'s half-precision weights to float32",
                "close other programs or notebook kernels, or use a float32 checkpoint "
                "(python -m picogpt download fetches float32)", margin=0)
    return path, mapped, config


def load_checkpoint(path, name=None, in_memory=False, config=None):
    """Load a model.safetensors file (or the folder holding it) with its config.json, or with
    `config` (a GPT2Config) if given (in_memory: see GPT2.prepare), checked first (checked_checkpoint)."""
    path, mapped, config = checked_checkpoint(path, config)
    params = params_from_tensors(strip_names(tensors_of(mapped), path), config, path)
    name = name or shown(path.parent.name)  # a folder's name, printed wherever the model is named
    return GPT2(params, config, name, path, in_memory, checkpoint_identity=mapped.identity)


def load(name_or_path, in_memory=False):
    """Load a GPT-2 by name or path; F32 checkpoints are memory-mapped, so this is fast.
    in_memory=True copies the weights into this process when the model is first run, for
    their size in memory: mapped files stream at a speed that varies with the state of the OS
    page cache (the bench measures both: benchmarks/README.md), and a copy no longer depends on
    the file."""
    path, verified = resolve(name_or_path)
    name = str(name_or_path) if str(name_or_path) in model_names() else None
    pinned = pinned_config(name, path)  # a copy in the Hugging Face cache: the pinned hyperparameters
    model = load_checkpoint(path, name, in_memory, config_from_hf(pinned, path) if pinned else None)
    if verified is not None and model.checkpoint_identity != verified:  # the file mapped is not the one verified
        raise CheckpointError(f"{path} changed in the Hugging Face cache while picogpt loaded it (a link "
                              "re-pointed, a file replaced), so the file mapped is not the one verified: "
                              "run the same command again")
    return model
