"""What this machine can do, measured (memory bandwidth, arithmetic throughput), and what it is
(CPU, cores, memory, BLAS, library versions, load average): the facts printed beside every timing.

Decoding one token multiplies a single vector by every weight matrix: each float32 weight is
read once (4 bytes) and used for one multiply-add (2 FLOPs), so the arithmetic units wait on
memory. These two numbers, measured the way the model uses NumPy, are the machine's roofline:
a token can take no less than `model.bytes_per_token / bandwidth` seconds.
"""

import importlib.metadata
import os
import platform
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from ..errors import PicoGPTError
from ..io.memory import meminfo_bytes
from .timing import median_seconds

BANDWIDTH_SHAPE = (6400, 1600)  # GPT-2 XL's MLP weight (4 n_embd, n_embd): a decoding-sized matrix


def bandwidth_matrices(n_bytes):
    """About n_bytes of float32 [6400, 1600] matrices (fewer rows if n_bytes is small) and a
    vector x [1600] to multiply them by. Written, so that their pages really exist."""
    rows, cols = BANDWIDTH_SHAPE
    if n_bytes < 4 * cols:
        raise PicoGPTError(f"n_bytes={n_bytes} is too small: give at least {4 * cols} bytes "
                           "(and far more than the CPU cache, e.g. 256 MiB, to measure memory)")
    rows = min(rows, n_bytes // (4 * cols))
    n_matrices = max(1, round(n_bytes / (4 * rows * cols)))
    return [np.full((rows, cols), 0.5, np.float32) for _ in range(n_matrices)], np.ones(cols, np.float32)


def gemv_pass(matrices, x):
    """One-row products over every matrix, `W @ x` ([rows, 1600] @ [1600] -> [rows]): each
    weight read once and used for one multiply-add, as in decoding one token. NumPy's BLAS GEMV
    on a thread per core, as NumPy runs outside picogpt, even where picogpt's fast path has put
    it on one (fast/threads.py); afterwards as it was."""
    with threadpool_limits(limits=os.cpu_count(), user_api="blas"):
        return [matrix @ x for matrix in matrices]


def measure_bandwidth_gbs(n_bytes=256 * 2**20, repeats=5):
    """GB/s (10**9 bytes per second) read by one-row float32 products over about n_bytes of
    matrices (gemv_pass), the operation of decoding: pick n_bytes well above the CPU caches.
    The bench's bandwidth ceiling is this measurement, over 1.6 GB."""
    matrices, x = bandwidth_matrices(n_bytes)
    gemv_pass(matrices, x)  # warm up: page faults and thread start-up are not bandwidth
    n_read = sum(matrix.nbytes for matrix in matrices)
    return n_read / median_seconds(lambda: gemv_pass(matrices, x), repeats) / 1e9


def floor_beside_decode(model, ids, repeats=10, n_bytes=256 * 2**20, calls=5):
    """The memory bandwidth and `model`'s one-token decode, measured side by side: per repeat, the
    median of `calls` gemv_pass over about n_bytes (measure_bandwidth_gbs's operation) and the median
    of `calls` cached one-token calls of the model after `ids` (timing.time_per_token_s's), the order
    of the two alternated from one repeat to the next, so that each repeat's memory floor and decode
    met the same moment of the machine. Returns (GB/s per repeat, seconds per token per repeat): the
    pairs of notebook 02's pace verdict (course/speed_panels.pace_line)."""
    matrices, x = bandwidth_matrices(n_bytes)
    n_read = sum(matrix.nbytes for matrix in matrices)
    cache = model.new_cache()
    model(ids[:-1], cache)  # the prompt but its last token, once (not timed)
    n = len(cache)

    def step():
        model(ids[n:n + 1], cache)  # [1] -> [1, n_vocab]: one new position, as in decoding
        cache.truncate(n)  # ... rolled back, so that every call does the same work

    def bandwidth():
        return n_read / median_seconds(lambda: gemv_pass(matrices, x), calls) / 1e9

    gemv_pass(matrices, x), step()  # warm up: page faults, thread start-up
    gb_per_s, seconds = [], []
    for repeat in range(repeats):
        if repeat % 2 == 0:
            gb_per_s.append(bandwidth())
            seconds.append(median_seconds(step, calls))
        else:
            seconds.append(median_seconds(step, calls))
            gb_per_s.append(bandwidth())
    return tuple(gb_per_s), tuple(seconds)


def measure_matmul_gflops(n=1024, repeats=5):
    """GFLOP/s (10**9 floating-point operations per second) of a float32 [n, n] @ [n, n]
    product, which does 2 n**3 FLOPs on 3 n**2 numbers: enough reuse to keep the cores busy."""
    if n < 1:
        raise PicoGPTError(f"n must be a positive matrix size, got {n}")
    a = np.full((n, n), 0.5, np.float32)
    a @ a  # warm up
    return 2 * n**3 / median_seconds(lambda: a @ a, repeats) / 1e9


# ---------------------------------------------------------------------------------------------
# What the machine is: recorded beside every benchmark
# ---------------------------------------------------------------------------------------------

def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def blas_info():
    """NumPy's BLAS as threadpoolctl finds it loaded: its name, version and the kernels it picked
    for this CPU ('runtime core', e.g. 'Haswell')."""
    found = next((info for info in threadpool_info() if info.get("user_api") == "blas"), {})
    return {"name": found.get("internal_api", "unknown"), "version": found.get("version"),
            "runtime core": found.get("architecture")}


def memory_total_gb():
    total = meminfo_bytes().get("MemTotal")
    return None if total is None else round(total / 2**30, 1)


def library_versions():
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    for name in ("numba", "threadpoolctl"):
        try:
            versions[name] = importlib.metadata.version(name)  # without importing it
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def machine_info():
    """CPU, cores, memory, OS, BLAS and library versions, as a JSON-ready dict."""
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "memory_gb": memory_total_gb(),
            "os": platform.platform(), "blas": blas_info(), "versions": library_versions()}


def load_average():
    """The OS's 1, 5 and 15 minute load averages (runnable processes; above the core count
    means programs wait for a CPU), or None where the OS does not say."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def busy_warning(load_averages, cores):
    """A sentence when the machine was busy while measuring, else '': load_averages are the OS's
    (1, 5, 15 minute) load averages read around a measurement (None where unknown). Busy means the
    1-minute figure, as printed, above the core count: more threads were ready to run than there
    were cores, the measurement's own among them (so it does not say whose they were)."""
    loads = [round(load[0], 1) for load in load_averages if load]
    if loads and max(loads) > cores:
        return (f"warning: the machine was busy (load average up to {max(loads):.1f} on {cores} cores): more threads "
                "were ready to run than there were cores, so these timings may be slower and noisier than on an idle machine")
    return ""
