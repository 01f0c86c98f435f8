"""tools/page_cache.py, which measures the page-cache goal of benchmarks/goals.json: it must see exactly the
checkpoint bytes a notebook reads, and none it does not."""

import importlib.util
import json
import os
import shutil
from pathlib import Path

import nbformat
import pages
import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "page_cache.py"
MB = 2**20


def load_tool():
    spec = importlib.util.spec_from_file_location("page_cache", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def filesystem_of(path):
    """The type of the filesystem holding path (from /proc/self/mounts: the longest mount point)."""
    path, best = str(Path(path).resolve()), ("", "")
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, point, kind = line.split()[:3]
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) > len(best[0]):
            best = (point, kind)
    return best[1]


pytestmark = pytest.mark.skipif(not shutil.which("fincore") or not Path("/proc/self/mounts").exists(),
                                reason="needs Linux and util-linux's fincore, as the tool does")


def written_file(path, n_bytes):
    with open(path, "wb") as f:
        f.write(os.urandom(n_bytes))
        f.flush()
        os.fsync(f.fileno())  # dirty pages cannot be dropped: write them back first
    return path


@pytest.fixture
def disk_dir(tmp_path):
    if filesystem_of(tmp_path) in ("tmpfs", "ramfs"):
        pytest.skip("files in memory (tmpfs) cannot leave the page cache")
    return tmp_path


def test_evict_drops_a_file_from_the_page_cache(disk_dir):
    tool = load_tool()
    path = written_file(disk_dir / "file.bin", 4 * MB)
    pages.read_through(path)
    assert tool.resident_bytes(path) == 4 * MB
    tool.evict(path)
    assert tool.resident_bytes(path) == 0


# Run by the stand-in notebook once it has read a file: a process of its own (it outlives the kernel)
# that locks the file's pages in memory (mlock) until `release` exists. A machine may reclaim memory
# it sees as cold at any moment (a virtual machine's DAMON pages out whole physical regions, and a
# page just read can sit in one): a page dropped between the notebook's read and the tool's count
# would make the count short, and a locked page cannot be dropped. The pages it locks are the ones
# the notebook has just read. Where locking is not allowed (RLIMIT_MEMLOCK) it only maps the file. It
# keeps none of the kernel's streams open: the tool waits for the end of the notebook's output.
HOLD_PAGES = """import ctypes, mmap, os, sys, time
path, release = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
size, fd = os.path.getsize(path), os.open(path, os.O_RDONLY)
address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(size))
print('holding', flush=True)
deadline = time.monotonic() + 600
while not os.path.exists(release) and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def test_it_counts_what_the_notebook_reads_and_nothing_else(disk_dir, monkeypatch):
    """A 'pair' of two small files; the notebook reads the target's through PICOGPT_WEIGHTS_DIR
    (the link the tool makes), so exactly that file's bytes are touched (and kept: HOLD_PAGES)."""
    tool = load_tool()
    release = disk_dir / "release"
    sizes = {"gpt2": 2 * MB, "gpt2-xl": 6 * MB}
    for name, size in sizes.items():
        (disk_dir / name).mkdir()
        written_file(disk_dir / name / "model.safetensors", size)
    monkeypatch.setattr(tool, "is_available", lambda name: False)
    monkeypatch.setattr(tool, "random_checkpoint", lambda name: disk_dir / name / "model.safetensors")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os\n"
        "assert os.environ['PICOGPT_COURSE_MODELS'] == 'gpt2'\n"
        "import subprocess, sys\n"
        "path = os.path.join(os.environ['PICOGPT_WEIGHTS_DIR'], 'gpt2-xl', 'model.safetensors')\n"
        "with open(path, 'rb') as f:\n"
        "    n = len(f.read())\n"
        f"hold = subprocess.Popen([sys.executable, '-c', {HOLD_PAGES!r}, path, {str(release)!r}],\n"
        "                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,\n"
        "                        text=True, start_new_session=True)\n"
        "assert hold.stdout.readline() == 'holding\\n'")])
    nb_path = disk_dir / tool.GOAL_NOTEBOOK  # the notebook the goal is about: scored
    nbformat.write(notebook, nb_path)
    out = disk_dir / "page-cache.json"
    for name in sizes:
        pages.read_through(disk_dir / name / "model.safetensors")  # the tool must evict these first
    executed = disk_dir / "executed.ipynb"
    try:
        tool.main(["--notebook", str(nb_path), "--out", str(out), "--executed", str(executed)])
    finally:
        release.touch()  # the holder lets go of the pages
    result = json.loads(out.read_text())
    assert result["checkpoint_bytes_touched"] == sizes["gpt2-xl"]
    by_name = {Path(f).parent.name: v for f, v in result["files"].items()}
    assert by_name["gpt2"]["in_page_cache_before"] == by_name["gpt2"]["in_page_cache_after"] == 0
    assert by_name["gpt2-xl"]["in_page_cache_before"] == 0
    assert by_name["gpt2-xl"]["in_page_cache_after"] == sizes["gpt2-xl"]
    assert result["met"] is True
    assert nbformat.read(executed, as_version=4).cells[0].outputs == []  # ran (no error output), kept
    assert "language_info" in nbformat.read(executed, as_version=4).metadata  # the kernel ran it
