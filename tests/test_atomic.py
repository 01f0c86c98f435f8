"""Every file picogpt writes is the old file or the whole new one (picogpt/io/atomic.py): a full
disk, an exception, Ctrl-C or SIGTERM leaves no torn file and no temporary file, and temporary
files of processes killed outright are cleaned by the next write, at once (a live writer holds
a lock on its own)."""

import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import FillingFile

import picogpt.io.atomic as atomic
from picogpt.io.atomic import atomic_folder, atomic_write, write_text_atomically


def fill_disk_after(monkeypatch, room):
    """Make every file atomic_write opens fail with ENOSPC after `room` bytes."""
    real_open = open
    monkeypatch.setattr(atomic, "open", lambda *args, **kwargs: FillingFile(real_open(*args, **kwargs), room, errno.ENOSPC),
                        raising=False)


def test_a_write_on_a_full_disk_leaves_the_old_file_whole_and_no_temporary_file(tmp_path, monkeypatch):
    path = write_text_atomically(tmp_path / "results.json", '{"old": true}\n')
    fill_disk_after(monkeypatch, 8192)
    with pytest.raises(OSError, match="No space left"):
        write_text_atomically(path, json.dumps({"new": "x" * 100_000}))
    assert path.read_text() == '{"old": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_an_exception_inside_the_block_leaves_the_old_file(tmp_path):
    path = write_text_atomically(tmp_path / "a.txt", "old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_write(path, text=True) as f:
            f.write("half of the new")
            raise KeyboardInterrupt  # Ctrl-C
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_bench_results_on_a_full_disk_keep_the_previous_json(tmp_path, monkeypatch):
    """`bench` used to replace its results JSON with a torn 8 KB file."""
    import picogpt.bench.report as report

    (tmp_path / "bench.json").write_text('{"previous": "run"}\n')
    monkeypatch.setattr(report, "to_json", lambda results: json.dumps({"x": "y" * 100_000}))
    monkeypatch.setattr(report, "plot", lambda results, f: pytest.fail("no figure after a failed JSON"))
    fill_disk_after(monkeypatch, 8192)
    with pytest.raises(OSError, match="No space left"):
        report.save({"notes": []}, tmp_path, "bench")
    assert (tmp_path / "bench.json").read_text() == '{"previous": "run"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json"]


def test_bench_figure_is_written_atomically_too(tmp_path, monkeypatch):
    import picogpt.bench.report as report

    def plot(results, f):
        f.write(b"\x89PNG half a figure")
        raise OSError(errno.ENOSPC, "No space left on device")

    (tmp_path / "bench.png").write_bytes(b"old figure")
    monkeypatch.setattr(report, "plot", plot)
    with pytest.raises(OSError):
        report.save({"notes": []}, tmp_path, "bench")
    assert (tmp_path / "bench.png").read_bytes() == b"old figure"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json", "bench.png"]


# ---- signals: a subprocess writes a checkpoint slowly, the test stops it --------------------------

SLOW_RANDOM_CHECKPOINT = """
import signal, sys, time
import picogpt.bench.checkpoints as checkpoints

# Ctrl-C as in a terminal, even when the tests run as a background job (`make test &`, nohup),
# whose children inherit SIGINT ignored
signal.signal(signal.SIGINT, signal.default_int_handler)

class Slow(checkpoints.RandomTensor):
    def __array__(self, dtype=None, copy=None):
        time.sleep(0.2)  # each tensor takes a while: the test has time to send its signal
        return super().__array__(dtype, copy)

checkpoints.RandomTensor = Slow
config = {"n_layer": 4, "n_head": 2, "n_embd": 64, "n_positions": 32, "vocab_size": 500}
checkpoints.random_checkpoint("toy", folder=sys.argv[1], config=config)
print("finished")
"""


@pytest.mark.parametrize("where", ["try_lock", "is_same_file"])
def test_ctrl_c_in_the_instant_after_the_temporary_file_is_created_leaves_nothing(tmp_path, monkeypatch, where):
    """A KeyboardInterrupt can arrive between any two lines: one raised just after the file is
    created, before atomic_write's own clean-up is entered, must still take the file with it."""
    path = write_text_atomically(tmp_path / "results.json", "old")

    def interrupted(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(atomic, where, interrupted)
    with pytest.raises(KeyboardInterrupt), atomic_write(path, text=True) as f:
        f.write("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"] and path.read_text() == "old"
    assert not atomic._being_written


def being_built(folder):
    """The temporary files of model.safetensors in the temporary folders building `folder`."""
    return list(folder.parent.glob(f"{folder.name}.*.tmp/model.safetensors.*.tmp"))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_bench_writes_a_random_checkpoint_leaves_no_half_folder(tmp_path, signum):
    """Neither a temporary file (SIGTERM used to leave a 428 MB .tmp of a new name every run,
    6.2 GB for XL) nor a folder holding config.json alone: the folder is whole or absent."""
    folder = tmp_path / "random-toy"
    process = subprocess.Popen([sys.executable, "-c", SLOW_RANDOM_CHECKPOINT, str(folder)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not being_built(folder):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    process.send_signal(signum)
    out, err = process.communicate(timeout=30)
    assert "finished" not in out
    if signum == signal.SIGTERM:
        assert process.returncode == -signal.SIGTERM  # ended as SIGTERM ends a process
    assert list(tmp_path.iterdir()) == []


def test_a_program_s_own_sigterm_handler_is_left_alone(tmp_path):
    calls = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    try:
        with atomic_write(tmp_path / "a.bin") as f:
            assert signal.getsignal(signal.SIGTERM) is not atomic.delete_and_resignal
            os.kill(os.getpid(), signal.SIGTERM)
            f.write(b"whole")
        assert calls == [signal.SIGTERM] and (tmp_path / "a.bin").read_bytes() == b"whole"
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_default_sigterm_action_is_restored_after_a_write(tmp_path):
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    with atomic_write(tmp_path / "a.bin") as f:
        assert signal.getsignal(signal.SIGTERM) is atomic.delete_and_resignal
        f.write(b"x")
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


# ---- temporary files left by processes killed outright ----------------------------------------------

def start_slow_writer(folder):
    """A process writing a random checkpoint slowly into folder; returns it once bytes reach its
    temporary file (by then it holds the file's lock)."""
    process = subprocess.Popen([sys.executable, "-c", SLOW_RANDOM_CHECKPOINT, str(folder)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not [t for t in being_built(folder) if t.stat().st_size]:
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    return process


def test_the_temporary_file_of_a_writer_killed_outright_goes_with_the_next_write_at_once(tmp_path):
    """It used to stay for a minute, so a bench re-run at once kept a partial checkpoint (up to
    6.2 GB) beside the new one for good."""
    folder = tmp_path / "random-toy"
    process = start_slow_writer(folder)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    (building,) = [t.parent for t in being_built(folder)]
    path = building / "model.safetensors"
    write_text_atomically(path, "new")
    assert sorted(p.name for p in building.iterdir()) == [".picogpt-building", "config.json", "model.safetensors"]


def test_the_folder_of_a_builder_killed_outright_goes_with_the_next_build(tmp_path):
    import picogpt.bench.checkpoints as checkpoints

    folder = tmp_path / "random-toy"
    process = start_slow_writer(folder)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    assert being_built(folder) and not folder.exists()
    config = {"n_layer": 1, "n_head": 2, "n_embd": 64, "n_positions": 32, "vocab_size": 500}
    checkpoints.random_checkpoint("toy", folder=folder, config=config)
    assert [p.name for p in tmp_path.iterdir()] == ["random-toy"]
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]


def test_a_live_builder_keeps_its_folder_and_an_incomplete_folder_is_replaced(tmp_path):
    folder = tmp_path / "random-toy"
    writer = start_slow_writer(folder)
    try:
        (building,) = [t.parent for t in being_built(folder)]
        assert atomic.remove_stale_folders(folder) == [] and building.exists()
    finally:
        writer.kill()
        writer.communicate(timeout=30)
    folder.mkdir()
    (folder / "config.json").write_text("{}")  # half a folder, from a build that did not use atomic_folder
    with atomic_folder(folder) as new:
        (new / "model.safetensors").write_text("whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["random-toy"]
    assert [p.name for p in folder.iterdir()] == ["model.safetensors"]


def test_a_live_writer_keeps_its_temporary_file_and_a_reused_process_id_keeps_none(tmp_path):
    folder = tmp_path / "random-toy"
    writer = start_slow_writer(folder)
    try:
        (writing,) = being_built(folder)
        path = writing.parent / "model.safetensors"
        folder = writing.parent
        # left by a writer killed outright whose process id now belongs to a live process
        reused = path.with_name(f"{path.name}.{os.getppid()}-0123abcd.tmp")
        reused.write_bytes(b"x" * 1000)
        victim = tmp_path / "victim.txt"
        victim.write_text("someone's file")
        (folder / f"{path.name}.{os.getppid()}-4567cdef.tmp").symlink_to(victim)  # planted: left alone
        os.mkfifo(folder / f"{path.name}.{os.getppid()}-89abcdef.tmp")  # never waited on
        (folder / "notes.txt.1-0123abcd.tmp").write_text("not a temporary file of this path")
        assert atomic.remove_stale_temporaries(path) == [reused]
        assert writing.exists() and not reused.exists() and victim.read_text() == "someone's file"
        assert len(list(folder.glob("*.tmp"))) == 4
    finally:
        writer.kill()
        writer.communicate(timeout=30)


def test_temporary_names_are_unique_and_name_their_process(tmp_path):
    path = tmp_path / "bench.json"
    names = {atomic.temporary_path(path).name for _ in range(100)}
    assert len(names) == 100
    assert all(atomic.writer_pid(tmp_path / name, path) == os.getpid() for name in names)


def test_bench_says_how_many_gb_it_writes_where_and_shows_progress(tmp_path, capsys):
    import picogpt.bench.checkpoints as checkpoints

    config = {"n_layer": 1, "n_head": 2, "n_embd": 64, "n_positions": 32, "vocab_size": 500}
    path = checkpoints.random_checkpoint("toy", folder=tmp_path / "random-toy", config=config)
    err = capsys.readouterr().err
    n_bytes = path.stat().st_size
    assert f"writing random-weight toy (0.00 GB) to {tmp_path / 'random-toy'}" in err
    assert "model.safetensors: 100%" in err  # the progress bar, in bytes
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.json", "model.safetensors"] and n_bytes > 0


WRITE_MANY_TIMES = """
import sys
from picogpt.io.atomic import write_text_atomically

for i in range(200):
    write_text_atomically(sys.argv[1], sys.argv[2] * 1000)
"""


def test_writers_of_one_file_at_once_never_delete_each_other_s_temporary_files(tmp_path):
    """Each write first cleans up stale temporary files: one being written by a live process
    (even one just created, not locked yet) must never be taken for stale."""
    path = tmp_path / "results.json"
    writers = [subprocess.Popen([sys.executable, "-c", WRITE_MANY_TIMES, str(path), letter], stderr=subprocess.PIPE,
                                text=True) for letter in "abcd"]
    errors = [writer.communicate(timeout=120)[1] for writer in writers]
    assert [writer.returncode for writer in writers] == [0] * 4, errors
    assert path.read_text() in {letter * 1000 for letter in "abcd"}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]
