"""Reading /proc: free memory (picogpt/io/memory.py), reclaim counters and which share of the
model's memory sits in 2 MB pages (/proc/self/smaps: tools/pages.py, for the measuring tools)."""

import io
import mmap
import sys

import numpy as np
import pages
import pytest
from pages import RECLAIM_COUNTERS, huge_page_fraction, memory_counters, parse_smaps

from picogpt.io import memory
from picogpt.io.memory import available_memory_bytes, meminfo_bytes

MEMINFO = """\
MemTotal:       16000000 kB
MemFree:         1000000 kB
MemAvailable:    9000000 kB
HugePages_Total:       0
"""

VMSTAT = """\
nr_free_pages 250000
pgscan_file 12
pgsteal_file 10
pgmajfault 7
workingset_refault_file 3
"""

SMAPS = """\
7f0000000000-7f0000400000 r--s 00000000 fe:00 123   /w/model.picogpt-fast.safetensors
Size:               4096 kB
Rss:                4096 kB
FilePmdMapped:      2048 kB
AnonHugePages:         0 kB
VmFlags: rd mr me ms sd
7f0000400000-7f0000600000 rw-p 00000000 00:00 0
Size:               2048 kB
Rss:                2048 kB
AnonHugePages:      2048 kB
FilePmdMapped:         0 kB
7f0000600000-7f0000700000 rw-p 00000000 00:00 0
Rss:                1024 kB
AnonHugePages:         0 kB
"""


class At:
    """Stands in for an array of nbytes at a given address."""

    def __init__(self, address, nbytes=4):
        self.__array_interface__, self.nbytes = {"data": (address, False)}, nbytes


def test_parse_smaps_reads_each_mapping_and_its_kb_fields():
    mappings = parse_smaps(SMAPS)
    assert [(start, end) for start, end, _ in mappings] == [
        (0x7F0000000000, 0x7F0000400000), (0x7F0000400000, 0x7F0000600000), (0x7F0000600000, 0x7F0000700000)]
    assert mappings[0][2] == {"Size": 4096, "Rss": 4096, "FilePmdMapped": 2048, "AnonHugePages": 0}
    assert "VmFlags" not in mappings[0][2]


def test_huge_page_fraction_counts_each_mapping_once():
    two_in_the_file = [At(0x7F0000000000), At(0x7F0000200010)]
    assert huge_page_fraction(two_in_the_file, SMAPS) == 0.5
    assert huge_page_fraction([*two_in_the_file, At(0x7F0000400000)], SMAPS) == pytest.approx(4096 / 6144)
    assert huge_page_fraction([At(0x7F0000600000)], SMAPS) == 0.0
    assert huge_page_fraction([At(0x7F00003FFFF0, 0x100)], SMAPS) == pytest.approx(4096 / 6144)  # spans two
    assert huge_page_fraction([At(0x7F00003FFFF0, 0x10)], SMAPS) == 0.5  # ends where the next begins
    assert huge_page_fraction([At(0x1000)], SMAPS) is None  # in no mapping


def fake_proc(monkeypatch, files):
    """Make the modules' open() read `files` ({path: text}); any other path is missing."""
    def fake_open(path, *args, **kwargs):
        if path not in files:
            raise FileNotFoundError(path)
        return io.StringIO(files[path])
    monkeypatch.setattr(pages, "open", fake_open, raising=False)
    monkeypatch.setattr(memory, "open", fake_open, raising=False)


def test_meminfo_is_read_in_bytes_and_empty_without_proc(monkeypatch):
    fake_proc(monkeypatch, {"/proc/meminfo": MEMINFO})
    assert meminfo_bytes() == {"MemTotal": 16000000 * 1024, "MemFree": 1000000 * 1024,
                               "MemAvailable": 9000000 * 1024, "HugePages_Total": 0}
    assert available_memory_bytes() == 9000000 * 1024
    fake_proc(monkeypatch, {})
    assert meminfo_bytes() == {} and available_memory_bytes() is None


def test_memory_counters_keep_the_reclaim_counters_and_free_memory(monkeypatch):
    fake_proc(monkeypatch, {"/proc/meminfo": MEMINFO, "/proc/vmstat": VMSTAT})
    assert memory_counters() == {"pgscan_file": 12, "pgsteal_file": 10, "pgmajfault": 7,
                                 "workingset_refault_file": 3, "MemFree_bytes": 1000000 * 1024,
                                 "MemAvailable_bytes": 9000000 * 1024}
    fake_proc(monkeypatch, {"/proc/meminfo": MEMINFO})
    assert memory_counters() is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_live_figures_for_this_process(tmp_path):
    weights = np.full(8 * 2**20, 1.0, np.float32)  # 32 MB, written: its own mapping (or two), resident
    smaps = open("/proc/self/smaps").read()  # one reading: the kernel may merge pages between two
    first = weights.ctypes.data
    found = [fields for start, end, fields in parse_smaps(smaps) if start < first + weights.nbytes and first < end]
    resident_kb = sum(fields.get("Rss", 0) for fields in found)
    assert resident_kb * 1024 >= weights.nbytes  # the mappings found do hold the written array
    huge_kb = sum(fields.get(name, 0) for fields in found for name in ("AnonHugePages", "FilePmdMapped", "ShmemPmdMapped"))
    assert huge_page_fraction([weights], smaps) == huge_kb / resident_kb
    path = tmp_path / "weights.bin"
    weights.tofile(path)
    with open(path, "rb") as f:
        mapped = np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), np.float32)
    assert float(mapped.sum()) == mapped.size  # touch it: resident
    assert huge_page_fraction([mapped]) is not None  # its mapping is found
    assert 0 < available_memory_bytes() <= meminfo_bytes()["MemTotal"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_memory_counters_read_free_memory_and_reclaim():
    counters, total = memory_counters(), meminfo_bytes()["MemTotal"]
    assert 0 < counters["MemFree_bytes"] <= total and 0 < counters["MemAvailable_bytes"] <= total
    assert set(RECLAIM_COUNTERS) <= set(counters) and all(counters[name] >= 0 for name in RECLAIM_COUNTERS)
