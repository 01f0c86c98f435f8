"""Writing a file so that it is always either the old file or the whole new one, never torn.

Everything picogpt writes (checkpoints, config.json, the bench's JSON and figure) goes through
`atomic_write`:

    1. write into a temporary file beside the target, of a name no other writer uses
       (`<name>.<pid>-<random>.tmp`: the process id says whose it is);
    2. flush it to the disk (fsync), so that a crash just after step 3 cannot leave an empty file;
    3. rename it over the target (os.replace: atomic on one file system).

A write that fails (a full disk, Ctrl-C, any exception) deletes its temporary file and raises.
SIGTERM and SIGHUP, which would otherwise end the process on the spot, delete the temporary
files being written and then end it as the signal would (while a write runs in the main thread:
Python delivers signals only there). A temporary file that survives all of that (SIGKILL, a
power cut) is deleted by the next write of the same file, once its process no longer exists.
"""

import contextlib
import glob
import os
import re
import secrets
import signal
import threading
import time
from pathlib import Path

STALE_AFTER_S = 60  # a temporary file untouched this long, of a process that is gone, is stale
CLEANUP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))

_being_written = set()  # temporary files this process is writing now (any thread)


def temporary_path(path):
    """A temporary name beside `path` that no other writer uses: <name>.<pid>-<8 hex>.tmp."""
    return path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")


def writer_pid(temporary, path):
    """The process id in a temporary name of `path`, or None if it is not one of ours."""
    match = re.fullmatch(re.escape(path.name) + r"\.(\d+)-[0-9a-f]{8}\.tmp", temporary.name, re.ASCII)
    return int(match[1]) if match else None


def process_exists(pid):
    """Whether a process with this id exists (signal 0 asks without sending anything). On
    Windows, where signal 0 would interrupt the process, every process counts as existing."""
    if os.name == "nt":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists and belongs to someone else
        return True
    return True


def is_stale(temporary, path, now):
    """A temporary file of `path` whose writer is gone and that nobody has touched for a
    while (the age guards against a writer in another PID namespace, a container)."""
    pid = writer_pid(temporary, path)
    if pid is None or pid == os.getpid() or process_exists(pid):
        return False
    try:
        return now - temporary.stat().st_mtime > STALE_AFTER_S
    except OSError:
        return False


def remove_stale_temporaries(path):
    """Delete the temporary files of `path` left by processes that no longer exist; returns them."""
    now = time.time()
    stale = [t for t in map(Path, glob.glob(glob.escape(str(path)) + ".*.tmp")) if is_stale(t, path, now)]
    for temporary in stale:
        with contextlib.suppress(OSError):
            temporary.unlink()
    return stale


def delete_and_resignal(signum, frame):
    """Signal handler: delete the temporary files being written, then end the process as the
    signal would have (the default action, re-raised)."""
    for temporary in list(_being_written):
        with contextlib.suppress(OSError):
            os.unlink(temporary)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


@contextlib.contextmanager
def deleted_on_signal(temporary):
    """Within the block, SIGTERM and SIGHUP delete `temporary` (and any other file being
    written) before ending the process. A handler the program installed itself is left alone."""
    _being_written.add(temporary)
    installed = []
    if threading.current_thread() is threading.main_thread():
        for signum in CLEANUP_SIGNALS:
            if signal.getsignal(signum) == signal.SIG_DFL:
                signal.signal(signum, delete_and_resignal)
                installed.append(signum)
    try:
        yield
    finally:
        _being_written.discard(temporary)
        for signum in installed:
            signal.signal(signum, signal.SIG_DFL)


@contextlib.contextmanager
def atomic_write(path, text=False):
    """Open a new file to write `path`'s contents into (binary, or UTF-8 text with text=True).
    Leaving the block normally puts the file in place (fsync, then rename over `path`); leaving
    it with an exception deletes it, and `path` stays as it was."""
    path = Path(path)
    remove_stale_temporaries(path)
    temporary = temporary_path(path)
    with deleted_on_signal(temporary):
        try:
            with open(temporary, "x" if text else "xb", encoding="utf-8" if text else None) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise


def write_text_atomically(path, text):
    """Write `text` (UTF-8) to `path` with atomic_write. Returns the path."""
    with atomic_write(path, text=True) as f:
        f.write(text)
    return Path(path)
