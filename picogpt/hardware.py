"""What this machine can do, measured: memory bandwidth and arithmetic throughput.

Decoding one token multiplies a single vector by every weight matrix: each float32 weight is
read once (4 bytes) and used for one multiply-add (2 FLOPs), so the arithmetic units wait on
memory. These two numbers, measured the way the model uses NumPy, are the machine's roofline:
a token can take no less than `model.nbytes / bandwidth` seconds.
"""

import numpy as np

from .errors import PicoGPTError
from .timing import median_seconds

N_COLS = 1024  # width of the benchmark matrix; the height gives the requested size


def measure_bandwidth_gbs(n_bytes=256 * 2**20, repeats=5):
    """GB/s (10**9 bytes per second) read by a float32 vector-matrix product `x @ W`, the
    operation of decoding, with W about n_bytes: pick n_bytes well above the CPU caches."""
    if n_bytes < 4 * N_COLS:
        raise PicoGPTError(f"n_bytes={n_bytes} is too small: give at least {4 * N_COLS} bytes "
                           "(and far more than the CPU cache, e.g. 256 MiB, to measure memory)")
    n_rows = n_bytes // (4 * N_COLS)
    weight = np.full((n_rows, N_COLS), 0.5, np.float32)  # written, so its pages really exist
    x = np.ones(n_rows, np.float32)
    x @ weight  # warm up: page faults and thread start-up are not bandwidth
    return weight.nbytes / median_seconds(lambda: x @ weight, repeats) / 1e9


def measure_matmul_gflops(n=1024, repeats=5):
    """GFLOP/s (10**9 floating-point operations per second) of a float32 [n, n] @ [n, n]
    product, which does 2 n**3 FLOPs on 3 n**2 numbers: enough reuse to keep the cores busy."""
    if n < 1:
        raise PicoGPTError(f"n must be a positive matrix size, got {n}")
    a = np.full((n, n), 0.5, np.float32)
    a @ a  # warm up
    return 2 * n**3 / median_seconds(lambda: a @ a, repeats) / 1e9
