"""The memory guard (picogpt/io/memory.py) refuses, in one line and before allocating, what
any limit would stop: the machine's free memory, the process's `ulimit -v`, its control group's
limit (a container), instead of a MemoryError or the kernel's OOM killer. The limits are real
(`ulimit -v` in a subprocess) or read from /proc and /sys files the test writes."""

import json
import subprocess
import sys

import pytest
from helpers import random_tensors

from picogpt.errors import PicoGPTError
from picogpt.gpt2 import GPT2Config
from picogpt.io import memory
from picogpt.io.checkpoint import write_safetensors
from picogpt.model import load_checkpoint

MB = 10**6
CONFIG = GPT2Config(n_layer=1, n_head=2, n_embd=512, n_ctx=8, n_vocab=40_000)  # wte: 20.5M numbers


@pytest.fixture(scope="module")
def half_precision(tmp_path_factory):
    """An F16 checkpoint of 48 MB that takes 95 MB once widened to float32."""
    folder = tmp_path_factory.mktemp("f16")
    write_safetensors(folder / "model.safetensors", random_tensors(CONFIG), dtype="F16")
    (folder / "config.json").write_text(json.dumps(dict(n_layer=1, n_head=2, n_embd=512, n_positions=8,
                                                        vocab_size=40_000)))
    return folder


UNDER_ULIMIT = """
import re, resource, sys
from picogpt.cli import main

def vm_size():
    return int(re.search(r"VmSize:\\s*(\\d+) kB", open("/proc/self/status").read())[1]) * 1024

# room for the mapped file and 30 MB more, not for its 95 MB of widened weights
resource.setrlimit(resource.RLIMIT_AS, (vm_size() + int(sys.argv[2]) + 30 * 10**6, resource.RLIM_INFINITY))
sys.exit(main(["info", sys.argv[1]]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_checkpoint_too_big_for_ulimit_v_is_refused_in_one_line(half_precision):
    """It used to end in a MemoryError traceback: only MemAvailable was consulted."""
    n_file = (half_precision / "model.safetensors").stat().st_size
    result = subprocess.run([sys.executable, "-c", UNDER_ULIMIT, str(half_precision), str(n_file)],
                            capture_output=True, text=True, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "widening" in lines[0] and "needs 95 MB" in lines[0] and "ulimit -v" in lines[0]


MAP_UNDER_ULIMIT = """
import re, resource, sys
from picogpt.cli import main

def vm_size():
    return int(re.search(r"VmSize:\\s*(\\d+) kB", open("/proc/self/status").read())[1]) * 1024

# room for half of the file's mapping
resource.setrlimit(resource.RLIMIT_AS, (vm_size() + int(sys.argv[2]) // 2, resource.RLIM_INFINITY))
if sys.argv[3] == "load":
    from picogpt.model import load_checkpoint
    load_checkpoint(sys.argv[1])
sys.exit(main(["info", sys.argv[1]]))
"""


@pytest.fixture(scope="module")
def single_precision(tmp_path_factory):
    """An F32 checkpoint of 95 MB, mapped as it is."""
    folder = tmp_path_factory.mktemp("f32")
    write_safetensors(folder / "model.safetensors", random_tensors(CONFIG))
    (folder / "config.json").write_text(json.dumps(dict(n_layer=1, n_head=2, n_embd=512, n_positions=8,
                                                        vocab_size=40_000)))
    return folder


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.parametrize("how", ["load", "info"])
def test_a_checkpoint_too_big_to_map_under_ulimit_v_is_one_line(single_precision, how):
    """mmap's OSError ENOMEM used to come out of load raw, and the command line blamed the disk."""
    n_file = (single_precision / "model.safetensors").stat().st_size
    result = subprocess.run([sys.executable, "-c", MAP_UNDER_ULIMIT, str(single_precision), str(n_file), how],
                            capture_output=True, text=True, timeout=120)
    if how == "load":
        assert result.returncode == 1 and "picogpt.errors.PicoGPTError: " in result.stderr, result.stderr
        assert "OSError" not in result.stderr
        return
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "cannot map" in lines[0] and "address space" in lines[0] and "ulimit -v" in lines[0]
    assert "disk" not in lines[0]


def test_a_refusal_states_the_room_it_keeps_free_beside_the_allocation(monkeypatch):
    """'needs 0.0 GB, and 0.8 GB is available' hid a margin of 1 GiB kept free for the rest."""
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 800 * MB)
    with pytest.raises(PicoGPTError) as raised:
        memory.ensure_fits(2 * MB, "copying x's weights into memory", "close something")
    message = str(raised.value)
    assert "needs 2.0 MB" in message and "keeps 1.07 GB free" in message and "800 MB is available" in message
    assert "0.0 GB" not in message
    memory.ensure_fits(2 * MB, "copying x's weights into memory", "close something", margin=0)


def test_the_command_line_s_in_memory_refusal_states_the_margin(monkeypatch, capsys, tmp_path):
    from helpers import write_random_checkpoint

    from picogpt.cli import main

    folder = write_random_checkpoint(tmp_path / "model", 1, n_vocab=50257, n_ctx=16, n_embd=8)
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 800 * MB)
    assert main(["generate", "--model", str(folder), "-n", "2", "--in-memory"]) == 2
    line = capsys.readouterr().err.strip()
    assert "needs 1.6 MB" in line and "keeps 1.07 GB free" in line and "0.0 GB" not in line


def fake_system(monkeypatch, tmp_path, files):
    """Point memory.py at /proc and /sys/fs/cgroup folders holding `files` ({path: text})."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(memory, "PROC", str(tmp_path / "proc"))
    monkeypatch.setattr(memory, "CGROUP", str(tmp_path / "cgroup"))


MEMINFO = "MemTotal:       64000000 kB\nMemAvailable:   32000000 kB\n"


def test_a_cgroup_v2_limit_and_the_limits_above_it_count(monkeypatch, tmp_path):
    group = "cgroup/user.slice/job-1"
    fake_system(monkeypatch, tmp_path, {
        "proc/meminfo": MEMINFO, "proc/self/cgroup": "0::/user.slice/job-1\n",
        f"{group}/memory.max": "max\n", f"{group}/memory.current": "123\n",  # no limit of its own
        "cgroup/user.slice/memory.max": f"{500 * MB}\n", "cgroup/user.slice/memory.current": f"{450 * MB}\n",
        # the kernel drops inactive page cache first: it is room too
        "cgroup/user.slice/memory.stat": f"anon 1\ninactive_file {40 * MB}\nactive_file 7\n"})
    assert memory.cgroup_rooms() == {str(tmp_path / "cgroup/user.slice"): 90 * MB}
    assert memory.available_memory_bytes() == 90 * MB


def test_a_cgroup_v1_limit_counts_in_a_container_that_cannot_see_its_host_path(monkeypatch, tmp_path):
    fake_system(monkeypatch, tmp_path, {
        "proc/meminfo": MEMINFO, "proc/self/cgroup": "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n",
        "cgroup/memory/memory.limit_in_bytes": f"{2000 * MB}\n", "cgroup/memory/memory.usage_in_bytes": f"{1500 * MB}\n",
        "cgroup/memory/memory.stat": f"inactive_file 9\ntotal_inactive_file {100 * MB}\n"})
    assert memory.available_memory_bytes() == 600 * MB


def test_loading_past_a_container_s_limit_is_refused_before_widening(monkeypatch, tmp_path, half_precision):
    fake_system(monkeypatch, tmp_path, {
        "proc/meminfo": MEMINFO, "proc/self/cgroup": "0::/\n",
        "cgroup/memory.max": f"{1000 * MB}\n", "cgroup/memory.current": f"{980 * MB}\n"})
    with pytest.raises(PicoGPTError, match="widening .* needs 95 MB; .* is available"):
        load_checkpoint(half_precision)
    (tmp_path / "cgroup/memory.max").write_text("max\n")  # no limit: it loads
    assert load_checkpoint(half_precision).config == CONFIG


def test_no_limit_known_means_nothing_is_checked(monkeypatch, tmp_path):
    fake_system(monkeypatch, tmp_path, {})
    monkeypatch.setattr(memory, "resource", None)
    assert memory.available_memory_bytes() is None
    memory.ensure_fits(10**18, "a test", "nothing")
