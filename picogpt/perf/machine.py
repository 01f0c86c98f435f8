"""What this machine can do, measured: memory bandwidth and arithmetic throughput.

Decoding one token multiplies a single vector by every weight matrix: each float32 weight is
read once (4 bytes) and used for one multiply-add (2 FLOPs), so the arithmetic units wait on
memory. These two numbers, measured the way the model uses NumPy, are the machine's roofline:
a token can take no less than `model.nbytes / bandwidth` seconds.
"""

import numpy as np

from ..errors import PicoGPTError
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


# ---------------------------------------------------------------------------------------------
# Memory: how much is free, and in which page size the model's weights are mapped
# ---------------------------------------------------------------------------------------------
# A private NumPy array is fresh memory: laid out in order, and in 2 MB "huge" pages where
# Linux's transparent huge pages allow (NumPy asks for them for big arrays). A memory-mapped
# file lives in the OS page cache, in pieces as big as free memory allowed when it was read:
# 2 MB on a machine whose memory is not fragmented, small and scattered after long use. The
# bench records the share of huge pages; on the bench machine it did not predict how fast the
# mapped weights streamed, and tools/page_sizes.py found scattered pages slower to stream and
# small pages as such not (benchmarks/README.md, "Mapped weights").

def meminfo_bytes():
    """Linux's /proc/meminfo as {name: bytes} ({} elsewhere)."""
    try:
        return {name: int(value.split()[0]) * 1024
                for name, value in (line.split(":") for line in open("/proc/meminfo"))}
    except (OSError, ValueError, IndexError):
        return {}


def available_memory_bytes():
    """Memory the OS could give this process now (Linux MemAvailable), or None if unknown."""
    return meminfo_bytes().get("MemAvailable")


HUGE_FIELDS = ("AnonHugePages", "FilePmdMapped", "ShmemPmdMapped")  # kB in 2 MB (PMD) mappings


def parse_smaps(text):
    """/proc/<pid>/smaps as a list of (start, end, {field: kB}), one entry per mapping."""
    mappings = []
    for line in text.splitlines():
        head, _, rest = line.partition(" ")
        if "-" in head and not head.endswith(":"):
            start, end = (int(part, 16) for part in head.split("-"))
            mappings.append((start, end, {}))
        elif head.endswith(":") and mappings and rest.strip().endswith("kB"):
            mappings[-1][2][head[:-1]] = int(rest.split()[0])
    return mappings


def huge_page_fraction(arrays, smaps_text=None):
    """The share of the resident memory holding these arrays that is mapped in huge pages,
    0..1, counted over the whole mappings they overlap (an array can span several: NumPy asks
    for huge pages from the first page boundary inside a big array, which splits its mapping
    in two); None where there is no /proc/self/smaps."""
    if smaps_text is None:
        try:
            smaps_text = open("/proc/self/smaps").read()
        except OSError:
            return None
    mappings = parse_smaps(smaps_text)
    found = set()
    for array in arrays:
        first = array.__array_interface__["data"][0]
        last = first + max(1, array.nbytes)  # one past the end
        found.update(i for i, (start, end, _) in enumerate(mappings) if start < last and first < end)
    resident = sum(mappings[i][2].get("Rss", 0) for i in found)
    huge = sum(mappings[i][2].get(field, 0) for i in found for field in HUGE_FIELDS)
    return huge / resident if resident else None


RECLAIM_COUNTERS = ("pgscan_file", "pgsteal_file", "pgmajfault", "workingset_refault_file")


def memory_counters():
    """Free memory and Linux's counters of page-cache reclaim and disk reads ({name: number},
    from /proc/meminfo and /proc/vmstat), or None elsewhere. The bench takes them before and
    after timing: mapped weights timed while the kernel reclaims or re-reads the page cache are
    not timed at their usual speed."""
    memory = meminfo_bytes()
    try:
        counters = {name: int(value) for name, value in (line.split() for line in open("/proc/vmstat"))
                    if name in RECLAIM_COUNTERS}
    except (OSError, ValueError):
        return None
    return {**counters, **{f"{name}_bytes": memory[name] for name in ("MemFree", "MemAvailable") if name in memory}}
