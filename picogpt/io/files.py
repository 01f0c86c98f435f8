"""Opening files in a folder others may write to (a classroom's shared PICOGPT_WEIGHTS_DIR).

Anyone who can write to the folder can plant a name in it before picogpt uses that name: a
symbolic link to someone's file (which a write would truncate or extend), a FIFO (which a read
waits on forever) or a link to a device such as /dev/zero (which a read never finishes). So:

- a file picogpt writes in such a folder is opened without following a link (O_NOFOLLOW), and
  must then be a regular file of this user's with one name (a hard link would write into
  another file too; a file someone else owns could be changed by them once verified);
- a file picogpt reads must be a regular file (it is opened without waiting, O_NONBLOCK, so a
  FIFO is refused instead of waited on), and a small one (config.json) is read only up to a cap;
  files in the weights folder are read without following links too.

Refusals are one PicoGPTError naming the path and what it is, never a hang or a traceback.
"""

import contextlib
import os
import stat
import tempfile

from ..errors import PicoGPTError, shown

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt

NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)  # not on Windows, where creating a link needs privileges
NO_WAIT = getattr(os, "O_NONBLOCK", 0)
KINDS = {stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a FIFO (named pipe)", stat.S_ISCHR: "a device",
         stat.S_ISBLK: "a device", stat.S_ISSOCK: "a socket", stat.S_ISLNK: "a symbolic link"}


class NotARegularFile(PicoGPTError):
    """A path that picogpt would read or write holds something other than a regular file."""


def kind_of(mode):
    """What a file of this st_mode is, in words ('a FIFO (named pipe)', ...)."""
    return next((kind for test, kind in KINDS.items() if test(mode)), "not a regular file")


def refuse(path, kind, advice):
    raise NotARegularFile(f"{shown(path)} is {kind}, not a file picogpt may use: {advice}")


def open_regular(path, flags=os.O_RDONLY, *, follow=True, own=False, advice="check that path"):
    """os.open(path, flags) that refuses anything but a regular file, without waiting on a FIFO.
    follow=False refuses a symbolic link at `path` instead of following it; own=True, for a file
    picogpt writes into, also refuses a link, a file with a second name (a hard link would write
    into another file too) and a file of another user's. Returns the (blocking) descriptor."""
    if own or not follow:
        flags |= NO_FOLLOW
    try:
        fd = os.open(path, flags | NO_WAIT, 0o666)
    except IsADirectoryError:  # opened for writing; for reading, a folder opens and fstat says so below
        refuse(path, "a folder", advice)
    except OSError:
        if flags & NO_FOLLOW and os.path.islink(path):  # O_NOFOLLOW's refusal (ELOOP; EMLINK on BSD)
            refuse(path, "a symbolic link", advice)
        raise
    info = os.fstat(fd)
    problem = (kind_of(info.st_mode) if not stat.S_ISREG(info.st_mode)
               else None if not own
               else "a file with another name too (a hard link)" if info.st_nlink > 1
               else "another user's file" if hasattr(os, "geteuid") and info.st_uid != os.geteuid()
               else None)
    if problem:
        os.close(fd)
        refuse(path, problem, advice)
    if NO_WAIT:
        os.set_blocking(fd, True)
    return fd


def regular_opener(follow=True, own=False, advice="check that path"):
    """An `opener` for open(), as in open(path, "rb", opener=regular_opener()), that opens what
    open_regular(path, ..., follow, own, advice) accepts and nothing else."""
    return lambda path, flags: open_regular(path, flags, follow=follow, own=own, advice=advice)


def read_small_text(path, max_bytes):
    """The text of a small regular file (UTF-8), refusing a longer one: a config.json that is a
    link to /dev/zero or to a huge file is an error, not an endless read."""
    with open(path, "rb", opener=regular_opener()) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise PicoGPTError(f"{shown(path)} is longer than {max_bytes:,} bytes, far more than a config.json "
                           "holds: check that it is the model's config.json")
    return data.decode("utf-8")


def ensure_writable_folder(folder, what, advice):
    """Create `folder` (and its parents) and check that a file can be created in it, or say why
    not ("cannot write to {what} ..."). The probe is a new file of a random name, created
    exclusively: never through a link someone planted."""
    try:
        os.makedirs(folder, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".picogpt-write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise PicoGPTError(f"cannot write to {what} {shown(folder)} ({e.strerror or e}): {advice}") from None


def try_lock(f):
    """Take an exclusive OS lock on the open file f without waiting: False if another process
    (or another open of the file) holds it. The OS releases it when the file is closed or the
    process ends, however it ends."""
    try:
        if fcntl is not None:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
    except (BlockingIOError, PermissionError):
        return False
    return True


def is_same_file(f, path):
    """Whether the open file f is still the file at `path` (no link followed): a lock taken on
    a file that was deleted or replaced meanwhile counts for nothing."""
    with contextlib.suppress(OSError):
        return os.path.samestat(os.fstat(f.fileno()), os.lstat(path))
    return False
