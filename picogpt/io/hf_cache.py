"""The GPT-2 a user already has: the Hugging Face hub's cache, read and never written.

Whoever has run transformers' `from_pretrained("gpt2")` (or huggingface_hub's `hf_hub_download`)
has GPT-2's model.safetensors in the hub's cache folder: $HF_HUB_CACHE, else $HF_HOME/hub, else
$XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. Its layout is huggingface_hub's:

    models--openai-community--gpt2/       named after the name asked for: models--gpt2 for "gpt2"
        refs/main                         the commit `main` named when the files were fetched
        snapshots/<commit>/model.safetensors -> ../../blobs/<sha256>   (a copy where links are not allowed)
        blobs/<sha256>                    the bytes

picogpt uses such a file instead of downloading one only if its size and sha256 are the pinned
ones (io/pins.py), as a download is checked; the pinned revision's snapshot is looked at first,
then the others (the same bytes under another commit are the same file). A file of a size the
checkpoint cannot have is refused from its size, never read. Only model.safetensors is verified,
so the hyperparameters are the pinned ones, not the snapshot's config.json; and as the cache may
be written while picogpt reads it, the loader compares the file it maps with the one verified
(model.load).

Hashing GPT-2 XL's checkpoint takes a while, so a verdict is remembered: `<name>/hf-cache.json` in
picogpt's weights folder (registry.record_file), written atomically, holds for each file hashed
its path in the cache, the identity of the file the path led to (device, inode, size and
modification time, following the link: checkpoint.file_identity) and the sha256 it had. A later
look trusts the verdict while that identity is unchanged (one stat) and hashes again otherwise;
where the weights folder cannot be written, every look hashes. Nothing in the cache is opened
for writing, created, locked or deleted, and a FIFO or a device there is passed over, not read.
"""

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import NamedTuple

from ..errors import PicoGPTError, shown
from .atomic import write_text_atomically
from .checkpoint import file_identity
from .files import read_small_text, regular_opener
from .memory import size_text
from .pins import sha256_of

RECORD = "hf-cache.json"
MAX_RECORD_BYTES = 1 << 20


CACHE_VARIABLES = {"HF_HUB_CACHE": (), "HF_HOME": ("hub",), "XDG_CACHE_HOME": ("huggingface", "hub")}


def hub_cache_dir():
    """The hub's cache folder, as huggingface_hub finds it: the first of CACHE_VARIABLES set
    (None without one and without a home folder). A `~user` that names no user on this system
    is one PicoGPTError naming the variable."""
    for variable, below in CACHE_VARIABLES.items():
        if os.environ.get(variable):
            return expanded(variable).joinpath(*below)
    try:
        return Path.home() / ".cache" / "huggingface" / "hub"
    except RuntimeError:  # no $HOME and no user entry: no cache to look in
        return None


def check_cache_variables():
    """Each of CACHE_VARIABLES that is set expands to a folder, or one PicoGPTError (the command
    line checks them before it prints anything)."""
    for variable in CACHE_VARIABLES:
        if os.environ.get(variable):
            expanded(variable)


def expanded(variable):
    """The folder $variable names, its leading `~` or `~user` expanded."""
    text = os.environ[variable]
    try:
        return Path(text).expanduser()
    except RuntimeError:  # ~nosuchuser, or ~ without $HOME and without a user entry
        raise PicoGPTError(f"{variable}={shown(text, 200)!r} starts with a home folder this system cannot find "
                           f"({shown(text.split('/')[0], 40)}): set {variable} to a folder's full path, or unset "
                           "it") from None


def snapshot_files(spec):
    """spec's file in every snapshot of its repository in the cache, under either name the user
    may have asked for (models--gpt2, models--openai-community--gpt2): the pinned revision's
    first, then the others by name."""
    cache = hub_cache_dir()
    if cache is None:
        return
    for folder in dict.fromkeys((f"models--{spec.name}", "models--" + spec.repo.replace("/", "--"))):
        try:
            revisions = sorted(os.listdir(cache / folder / "snapshots"), key=lambda r: (r != spec.revision, r))
        except OSError:  # no such repository in the cache, or one we may not read
            continue
        for revision in revisions:
            yield (cache / folder / "snapshots" / revision / spec.filename).absolute()


def identity_of_regular_file(path):
    """file_identity of the regular file `path` leads to (links followed), or None: nothing
    there, a dangling link, a folder, a FIFO, a device."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return file_identity(info) if stat.S_ISREG(info.st_mode) else None


def read_record(path):
    """{cache path: {"identity": [...], "sha256": ...}} remembered in `path` ({} if none or unreadable)."""
    try:
        record = json.loads(read_small_text(path, MAX_RECORD_BYTES))
    except (OSError, ValueError, RecursionError, PicoGPTError):  # absent, unreadable, not JSON, nested too deeply: hash again
        return {}
    return record if isinstance(record, dict) else {}


def remember(path, record):
    """Write the record atomically; a weights folder that cannot be written just remembers nothing."""
    with contextlib.suppress(OSError, PicoGPTError):
        os.makedirs(path.parent, exist_ok=True)
        write_text_atomically(path, json.dumps(record, indent=1) + "\n")


def sha256_now(path, spec, log):
    """(identity, sha256) of the regular file at `path`, hashed as it is open (the file hashed is
    the file identified); None if it is no regular file by the time it is opened; (identity,
    None) if the open file's size cannot be spec's (checked again: the path may lead elsewhere
    now), which is not read."""
    try:
        with open(path, "rb", opener=regular_opener()) as f:
            identity = file_identity(os.fstat(f.fileno()))
            if spec.size_problem(identity[2]):
                return identity, None
            log(f"{spec.name}: checking {shown(path)} in the Hugging Face cache against the pinned sha256 "
                f"({size_text(identity[2])}; once: the verdict is remembered)")
            return identity, sha256_of(f, f"{spec.name} sha256")
    except (OSError, PicoGPTError):
        return None


class Rejected(NamedTuple):
    """A file in the cache that is not spec's, and why."""

    path: Path
    reason: str


def verified_copy(spec, record_file, log):
    """(the first file in the cache whose size and sha256 are spec's, as (path, identity), or
    None; [the files there that are not, each a Rejected]). The identity is the verified file's
    (checkpoint.file_identity): whoever maps the path compares it with the file mapped, as a
    link in the cache can be re-pointed in between. A file whose identity matches a verdict
    remembered in `record_file` is not hashed again; a file of a size spec's cannot have is
    never read; `log(text)` says when one is hashed."""
    record, rejected = read_record(record_file), []
    for path in snapshot_files(spec):
        identity = identity_of_regular_file(path)
        if identity is None:
            continue
        problem = spec.size_problem(identity[2])
        if problem:  # the size tells without a hash
            rejected.append(Rejected(path, f"it has {problem}"))
            continue
        seen = record.get(str(path))
        if not isinstance(seen, dict) or seen.get("identity") != list(identity):
            hashed = sha256_now(path, spec, log)
            if hashed is None:
                continue
            identity, digest = hashed
            if digest is None:
                rejected.append(Rejected(path, f"it has {spec.size_problem(identity[2])}"))
                continue
            seen = record[str(path)] = {"identity": list(identity), "sha256": digest}
            remember(record_file, record)
        if seen.get("sha256") != spec.sha256:
            rejected.append(Rejected(path, f"its sha256 is {shown(seen.get('sha256'), 64)}, not the pinned one"))
        elif identity_of_regular_file(path) != tuple(identity):
            rejected.append(Rejected(path, "it changed while it was being checked"))
        else:
            return (path, tuple(identity)), rejected
    return None, rejected
