"""Verified downloads of the public GPT-2 checkpoints (`python -m picogpt download gpt2 gpt2-xl`).

Each checkpoint is fetched from the Hugging Face hub at a *pinned revision* (a git commit of
`openai-community/<name>`, so the bytes can never change under us) and checked against its
published sha256 before it is put in place:

    0. one process at a time: a download holds `model.safetensors.lock` (an OS lock, released
       when the process ends however it ends); a second download of the same model says so and
       waits, then finds the file in place (or resumes what the first left);
    1. stream into `model.safetensors.part`, never past the file's size (a server sending
       more is cut off with an error);
    2. if the connection breaks, the `.part` file stays, and the next run resumes it with an
       HTTP `Range` request;
    3. the size and sha256 of the `.part` *as it is on disk* are checked, and only a file that
       matches is renamed (atomically) to `model.safetensors`;
    4. if writing fails (a full disk, a file system that cannot hold the file), the `.part` file
       is deleted, freeing the disk, and the error says how much room the file needs.

So there is never a file at the final path that was not verified. The weights folder may be
shared (a classroom's PICOGPT_WEIGHTS_DIR): the lock and the `.part` are opened without
following links and must be regular files of this user's with one name, and the file at the
final path must be a regular file, never a link (io/files.py). `config.json` is written from
the known hyperparameters (no network needed). Only the standard library speaks HTTP; tqdm draws
the progress bar. Set `HF_ENDPOINT` to use a mirror (it is checked to be an http(s) URL before
any request). A published GPT-2 already in the user's Hugging Face cache with the pinned size
and sha256 is used from there, and nothing is downloaded (io/hf_cache.py).

huggingface_hub's `hf_hub_download` would bring resuming, locks, mirrors and tokens, but not
these guarantees: it renames a download into its cache after checking the size alone (not the
sha256), writes a server's whole body before comparing its length, deletes an interrupted
download instead of resuming it in the next run, and uses whatever file or link already sits at
a blob's name (docs/guarantees.md, "The GPT-2 you already have").
"""

import contextlib
import http.client
import json
import os
import re
import shutil
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from ..errors import DownloadError, shown
from .atomic import write_text_atomically
from .files import ensure_writable_folder, is_same_file, kind_of, refuse, regular_opener, try_lock
from .hf_cache import RECORD, hub_cache_dir, verified_copy
from .pins import CHUNK_BYTES, PINNED, sha256_of
from .registry import EMBEDDED, not_used, weights_dir

TIMEOUT_S = 60  # for connecting and for each read
SPARE_BYTES = 64 << 20  # keep this much disk free beyond the download
LOCK_POLL_S = 0.5  # a second download of the same model checks this often whether it may start
ADVICE = "delete it and run the same command again"  # for a file in the way in the weights folder


def spec_for(name):
    """The WeightSpec of a downloadable model name, or a clear error."""
    if name in PINNED:
        return PINNED[name]
    if name in EMBEDDED:
        raise DownloadError(f"'{name}' is not downloaded: it ships with the repository in weights/{name}/ "
                            "(restore it with: git checkout weights/)")
    raise DownloadError(f"unknown model '{name}': can download {', '.join(PINNED)}")


# ---------------------------------------------------------------------------------------------
# Small pieces: hashing, disk space, HTTP
# ---------------------------------------------------------------------------------------------

def open_in_folder(path, mode="rb"):
    """Open a file of the weights folder: never through a link, and only a regular file (a FIFO
    or a device there would make a hash run forever); "ab" and "a+" also refuse a file that is not
    this user's own with one name (io/files.py)."""
    return open(path, mode, opener=regular_opener(follow=False, own=mode != "rb", advice=ADVICE))


def file_in_folder(path):
    """os.lstat of a file of the weights folder, None if there is none; refuses a link, a FIFO,
    a device or a folder at that name."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        refuse(path, kind_of(info.st_mode), ADVICE)
    return info


def ensure_disk_space(folder, n_bytes_needed):
    free = shutil.disk_usage(folder).free
    if free < n_bytes_needed + SPARE_BYTES:
        raise DownloadError(f"not enough disk space in {folder}: the download needs "
                            f"{n_bytes_needed / 1e9:,.2f} GB more and only {free / 1e9:,.2f} GB "
                            "is free; free some space or set PICOGPT_WEIGHTS_DIR to another disk")


class Unreachable(DownloadError):
    """No connection to the server at all (offline, refused, no such host)."""


def open_url(url, start_byte=0):
    """GET url, asking for the bytes from `start_byte` on when resuming. Returns the response."""
    try:
        request = urllib.request.Request(url, headers={"User-Agent": "picogpt"})
        if start_byte:
            request.add_header("Range", f"bytes={start_byte}-")
        return urllib.request.urlopen(request, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as e:
        if e.code == 416:  # range not satisfiable: the .part is already as long as the file (or longer)
            return e
        if 300 <= e.code < 400:  # a redirect urllib would not follow
            raise DownloadError(f"{url} {redirect_problem(e)}: check HF_ENDPOINT, or try again later") from None
        hint = ("the file or revision is not on the server; check HF_ENDPOINT"
                if e.code == 404 else "the server refused; try again later")
        raise DownloadError(f"HTTP {e.code} {shown(e.reason, 100)} for {url}: {hint}") from None
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:  # ValueError: a URL
        reason = getattr(e, "reason", e)  # http.client cannot use; HTTPException: a garbled status line
        raise Unreachable(f"could not connect to {url} ({shown(reason, 200)}): check your network "
                          "connection (or HF_ENDPOINT) and run the same command again") from None


def offline_ways(spec, folder):
    """What works without a network, in words: the two places a checkpoint can come from."""
    cache = hub_cache_dir()
    where = f" ({shown(cache)}: none there matched)" if cache else ""
    return (f"without a network, {spec.name} is taken from a copy already in the Hugging Face cache{where}, "
            f"or from a {spec.filename} you place in {shown(folder)}/ (this command then checks its sha256); "
            "meanwhile the course and every command run on the embedded teaching pair")


def redirect_problem(error):
    """Why urllib stopped at a redirect (an HTTPError of status 3xx): it leads somewhere other
    than http(s), it says nowhere, or it goes round in a loop (or too many times)."""
    location = error.headers.get("Location") or error.headers.get("URI")
    if not location:
        return f"answered HTTP {error.code}, a redirect, without saying where to"
    scheme = urllib.parse.urlsplit(location).scheme
    if scheme and scheme not in ("http", "https"):
        return (f"redirects to {shown(location, 200)}, a {shown(scheme, 20)}: address, which picogpt does not "
                "follow (only http and https)")
    return f"redirects in a loop (HTTP {error.code})"


def header_count(response, name, text):
    """A byte count from an HTTP header: ASCII digits, at most 20 of them (str.isdigit() also
    takes '²', which int() refuses); a DownloadError if the server sent something else."""
    if not re.fullmatch(r"[0-9]{1,20}", text.strip(), re.ASCII):
        raise DownloadError(f"{shown(response.geturl(), 200)}: the server sent an invalid {name} header "
                            f"{shown(repr(text), 40)} (expected a number of bytes): check HF_ENDPOINT, or try again later")
    return int(text)


def response_total_bytes(response, start_byte):
    """The size of the whole file, from Content-Range (206) or Content-Length (200); None if absent."""
    content_range = response.headers.get("Content-Range", "")
    if response.status == 206 and "/" in content_range and not content_range.endswith("*"):
        return header_count(response, "Content-Range", content_range.rsplit("/", 1)[1])
    length = response.headers.get("Content-Length")
    if length is None:
        return None
    return start_byte * (response.status == 206) + header_count(response, "Content-Length", length)


def resumes_at(response, start_byte):
    """Did the server honour our Range request from start_byte? (A 200 means: from zero.)"""
    return (response.status == 206
            and response.headers.get("Content-Range", "").startswith(f"bytes {start_byte}-"))


# ---------------------------------------------------------------------------------------------
# The download itself
# ---------------------------------------------------------------------------------------------

class PartWriteError(OSError):
    """Writing the .part file failed: a full disk (ENOSPC), a file larger than the file system
    allows (EFBIG), or a file we may not write."""


class TooLong(Exception):
    """The server sent more bytes than the file has."""


def stream_to_part(response, part, n_have, n_total, label, progress):
    """Append the response body to the .part file, never past n_total bytes, and flush it to
    the disk. Returns the bytes held. Raises DownloadError if the connection breaks, TooLong if
    the server sends more than n_total bytes, PartWriteError if writing fails. Each read returns
    what has arrived (read1), so a server that stalls mid-body loses nothing already received."""
    from tqdm.auto import tqdm

    bar = tqdm(total=n_total, initial=n_have, unit="B", unit_scale=True, unit_divisor=1024,
               desc=label, disable=not progress, dynamic_ncols=True)
    try:
        with open_in_folder(part, "ab") as f:
            while True:
                try:
                    chunk = response.read1(CHUNK_BYTES)
                except (OSError, ValueError, http.client.HTTPException) as e:  # reset, timeout, IncompleteRead
                    raise DownloadError(f"connection lost after {n_have:,} bytes ({type(e).__name__})") from None
                if not chunk:
                    os.fsync(f.fileno())
                    return n_have
                if n_have + len(chunk) > n_total:
                    raise TooLong()
                f.write(chunk)
                f.flush()
                n_have += len(chunk)
                bar.update(len(chunk))
    except OSError as e:  # from open, write, flush, fsync or close: ENOSPC, EFBIG, EACCES
        raise PartWriteError(e.errno, e.strerror) from None
    finally:
        bar.close()
        response.close()


def held_bytes(part):
    """Bytes the .part file holds (0 if there is none); a .part that is not a regular file is refused."""
    info = file_in_folder(part)
    return info.st_size if info else 0


def delete_part(part):
    """Delete the .part file, freeing its disk space (nothing was put at the final path)."""
    with contextlib.suppress(OSError):
        part.unlink(missing_ok=True)


def install_verified(part, final, spec, n_expected, progress):
    """Rename the .part into place only if the file *on disk* has the expected size and the
    pinned sha256 (not the bytes this process meant to write: another writer, or a disk, could
    have changed them); otherwise delete it and say so. The file hashed must be the file that
    lands at the final path: if another was put at the .part's name meanwhile, it is removed."""
    with open_in_folder(part, "a+b") as f:  # a regular file of this user's own, with one name
        f.seek(0)
        hashed = os.fstat(f.fileno())
        digest = sha256_of(f, f"{spec.name} sha256" if progress else None)
    if hashed.st_size != n_expected or digest != spec.sha256:
        delete_part(part)
        raise DownloadError(f"{spec.url()} gave {hashed.st_size:,} bytes with sha256 {digest}, but "
                            f"{spec.name} must be {n_expected:,} bytes with sha256 {spec.sha256}; "
                            f"the partial file {part} was deleted — run the same command again "
                            "(if it keeps failing, check HF_ENDPOINT)")
    os.replace(part, final)
    if not os.path.samestat(hashed, os.lstat(final)):
        final.unlink()
        raise DownloadError(f"{part} was replaced while it was being verified: run the same command again")


def write_config(folder, spec):
    """config.json from the known hyperparameters, written atomically."""
    path = Path(folder) / "config.json"
    try:
        write_text_atomically(path, json.dumps(spec.config(), indent=2) + "\n")
    except OSError as e:
        raise DownloadError(f"could not write {path} ({e.strerror or e}): free some disk space or "
                            "set PICOGPT_WEIGHTS_DIR to a writable folder, then run the same command again") from None
    return path


def already_verified(final, spec):
    """Is the final file there with the pinned size and sha256? (Re-hashing takes seconds.)"""
    info = file_in_folder(final)
    if info is None or spec.size_problem(info.st_size):
        return False
    with open_in_folder(final) as f:
        return sha256_of(f) == spec.sha256


@contextlib.contextmanager
def download_lock(lock, name, log):
    """Hold the lock file `lock` for the block: one process at a time downloads a model. A
    second process says which process holds it and waits its turn (Ctrl-C stops waiting)."""
    said = False
    while True:
        f = open_in_folder(lock, "a+")
        while not try_lock(f):
            if not said:
                f.seek(0)
                holder = shown(f.read(40).strip(), 20) or "?"
                log(f"{name}: another download (process {holder}) is writing {lock.parent}; waiting "
                    "for it to finish (Ctrl-C to stop)")
                said = True
            time.sleep(LOCK_POLL_S)
        if is_same_file(f, lock):
            break
        f.close()  # its holder deleted it while we waited: take the lock file now in place
    try:
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()  # while still holding it, so that a waiting process takes a fresh one
        f.close()


def open_resumable(url, part, name, log):
    """Open url to continue the .part file with a Range request. Returns (response, bytes held).

    A server that ignores Range answers 200 with the whole file: start again from zero (the
    same when it cannot satisfy the range, 416, or answers some other range).
    """
    n_have = held_bytes(part)
    response = open_url(url, n_have)
    if n_have and not resumes_at(response, n_have):
        part.unlink()
        n_have = 0
        if response.status == 200:
            log(f"{name}: the server ignored the resume request; starting again from zero")
        else:
            log(f"{name}: the partial file does not fit the server's file; starting again from zero")
            response.close()
            response = open_url(url, 0)
    return response, n_have


def expected_bytes(spec, response, n_have, url, log):
    """The file's size: the pinned one (which the server must agree with), else the server's."""
    n_total = response_total_bytes(response, n_have)
    if n_total is not None and spec.size_problem(n_total):
        raise DownloadError(f"{url} is {spec.size_problem(n_total)}: not the pinned file (check HF_ENDPOINT); "
                            "nothing was downloaded")
    if spec.n_bytes is None:
        if n_total is None:
            raise DownloadError(f"{url} did not say how long the file is (no Content-Length) and "
                                f"no size is pinned for {spec.name}; try again later")
        log(f"{spec.name}: no size is pinned; using the server's Content-Length, {n_total:,} bytes "
            "(the sha256 is still checked)")
        return n_total
    return spec.n_bytes


def download_spec(spec, folder, progress=True, log=print):
    """Fetch spec's file into folder/<spec.filename>, verified, resuming a .part if there is one.

    Returns the final path. Raises a PicoGPTError (one readable message) on any failure (a
    DownloadError for what the server sent and a full disk), and never leaves an unverified
    file at the final path.
    """
    url = spec.url()  # a bad HF_ENDPOINT is refused before anything else
    folder = Path(folder)
    made_here = not folder.exists()
    ensure_writable_folder(folder, "the weights folder", "set PICOGPT_WEIGHTS_DIR to a folder you can write to")
    try:
        with download_lock(folder / (spec.filename + ".lock"), spec.name, log):
            return download_locked(spec, folder, url, progress, log)
    except BaseException:
        if made_here:  # a first download that failed leaves no empty folder (a kept .part keeps it)
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def download_locked(spec, folder, url, progress, log):
    """download_spec's work, done while holding the model's download lock."""
    final, part = folder / spec.filename, folder / (spec.filename + ".part")
    if already_verified(final, spec):
        log(f"{spec.name}: {final} already present and verified (sha256 {spec.sha256[:12]}…), skipped")
        write_config(folder, spec)
        return final
    copy, rejected = verified_copy(spec, folder / RECORD, log)
    if copy is not None:
        log(f"{spec.name}: found in the Hugging Face cache at {shown(copy[0])}, with the pinned size and sha256 "
            f"({spec.sha256[:12]}…): nothing to download, picogpt loads it from there")
        return copy[0]
    for path, reason in rejected:
        log(f"{spec.name}: {not_used(path, reason)}")
    if file_in_folder(final):
        raise DownloadError(f"{final} exists but does not match {spec.name}'s sha256 {spec.sha256}: {ADVICE}")

    if spec.n_bytes is not None:  # check the disk before touching the network
        if held_bytes(part) > spec.n_bytes:
            part.unlink()  # a .part longer than the file can only be garbage
        ensure_disk_space(folder, spec.n_bytes - held_bytes(part))
    try:
        response, n_have = open_resumable(url, part, spec.name, log)
    except Unreachable as e:
        raise DownloadError(f"{e}; {offline_ways(spec, folder)}") from None
    try:
        n_expected = expected_bytes(spec, response, n_have, url, log)
        if spec.n_bytes is None:
            ensure_disk_space(folder, n_expected - n_have)
    except DownloadError:
        response.close()
        raise
    if n_have:
        log(f"{spec.name}: resuming {part.name} at {n_have:,} of {n_expected:,} bytes")

    try:
        n_have = stream_to_part(response, part, n_have, n_expected, spec.name, progress)
    except DownloadError as e:
        raise DownloadError(f"{url}: {e}; the partial file {part} was kept — run the same command "
                            "again to resume") from None
    except TooLong:
        delete_part(part)
        raise DownloadError(f"{url} sent more than the {n_expected:,} bytes of {spec.name}: not the pinned "
                            f"file (check HF_ENDPOINT); the partial file {part} was deleted and nothing "
                            "was installed") from None
    except PartWriteError as e:
        delete_part(part)
        raise DownloadError(f"writing {part} failed ({e.strerror}): the "
                            f"partial file was deleted and nothing was installed. {spec.name} needs "
                            f"{n_expected / 1e9:,.2f} GB (in one file) on that disk: free some space or set "
                            "PICOGPT_WEIGHTS_DIR to another disk, then run the same command again") from None
    if n_have < n_expected:
        raise DownloadError(f"{url}: connection closed after {n_have:,} of {n_expected:,} bytes; "
                            f"the partial file {part} was kept — run the same command again to resume")
    install_verified(part, final, spec, n_expected, progress)
    write_config(folder, spec)
    log(f"{spec.name}: {final} downloaded and verified (sha256 {spec.sha256[:12]}…)")
    return final


def download(name, progress=True, log=print):
    """Download a pretrained GPT-2 by name into weights_dir()/<name>/. Returns the file's path."""
    spec = spec_for(name)
    return download_spec(spec, weights_dir() / name, progress=progress, log=log)
