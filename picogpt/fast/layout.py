"""Where the fast path's weights live. Their layout is always the checkpoint's own (the arrays
gpt2.py reads); what changes is the memory behind them.

- Memory-mapped (the default): the arrays read_safetensors returns. Ready at once, nothing
  written anywhere, and every process (each notebook kernel) shares the same pages of the OS
  page cache. They are the file: the model checks before each call that it has not changed.
- In memory (`in_memory=True`, or `"background"`): a private copy in this process. The page
  cache holds a file in pieces as big as free memory allowed when it was read, so mapped
  weights can stream slower than a fresh copy, laid out in order in 2 MB pages (the bench
  measures both: benchmarks/README.md, "Mapped weights"). A copy costs seconds and the weights'
  size in every process, and once made no longer depends on the file. (llama.cpp's --no-mmap
  makes the same trade.)
"""

import sys
import threading

import numpy as np

from ..errors import PicoGPTError
from ..io.params import leaves, map_leaves
from ..io.memory import ensure_fits

ANNOUNCE_BYTES = 256 * 2**20  # copies bigger than this say so (they take seconds)


def ensure_copy_fits(n_bytes, name):
    """ensure_fits for in_memory's copy of the weights, with its advice."""
    ensure_fits(n_bytes, f"copying {name}'s weights into memory", "load it without in_memory "
                "(memory-mapped), or close other programs or notebook kernels")


def in_memory(params, name="the model"):
    """params copied out of the mapped file, after checking that they fit."""
    n_bytes = sum(a.nbytes for a in leaves(params))
    ensure_copy_fits(n_bytes, name)
    if n_bytes >= ANNOUNCE_BYTES:
        print(f"picogpt: copying {name}'s weights into memory ({n_bytes / 1e9:.1f} GB)", file=sys.stderr)
    return map_leaves(np.array, params)


copy_array = np.array  # what copy_in_place copies with (the tests slow it down)


def copy_in_place(node):
    """Replace every array of a parameter tree by a copy, one at a time, in place. A forward
    pass running meanwhile reads each weight when it gets to it, old or new: the same numbers."""
    children = node.items() if isinstance(node, dict) else enumerate(node)
    for key, child in children:
        if isinstance(child, np.ndarray):
            node[key] = copy_array(child)
        else:
            copy_in_place(child)


def in_memory_in_background(params, name="the model"):
    """(parameters, thread): the model runs at once on the mapped weights, and a background
    thread copies them into memory one array at a time, swapping each in as it is done; thread
    is None, with a note, when the copy would not fit (the weights then stay mapped)."""
    params = map_leaves(lambda array: array, params)  # its own dicts: the model's params stay as they are
    try:
        ensure_copy_fits(sum(a.nbytes for a in leaves(params)), name)
    except PicoGPTError as e:
        print(f"picogpt: {e}; it stays memory-mapped", file=sys.stderr)
        return params, None
    thread = threading.Thread(target=copy_in_place, args=(params,), name=f"picogpt-copy-{name}", daemon=True)
    thread.start()
    return params, thread
