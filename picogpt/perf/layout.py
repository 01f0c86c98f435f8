"""Weights laid out for the fast path (perf/kernels.py): transposed, mapped or copied in memory.

`fast_params(params, checkpoint)` returns the same parameter tree with every linear weight a
kernels.TransposedWeight and wte a kernels.TiedEmbedding. For big models the transposed copy is
made once per checkpoint and kept in a file beside it (see `transposed_weights`).
"""

import shutil
import sys
import threading
from pathlib import Path

import numpy as np

from ..errors import CheckpointError, PicoGPTError
from ..io.checkpoint import read_metadata, read_safetensors, write_safetensors
from ..io.params import map_leaves
from .kernels import TiedEmbedding, TransposedWeight, parallel, transpose
from .machine import available_memory_bytes

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


def fast_params(params, checkpoint=None):
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
    def copy_leaf(leaf):
        if isinstance(leaf, TiedEmbedding):
            return TiedEmbedding(copy(leaf.wte))
        if isinstance(leaf, TransposedWeight):
            return TransposedWeight(copy(leaf.t))
        return copy(leaf)
    return map_leaves(copy_leaf, node)


def ensure_fits(n_bytes, name):
    """Raise a clear error if copying n_bytes would leave less than MEMORY_MARGIN free."""
    available = available_memory_bytes()
    if available is not None and n_bytes + MEMORY_MARGIN > available:
        raise PicoGPTError(f"copying {name}'s weights into memory needs {n_bytes / 1e9:.1f} GB, and "
                           f"{available / 1e9:.1f} GB is available: load it without in_memory "
                           "(memory-mapped), or close other programs or notebook kernels")


def in_memory(prepared, name="the model"):
    """prepared parameters copied out of the mapped files, after checking that they fit."""
    n_bytes = sum(a.nbytes for a in arrays_of(prepared))
    ensure_fits(n_bytes, name)
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
        ensure_fits(sum(a.nbytes for a in arrays_of(prepared)), name)
    except PicoGPTError as e:
        print(f"picogpt: {e}; it stays memory-mapped", file=sys.stderr)
        return prepared, None
    thread = threading.Thread(target=copy_in_place, args=(prepared,), name=f"picogpt-copy-{name}", daemon=True)
    thread.start()
    return prepared, thread
