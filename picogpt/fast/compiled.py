"""A compiled product for decoding: every row of x per load of W (numba, used when installed).

`x @ W` for a few rows x [n_rows, n_in] and a linear weight W [n_in, n_out] (GPT-2's Conv1D
layout, as model.safetensors stores it) waits on memory: two flops per weight, and GPT-2 XL's
weights (6 GB) fit no cache. Speculative sampling's scoring call has K + 1 rows, so it costs
about one decode *if* each weight, once loaded, is applied to every row. NumPy has no such
product (its OpenBLAS packs the weights for every GEMM; kernels.py's L2 tiles re-read each tile
once per row). This one is a dozen lines of loops that numba compiles:

    for each group of 8 input rows i..i+7 (8 rows of W):
        for each segment of 256 output columns (8 x 256 floats = 8 KB of W, in L1 after the first row):
            for each row r of x:      acc[r, seg] += x[r, i:i+8] @ W[i:i+8, seg]

W is read from memory once; each row of x re-reads the 8 KB segment from L1, and the
accumulator is loaded and stored once per 8 input rows, not once per input row. Threads take
bands of input rows (threads.parallel) and add their partial sums at the end. The vector loop
starts where W's rows cross a 32-byte boundary (`lead`): safetensors aligns tensors to 8 bytes
only, and a 32-byte load that straddles two cache lines costs about two. What it costs against
one row, and against the alternatives, is measured by benchmarks/kernels/candidates.py (results
in benchmarks/kernels/) and, inside the sampling loop, by `python -m picogpt bench`.

The LM head, x @ wte.T, is the same idea on wte's own layout (`head_product`): dot products of
4 rows of wte with every row of x. numba is optional (`pip install 'picogpt-speculative[fast]'`,
in `[dev]`): without it, or where it cannot run (`loops` says why, in one line), kernels.py
uses NumPy alone. PICOGPT_KERNEL=numpy switches the compiled products off (to compare, or to
rule them out). The machine code is kept on disk per Python environment (`cache_dir`).
"""

import contextlib
import functools
import hashlib
import os
import re
import sys
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..errors import PicoGPTError, shown
from ..io.registry import user_cache_dir

KERNEL_ENV = "PICOGPT_KERNEL"
SEGMENT = 256  # output columns per step: 8 x 256 float32 = 8 KB of W, kept in L1 for all rows of x


def band_product(x, W, acc, start, stop, lead=0):
    """acc += x[:, start:stop] @ W[start:stop]: the loop above, compiled by `compile_kernel`.
    x [n_rows, n_in], W [n_in, n_out], acc [n_rows, n_out] float32, C-contiguous. Columns
    [0, lead) are a segment of their own, so that every other segment starts where W's rows
    (and acc's) cross a 32-byte boundary (kernels.lead): a 32-byte load that straddles two
    cache lines costs about two, and the checkpoint places tensors on 8-byte boundaries."""
    n_rows = x.shape[0]
    n_out = W.shape[1]
    lead = min(lead, n_out)
    n_segments = 1 + (n_out - lead + SEGMENT - 1) // SEGMENT
    i = start
    while i + 8 <= stop:  # 8 rows of W per load/store of the accumulator (unrolled by hand)
        for s in range(n_segments):  # segment 0: columns [0, lead); then SEGMENT at a time
            o = 0 if s == 0 else lead + (s - 1) * SEGMENT
            e = lead if s == 0 else min(lead + s * SEGMENT, n_out)
            w0, w1, w2, w3 = W[i, o:e], W[i + 1, o:e], W[i + 2, o:e], W[i + 3, o:e]
            w4, w5, w6, w7 = W[i + 4, o:e], W[i + 5, o:e], W[i + 6, o:e], W[i + 7, o:e]
            for r in range(n_rows):
                x0, x1, x2, x3 = x[r, i], x[r, i + 1], x[r, i + 2], x[r, i + 3]
                x4, x5, x6, x7 = x[r, i + 4], x[r, i + 5], x[r, i + 6], x[r, i + 7]
                a = acc[r, o:e]
                for j in range(e - o):
                    a[j] += (x0 * w0[j] + x1 * w1[j] + x2 * w2[j] + x3 * w3[j]) + \
                            (x4 * w4[j] + x5 * w5[j] + x6 * w6[j] + x7 * w7[j])
        i += 8
    while i < stop:  # the last < 8 rows of W
        w = W[i]
        for r in range(n_rows):
            xr, a = x[r, i], acc[r]
            for j in range(n_out):
                a[j] += xr * w[j]
        i += 1


def head_product(x, E, out, start, stop, lead=0):
    """out[:, v] = x @ E[v] for v in [start, stop): the LM head, E = wte [n_vocab, n_embd]
    (row-major). Four rows of E at a time are read from memory once and dotted with every row
    of x from L1 (one load of x per four multiply-adds). Columns [lead, n_embd) are the vector
    loop, starting on a 32-byte boundary of E's rows and x's (kernels.lead); [0, lead) after it.
    x [n_rows, n_embd], out [n_rows, n_vocab] float32, C-contiguous."""
    n_rows, n_in = x.shape
    lead = min(lead, n_in)
    v = start
    while v + 4 <= stop:
        e0, e1, e2, e3 = E[v, lead:], E[v + 1, lead:], E[v + 2, lead:], E[v + 3, lead:]
        for r in range(n_rows):
            xr = x[r, lead:]
            s0, s1, s2, s3 = np.float32(0), np.float32(0), np.float32(0), np.float32(0)
            for k in range(n_in - lead):
                xk = xr[k]
                s0 += e0[k] * xk
                s1 += e1[k] * xk
                s2 += e2[k] * xk
                s3 += e3[k] * xk
            for k in range(lead):
                xk = x[r, k]
                s0 += E[v, k] * xk
                s1 += E[v + 1, k] * xk
                s2 += E[v + 2, k] * xk
                s3 += E[v + 3, k] * xk
            out[r, v], out[r, v + 1], out[r, v + 2], out[r, v + 3] = s0, s1, s2, s3
        v += 4
    while v < stop:  # the last < 4 rows of E
        for r in range(n_rows):
            s = np.float32(0)
            for k in range(n_in):
                s += E[v, k] * x[r, k]
            out[r, v] = s
        v += 1


class Loops(NamedTuple):
    band: object  # band_product, compiled
    head: object  # head_product, compiled


@functools.cache
def loops():
    """band_product and head_product compiled by numba (a Loops), or None, in which case
    kernels.py runs its NumPy path.

    numba keeps the machine code on disk (cache_dir()), so this compiles once per environment
    (a few seconds, with a note) and later processes load it in well under a second. Each loop
    is compiled for weights both writable and read-only (memory-mapped) here, before any model
    call, so that no timed call pays for it (GPT2.prepare calls this). None when numba is not
    installed (silently: it is an optional extra) or cannot run here, with one line saying why:
    numba failing as it is imported (NUMBA_NUM_THREADS=0, too little address space for LLVM),
    NUMBA_DISABLE_JIT (the loops would run as Python, hundreds of times slower), no writable
    folder for the machine code, or any failure to compile.
    fastmath 'contract' lets the compiler fuse multiply-adds; the head's 'reassoc' lets it split
    a dot product into vector lanes (another order of summation, ~1e-7 relative); NaN stays NaN."""
    try:
        numba = imported_numba()
    except ImportError:
        return None
    except Exception as e:  # installed, but failing as it loads (NUMBA_NUM_THREADS=0; too little address space for LLVM)
        return unavailable(f"numba is installed but could not be loaded ({first_line(e)})")
    if numba.config.DISABLE_JIT:
        return unavailable("NUMBA_DISABLE_JIT is set, so numba would run its loops as Python")
    try:
        folder = cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        stamp = folder / f"picogpt-{source_hash(numba.__version__)}.compiled"
        with interrupts_kept():
            compiled = Loops(*compile_in(folder, numba))
            if not stamp.exists():
                print("picogpt: compiling the fast kernels with numba (once per environment)", file=sys.stderr,
                      flush=True)
            for loop, function in zip(compiled, (band_product, head_product)):
                for writable in (True, False):
                    loop(*example_arguments(function, writable))
        stamp.touch()
    except (OSError, RuntimeError) as e:
        if isinstance(e, RuntimeError) and "cannot cache" not in str(e):
            return unavailable(f"numba could not compile the fast kernels ({first_line(e)})")
        return unavailable(f"numba has no writable folder for its compiled code ({first_line(e)}); set "
                           "NUMBA_CACHE_DIR to a writable folder to use the compiled kernels")
    except Exception as e:
        return unavailable(f"numba could not compile the fast kernels ({first_line(e)})")
    return compiled


def imported_numba():
    """`import numba`, with numba's warning about an environment variable it cannot parse
    (NUMBA_NUM_THREADS=abc, NUMBA_OPT=zz: eight lines and a traceback, after which numba
    ignores the variable) said in one line naming it; other warnings pass on as they were."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import numba
    for warning in caught:
        found = re.match(r"Environment variable '(\w+)' is defined but its associated value '(.*?)' could not be "
                         r"parsed", str(warning.message))
        if found:
            why = str(warning.message).strip().splitlines()[-1]
            print(f"picogpt: numba could not read {found[1]}={shown(found[2], 40)!r} ({shown(why, 160)}), so it "
                  f"ignores it: set {found[1]} to a value numba reads, or unset it", file=sys.stderr)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return numba


@contextlib.contextmanager
def interrupts_kept():
    """Run the block so that a Ctrl-C means stop. numba compiles through llvmlite, which calls
    back into Python from C (its object cache): a KeyboardInterrupt raised in such a callback is
    printed as "Exception ignored" and dropped, and the compile goes on or fails for another
    reason. Here each one is recorded instead (sys.unraisablehook) and raised when the block ends."""
    interrupted, before = [], sys.unraisablehook

    def hook(unraisable):
        if issubclass(unraisable.exc_type, KeyboardInterrupt):
            interrupted.append(unraisable.exc_value)
        else:
            before(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    except Exception:
        if interrupted:  # the interrupt, not what it broke, is why the block ended
            raise KeyboardInterrupt from None
        raise
    finally:
        sys.unraisablehook = before
    if interrupted:
        raise KeyboardInterrupt


def compile_in(folder, numba):
    """The two loops as numba dispatchers whose machine code lives in `folder` (numba reads its
    cache folder when a dispatcher is made: set for these two only, then put back)."""
    before = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = str(folder)
    try:
        jit = dict(nogil=True, cache=True, boundscheck=False)
        return (numba.njit(**jit, fastmath={"contract"})(band_product),
                numba.njit(**jit, fastmath={"contract", "reassoc"})(head_product))
    finally:
        numba.config.CACHE_DIR = before


def cache_dir():
    """Where numba keeps this environment's machine code: $NUMBA_CACHE_DIR if set; else inside
    the environment (sys.prefix) when it is writable, so that two environments (.venv and
    .venv-oldest, with other numba versions) never overwrite each other's code and a deleted
    environment takes its code with it; else the user's cache folder, one per environment."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return Path(os.environ["NUMBA_CACHE_DIR"])
    prefix = Path(sys.prefix)
    if os.access(prefix, os.W_OK):
        return prefix / "var" / "cache" / "picogpt-numba"
    tag = hashlib.sha256(str(prefix.resolve()).encode()).hexdigest()[:12]
    return user_cache_dir(f"numba-{tag}", "NUMBA_CACHE_DIR")


def source_hash(numba_version):
    """A name for this source file and numba version: its stamp says they were compiled here."""
    return hashlib.sha256(Path(__file__).read_bytes() + numba_version.encode()).hexdigest()[:12]


def first_line(error):
    """'TypeError: the first line of its message'."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else 'no message'}"


def example_arguments(function, writable):
    """Small arguments that compile `function` for float32 weights, writable or read-only."""
    x = np.zeros((1, 8), np.float32)
    if function is band_product:  # x [1, 8] @ W [8, 8] += into acc [1, 8]
        W, out = np.zeros((8, 8), np.float32), np.zeros((1, 8), np.float32)
    else:  # x [1, 8] . E [4, 8] rows -> out [1, 4]
        W, out = np.zeros((4, 8), np.float32), np.zeros((1, 4), np.float32)
    W.flags.writeable = writable
    return x, W, out, 0, W.shape[0], 0


def unavailable(reason):
    """None, after saying on one line why the NumPy path runs instead of the compiled one."""
    print(f"picogpt: {reason}: running the NumPy path instead", file=sys.stderr)
    return None


def enabled():
    """Whether kernels.py uses the compiled loops: numba installed and $PICOGPT_KERNEL not
    'numpy' ('numba' insists on them, '' or 'auto' takes them if installed)."""
    choice = os.environ.get(KERNEL_ENV, "").strip().lower()
    if choice not in ("", "auto", "numba", "numpy"):
        raise PicoGPTError(f"{KERNEL_ENV}={shown(choice, 20)!r}: expected 'auto', 'numba' or 'numpy'")
    if choice == "numpy":
        return False
    if loops() is None:
        if choice == "numba":
            raise PicoGPTError(f"{KERNEL_ENV}=numba but the compiled kernels cannot run here (numba not "
                               "installed, or the line above says why): pip install 'picogpt-speculative[fast]', "
                               f"or unset {KERNEL_ENV}")
        return False
    return True


def name():
    """'numba' or 'numpy': which product the fast path uses now (the bench records it)."""
    return "numba" if enabled() else "numpy"
