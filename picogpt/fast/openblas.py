"""The OpenBLAS that NumPy ships, through ctypes: found once, then its thread count and the
kernel set it picked for this CPU.

OpenBLAS's own threads spin ~0.1 s after each call and slow whatever runs next (the other
model's call, in a sampling loop), and fight over the cores when the machine is busy. So the
fast path runs OpenBLAS on ONE thread (`use_own_threads`) and shares big products among its own
threads (fast/threads.py); `openblas_on_all_threads` gives OpenBLAS every thread back for a
block (the bandwidth ceiling is measured with its threaded GEMV, as NumPy runs outside picogpt).
"""

import contextlib
import ctypes
import functools
import glob
import os

import numpy as np

from .threads import n_threads


@functools.cache
def library():
    """The OpenBLAS library NumPy ships (numpy.libs/ on Linux and Windows, .dylibs/ on macOS),
    loaded with ctypes, or None if NumPy uses another BLAS or it cannot be found."""
    numpy_dir = os.path.dirname(np.__file__)
    for pattern in ("../numpy.libs/*openblas*", ".libs/*openblas*", ".dylibs/*openblas*", "../numpy/.dylibs/*openblas*"):
        for path in sorted(glob.glob(os.path.join(numpy_dir, pattern))):
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    return None


def symbol(*names):
    """(name, ctypes function) for the first of `names` the library has, or (None, None)."""
    blas = library()
    for name in names if blas is not None else ():
        if hasattr(blas, name):
            return name, getattr(blas, name)
    return None, None


@functools.cache
def thread_setter():
    """openblas_set_num_threads, or None if OpenBLAS was not found."""
    _, setter = symbol("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
                       "openblas_set_num_threads64_", "openblas_set_num_threads")
    if setter is not None:
        setter.argtypes, setter.restype = [ctypes.c_int], None
    return setter


def thread_count():
    """OpenBLAS's current thread count, or None if OpenBLAS was not found."""
    return call("get_num_threads", ctypes.c_int)


def core_name():
    """The kernel set OpenBLAS picked at run time (e.g. 'Haswell'), or None."""
    name = call("get_corename", ctypes.c_char_p)
    return None if name is None else name.decode()


def call(function, restype):
    """openblas_<function>() under whichever of its exported names this build has, or None."""
    _, found = symbol(f"scipy_openblas_{function}64_", f"scipy_openblas_{function}",
                      f"openblas_{function}64_", f"openblas_{function}")
    if found is None:
        return None
    found.argtypes, found.restype = [], restype
    return found()


_pinned = False


def use_own_threads():
    """Run OpenBLAS on one thread from now on, in this whole process (our threads share the
    work instead). Returns whether OpenBLAS was found."""
    global _pinned
    if not _pinned:
        setter = thread_setter()
        if setter is None:
            return False
        setter(1)
        _pinned = True
    return True


@contextlib.contextmanager
def on_all_threads():
    """Within the block, OpenBLAS runs on n_threads() threads of its own (as NumPy uses it
    outside picogpt); afterwards back to one if the fast path pinned it."""
    setter = thread_setter()
    if setter is not None and _pinned:
        setter(n_threads())
    try:
        yield
    finally:
        if setter is not None and _pinned:
            setter(1)
