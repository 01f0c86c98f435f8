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


def test_it_counts_what_the_notebook_reads_and_nothing_else(disk_dir, monkeypatch):
    """A 'pair' of two small files; the notebook reads the target's through PICOGPT_WEIGHTS_DIR
    (the link the tool makes), so exactly that file's bytes are touched."""
    tool = load_tool()
    sizes = {"gpt2": 2 * MB, "gpt2-xl": 6 * MB}
    for name, size in sizes.items():
        (disk_dir / name).mkdir()
        written_file(disk_dir / name / "model.safetensors", size)
    monkeypatch.setattr(tool, "is_available", lambda name: False)
    monkeypatch.setattr(tool, "random_checkpoint", lambda name: disk_dir / name / "model.safetensors")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os\n"
        "assert os.environ['PICOGPT_COURSE_MODELS'] == 'gpt2'\n"
        "with open(os.path.join(os.environ['PICOGPT_WEIGHTS_DIR'], 'gpt2-xl', 'model.safetensors'), 'rb') as f:\n"
        "    n = len(f.read())")])
    nb_path = disk_dir / tool.GOAL_NOTEBOOK  # the notebook the goal is about: scored
    nbformat.write(notebook, nb_path)
    out = disk_dir / "page-cache.json"
    for name in sizes:
        pages.read_through(disk_dir / name / "model.safetensors")  # the tool must evict these first
    executed = disk_dir / "executed.ipynb"
    tool.main(["--notebook", str(nb_path), "--out", str(out), "--executed", str(executed)])
    result = json.loads(out.read_text())
    assert result["checkpoint_bytes_touched"] == sizes["gpt2-xl"]
    by_name = {Path(f).parent.name: v for f, v in result["files"].items()}
    assert by_name["gpt2"]["in_page_cache_before"] == by_name["gpt2"]["in_page_cache_after"] == 0
    assert by_name["gpt2-xl"]["in_page_cache_before"] == 0
    assert by_name["gpt2-xl"]["in_page_cache_after"] == sizes["gpt2-xl"]
    assert result["met"] is True
    assert nbformat.read(executed, as_version=4).cells[0].outputs == []  # ran (no error output), kept
    assert "language_info" in nbformat.read(executed, as_version=4).metadata  # the kernel ran it
