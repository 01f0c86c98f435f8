"""Memory pages and the OS page cache, read off Linux's /proc (a development tool: the
measuring tools page_sizes.py and page_cache.py use it; the package does not).

A private NumPy array is fresh memory: laid out in order, and in 2 MB "huge" pages where
Linux's transparent huge pages allow (NumPy asks for them for big arrays). A memory-mapped
file lives in the OS page cache, in pieces as big as free memory allowed when it was read:
2 MB on a machine whose memory is not fragmented, small and scattered after long use.
tools/page_sizes.py times the same weights copied into huge, small and scattered pages side by
side (their results and what they mean: benchmarks/README.md, "Mapped weights").
"""

import os
import shutil
import subprocess

from picogpt.io.memory import meminfo_bytes

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


def read_through(path, chunk_bytes=64 * 2**20):
    """Read a file once, so that the OS page cache holds it (if memory allows)."""
    buffer = bytearray(chunk_bytes)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


def page_cache_bytes(path):
    """How many bytes of a file are in the OS page cache (via `fincore`, if installed), or None."""
    if not shutil.which("fincore"):
        return None
    try:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "-o", "RES", str(path)],
                             capture_output=True, text=True, timeout=30).stdout.split()
        return int(out[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def page_cache_fraction(path):
    """How much of a file is in the OS page cache (page_cache_bytes), 0..1, or None."""
    resident = page_cache_bytes(path)
    return None if resident is None else round(resident / max(1, os.path.getsize(path)), 3)
