"""Writing a file so that it is always either the old file or the whole new one, never torn.

Everything picogpt writes (checkpoints, config.json, the bench's JSON and figure) goes through
`atomic_write`:

    1. write into a temporary file beside the target, of a name no other writer uses
       (`<name>.<pid>-<random>.tmp`: the process id says whose it is), holding an OS lock on
       it (flock) until it is in place;
    2. flush it to the disk (fsync), so that a crash just after step 3 cannot leave an empty file;
    3. rename it over the target (os.replace: atomic on one file system).

A folder of several files (a random-weight checkpoint and its config.json) is built the same way,
`atomic_folder`: in a temporary folder beside it, renamed into place once whole, so that an
interrupted build leaves no half folder.

A write that fails (a full disk, Ctrl-C, any exception) deletes its temporary file and raises.
SIGTERM and SIGHUP, which would otherwise end the process on the spot, delete the temporary
files being written and then end it as the signal would (while a write runs in the main thread:
Python delivers signals only there). A temporary file that survives all of that (SIGKILL, a
power cut) is deleted by the next write of the same file, at once: the OS releases a lock
however its process ends, so a temporary file whose lock is free has no writer left. The lock,
not the process id, decides: an id can be reused by a new process, and means nothing to a
process in another PID namespace (a container) sharing the folder. Where there are no file
locks (Windows, some network file systems) a left temporary file stays until deleted by hand.
"""

import contextlib
import glob
import os
import re
import secrets
import shutil
import signal
import threading
from pathlib import Path

from ..errors import PicoGPTError
from .files import is_same_file, regular_opener, try_lock

LOCKS = os.name != "nt"  # Windows renames only a closed file, so its temporary files are not locked
CLEANUP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))

_being_written = set()  # temporary files this process is writing now (any thread)


def temporary_path(path):
    """A temporary name beside `path` that no other writer uses: <name>.<pid>-<8 hex>.tmp."""
    return path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")


def writer_pid(temporary, path):
    """The process id in a temporary name of `path`, or None if it is not one of ours."""
    match = re.fullmatch(re.escape(path.name) + r"\.(\d+)-[0-9a-f]{8}\.tmp", temporary.name, re.ASCII)
    return int(match[1]) if match else None


def remove_if_stale(temporary, path):
    """Delete `temporary`, a temporary file of `path`, if another process wrote it and has ended:
    nobody holds its lock. It is deleted while this process holds the lock, so that a writer
    locking its new file just after us finds it gone (create_temporary). A link, a FIFO or
    anything else that is not a regular file is left alone. Returns whether it was deleted."""
    pid = writer_pid(temporary, path)
    if not LOCKS or pid is None or pid == os.getpid():
        return False
    try:
        with open(temporary, "rb", opener=regular_opener(follow=False)) as f:
            if try_lock(f) and is_same_file(f, temporary):
                temporary.unlink()
                return True
    except (OSError, PicoGPTError):  # gone already, not a regular file, or a file system without locks
        pass
    return False


def remove_stale_temporaries(path):
    """Delete the temporary files of `path` whose writers have ended; returns them."""
    return [t for t in map(Path, glob.glob(glob.escape(str(path)) + ".*.tmp")) if remove_if_stale(t, path)]


def create_temporary(path, text):
    """A new temporary file of `path`, open for writing and locked: (its name, the file). A
    cleaner that took the lock in the instant between our creating the file and locking it has
    deleted it: then try again under a new name. Its name is in _being_written before the file
    exists, and an exception at any moment here (KeyboardInterrupt) deletes it: a signal never
    finds a file it does not know of."""
    while True:
        temporary = temporary_path(path)
        _being_written.add(temporary)
        f = None
        try:
            f = open(temporary, "x" if text else "xb", encoding="utf-8" if text else None)
            try:
                mine = not LOCKS or try_lock(f) and is_same_file(f, temporary)
            except OSError:  # a file system without locks: written unlocked
                mine = True
            if mine:
                return temporary, f
        except BaseException:
            if f is not None:
                f.close()
                with contextlib.suppress(OSError):
                    temporary.unlink()
            _being_written.discard(temporary)
            raise
        f.close()
        _being_written.discard(temporary)


def delete(temporary):
    """Delete a temporary file, or a temporary folder with everything in it; gone already is fine."""
    with contextlib.suppress(OSError):
        if temporary.is_dir() and not temporary.is_symlink():
            shutil.rmtree(temporary)
        else:
            os.unlink(temporary)


def delete_and_resignal(signum, frame):
    """Signal handler: delete the temporary files and folders being written, then end the process
    as the signal would have (the default action, re-raised)."""
    for temporary in list(_being_written):
        delete(temporary)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


@contextlib.contextmanager
def deleted_on_signal():
    """Within the block, SIGTERM and SIGHUP delete the files being written (_being_written)
    before ending the process. A handler the program installed itself is left alone."""
    installed = []
    if threading.current_thread() is threading.main_thread():
        for signum in CLEANUP_SIGNALS:
            if signal.getsignal(signum) == signal.SIG_DFL:
                signal.signal(signum, delete_and_resignal)
                installed.append(signum)
    try:
        yield
    finally:
        for signum in installed:
            signal.signal(signum, signal.SIG_DFL)


@contextlib.contextmanager
def atomic_write(path, text=False):
    """Open a new file to write `path`'s contents into (binary, or UTF-8 text with text=True).
    Leaving the block normally puts the file in place (fsync, then rename over `path`); leaving
    it with an exception deletes it, and `path` stays as it was."""
    path = Path(path)
    remove_stale_temporaries(path)
    with deleted_on_signal():
        temporary = None
        try:
            temporary, f = create_temporary(path, text)  # deletes its file itself if interrupted
            with f:
                yield f
                f.flush()
                os.fsync(f.fileno())
                if LOCKS:
                    os.replace(temporary, path)  # while still open and locked: no cleaner takes it
            if not LOCKS:
                os.replace(temporary, path)
        except BaseException:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    temporary.unlink()
            raise
        finally:
            _being_written.discard(temporary)


def write_text_atomically(path, text):
    """Write `text` (UTF-8) to `path` with atomic_write. Returns the path."""
    with atomic_write(path, text=True) as f:
        f.write(text)
    return Path(path)


FOLDER_LOCK = ".picogpt-building"  # the lock file inside a folder being built: held while its writer lives


def remove_stale_folders(path):
    """Delete the temporary folders of `path` whose writers have ended (killed outright: SIGKILL,
    a power cut): nobody holds the lock of the file FOLDER_LOCK inside. Returns them."""
    removed = []
    for temporary in map(Path, glob.glob(glob.escape(str(path)) + ".*.tmp")):
        if writer_pid(temporary, path) in (None, os.getpid()) or not LOCKS or temporary.is_symlink():
            continue
        try:
            with open(temporary / FOLDER_LOCK, "rb", opener=regular_opener(follow=False)) as f:
                if not try_lock(f):
                    continue  # its writer is still at work
        except (OSError, PicoGPTError):
            continue  # no lock file (yet), or not a folder of ours: left alone
        delete(temporary)
        removed.append(temporary)
    return removed


@contextlib.contextmanager
def atomic_folder(path):
    """Build the folder `path` whole or not at all: yields a new temporary folder beside it
    (`<name>.<pid>-<8 hex>.tmp`) to fill. Leaving the block normally puts it in place (a folder
    already at `path`, incomplete, is replaced); leaving it with an exception, or SIGTERM or
    SIGHUP, deletes it. One left by a writer killed outright goes with the next build of `path`."""
    path = Path(path)
    remove_stale_folders(path)
    with deleted_on_signal():
        temporary = temporary_path(path)
        _being_written.add(temporary)  # before it exists: a signal never finds a folder it does not know of
        try:
            temporary.mkdir()
            with open(temporary / FOLDER_LOCK, "wb") as lock:
                if LOCKS:
                    try_lock(lock)
                yield temporary
            os.unlink(temporary / FOLDER_LOCK)
            if path.exists():
                shutil.rmtree(path)
            os.rename(temporary, path)
        except BaseException:
            delete(temporary)
            raise
        finally:
            _being_written.discard(temporary)
