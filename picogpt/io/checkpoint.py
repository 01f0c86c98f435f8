"""The checkpoint format: Hugging Face `model.safetensors` files, read without pickle or torch.

A safetensors file is
    [8 bytes: header length N, little-endian u64][N bytes: JSON header][raw tensor bytes]
and the header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]},
offsets counted from the start of the raw bytes. We memory-map the file, so a float32
checkpoint (GPT-2 XL is 6.4 GB) is ready at once and its pages are read on first use.
Half-precision tensors (F16, BF16) are widened to float32, the precision we compute in.

Every field is validated before a byte is used, so a truncated or corrupt file gives an
error that names the file and the tensor instead of garbage logits. The header and the bytes
are read from one open file, whose identity (file_identity) the model keeps: a mapped file that
changes later would change the weights under it.
"""

import errno
import json
import math
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import CheckpointError, PicoGPTError, shown
from .atomic import atomic_write
from .files import regular_opener
from .memory import process_rooms, size_text

DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}
MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit
MAX_DIMS = 32  # NumPy 1's limit on an array's dimensions


def _bf16_to_f32(raw):
    """bfloat16 is the top half of a float32: shift the 16 stored bits into place."""
    return (raw.astype(np.uint32) << 16).view(np.float32)


def open_checkpoint(path):
    """Open a checkpoint for reading, or say why it cannot be read (permissions, a folder, a
    FIFO or a device: io/files.py)."""
    try:
        return open(path, "rb", opener=regular_opener(advice="give the path of a model.safetensors file"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} not found") from None
    except OSError as e:
        hint = ("check its permissions (ls -l; chmod a+r)" if isinstance(e, PermissionError)
                else "check that it is a readable file")
        raise CheckpointError(f"cannot read {path} ({e.strerror or e}): {hint}") from None


def no_duplicate_names(pairs):
    """json.loads hook: a JSON object as a dict, refusing a name given twice (json.loads would
    silently keep the last one)."""
    found = {}
    for name, value in pairs:
        if name in found:
            raise DuplicateName(name)
        found[name] = value
    return found


class DuplicateName(ValueError):
    """A name that appears twice in one JSON object of a header."""


def count(n):
    """A count of bytes as error messages show it: exact, or its order of magnitude when a
    hand-made header gives a number too long to print."""
    return f"{n:,}" if n < 10**30 else f"about 2**{n.bit_length() - 1}"


def read_raw_header_from(f, path):
    """The header of the open file f as parsed JSON (its __metadata__ included), and where
    the tensor data starts."""
    size = os.fstat(f.fileno()).st_size
    prefix = f.read(8)
    if len(prefix) < 8:
        raise CheckpointError(f"{path}: file is {size} bytes, too short to be a safetensors file "
                              "(truncated download? delete it and download again)")
    (n_header,) = struct.unpack("<Q", prefix)
    if n_header > MAX_HEADER_BYTES or 8 + n_header > size:
        raise CheckpointError(f"{path}: header length {n_header:,} runs past the end of the "
                              f"{size:,}-byte file (truncated or not a safetensors file)")
    try:
        header = json.loads(f.read(n_header), object_pairs_hook=no_duplicate_names)
    except DuplicateName as e:
        raise CheckpointError(f"{path}: the header names '{shown(e, 80)}' twice; which one is meant "
                              "cannot be told (corrupt or hand-made header)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: header is not valid JSON ({e})") from None
    except RecursionError:
        raise CheckpointError(f"{path}: header nests too deeply to be a safetensors header "
                              "(corrupt or not a safetensors file)") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise CheckpointError(f"{path}: header holds a number picogpt cannot read ({str(e)[:80]})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: header is not a JSON object")
    return header, 8 + n_header


def validated_entries(path, header, data_start, size):
    """{name: (dtype, shape, begin, end)} of a parsed header, every field checked against the
    size of the file."""
    header = dict(header)
    header.pop("__metadata__", None)
    entries = {name: _validate_entry(path, name, info, size - data_start) for name, info in header.items()}
    _validate_no_overlap(path, entries)
    return entries


def read_header(path):
    """Parse and validate the header. Returns ({name: (dtype, shape, begin, end)}, data_start)."""
    with open_checkpoint(path) as f:
        header, data_start = read_raw_header_from(f, Path(path))
        return validated_entries(path, header, data_start, os.fstat(f.fileno()).st_size), data_start


def is_count(v):
    """A whole number >= 0 as JSON gives it (true and false are not counts)."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _validate_entry(path, name, info, n_data):
    try:
        dtype, shape, (begin, end) = info["dtype"], list(info["shape"]), info["data_offsets"]
        ok = isinstance(dtype, str) and all(is_count(v) for v in [*shape, begin, end])
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise CheckpointError(f"{path}: tensor '{shown(name, 80)}' has a malformed header entry: {str(info)[:200]}")
    if len(shape) > MAX_DIMS:
        raise CheckpointError(f"{path}: tensor '{shown(name, 80)}' has {len(shape)} dimensions; picogpt reads "
                              f"at most {MAX_DIMS} (GPT-2's tensors have 1 to 4): corrupt or hand-made header")
    if dtype not in DTYPES:
        raise CheckpointError(f"{path}: tensor '{shown(name, 80)}' has dtype {shown(dtype, 20)}; "
                              f"picogpt reads {', '.join(DTYPES)}")
    if not begin <= end <= n_data:
        raise CheckpointError(f"{path}: tensor '{shown(name, 80)}' has offsets [{count(begin)}, {count(end)}] "
                              f"outside the {n_data:,} bytes of tensor data (truncated file?)")
    expected = math.prod(shape) * DTYPES[dtype].itemsize  # exact: Python integers never overflow
    if end - begin != expected:
        raise CheckpointError(f"{path}: tensor '{shown(name, 80)}' holds {count(end - begin)} bytes but {dtype} "
                              f"x {shown(shape, 80)} needs {count(expected)}")
    return dtype, tuple(shape), begin, end


def _validate_no_overlap(path, entries):
    spans = sorted((begin, end, name) for name, (_, _, begin, end) in entries.items() if end > begin)
    for (_, end_a, a), (begin_b, _, b) in zip(spans, spans[1:]):
        if begin_b < end_a:
            raise CheckpointError(f"{path}: tensors '{shown(a, 80)}' and '{shown(b, 80)}' overlap in the file "
                                  "(corrupt header)")


# ---------------------------------------------------------------------------------------------
# Mapping a checkpoint, and telling whether it changed since
# ---------------------------------------------------------------------------------------------

def file_identity(stat):
    """What changes when a file is rewritten, truncated or replaced: (device, inode, size,
    modification time in ns). Comparing it costs one stat call, a few microseconds."""
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def identity_now(path):
    """file_identity of the file at `path` now, or None if there is none."""
    try:
        return file_identity(os.stat(path))
    except OSError:
        return None


@dataclass(frozen=True)
class MappedCheckpoint:
    """A safetensors file opened once: its validated header, its bytes memory-mapped, and the
    identity of the file that was mapped (header and bytes come from that one file)."""

    path: Path
    entries: dict  # {name: (dtype, shape, begin, end)}
    data_start: int
    buffer: mmap.mmap
    identity: tuple

    def shapes(self):
        """{name: shape} of every tensor, read from the header alone."""
        return {name: shape for name, (_, shape, _, _) in self.entries.items()}

    def widened_bytes(self):
        """Bytes of float32 that the F16 and BF16 tensors take once widened (F32 is mapped as it is)."""
        return sum(4 * math.prod(shape) for dtype, shape, _, _ in self.entries.values() if dtype != "F32")


def mapped_or_refused(f, path, size):
    """The open file f memory-mapped for reading, or one PicoGPTError saying why the OS would
    not map it: a process's address space too small for the file (`ulimit -v`: ENOMEM) is the
    environment's limit, not a fault of the disk or the file."""
    try:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        if e.errno == errno.ENOMEM:
            room = process_rooms().get("ulimit -v")
            left = f"; its ulimit -v leaves {size_text(max(room, 0))}" if room is not None else ""
            raise PicoGPTError(f"cannot map {path} ({size_text(size)}) into this process's address space "
                               f"({e.strerror}{left}): raise `ulimit -v`, or load a smaller model") from None
        raise PicoGPTError(f"cannot map {path} into memory ({e.strerror or e}): picogpt reads a checkpoint by "
                           "mapping it; copy it to a local disk") from None


def map_checkpoint(path):
    """Open a safetensors file, validate its header and memory-map it; no tensor is read yet."""
    path = Path(path)
    with open_checkpoint(path) as f:
        stat = os.fstat(f.fileno())
        header, data_start = read_raw_header_from(f, path)
        entries = validated_entries(path, header, data_start, stat.st_size)
        buffer = mapped_or_refused(f, path, stat.st_size)  # stays open via the arrays
    return MappedCheckpoint(path, entries, data_start, buffer, file_identity(stat))


def tensors_of(mapped):
    """Every tensor as a float32 array: zero-copy views of the mapped file for F32, widened
    copies for F16 and BF16."""
    tensors = {}
    for name, (dtype, shape, begin, end) in mapped.entries.items():
        n_items = (end - begin) // DTYPES[dtype].itemsize
        raw = np.frombuffer(mapped.buffer, DTYPES[dtype], n_items, mapped.data_start + begin).reshape(shape)
        if dtype == "F32":
            tensors[name] = raw
        elif dtype == "F16":
            tensors[name] = raw.astype(np.float32)
        else:
            tensors[name] = _bf16_to_f32(raw)
    return tensors


def read_safetensors(path):
    """Read every tensor as a float32 array: zero-copy views of the mapped file for F32."""
    return tensors_of(map_checkpoint(path))


def _f32_to_bf16(x):
    """Round float32 to bfloat16 bits, to nearest even (used to write BF16 test files)."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors, dtype="F32", metadata=None, progress=False):
    """Write {name: array} as a safetensors file, atomically (io/atomic.py): `path` is either
    absent, the old file, or the whole new one; on any failure (a full disk, Ctrl-C, SIGTERM)
    the temporary file is deleted.

    Tensors are converted and written one at a time, so writing GPT-2 XL (6.4 GB) needs no
    second copy of the weights in memory. progress=True draws a progress bar (tqdm) in bytes."""
    from tqdm.auto import tqdm

    itemsize = 2 if dtype == "BF16" else DTYPES[dtype].itemsize
    header, offset = {}, 0
    for name, array in tensors.items():
        shape = list(np.shape(array))
        n_bytes = int(np.prod(shape, dtype=np.int64)) * itemsize
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n_bytes]}
        offset += n_bytes
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # pad so tensor data starts 8-byte aligned
    with atomic_write(path) as f, tqdm(total=offset, unit="B", unit_scale=True, unit_divisor=1000,
                                       desc=Path(path).name, disable=not progress, dynamic_ncols=True) as bar:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for array in tensors.values():
            array = np.asarray(array, np.float32)
            raw = _f32_to_bf16(array) if dtype == "BF16" else np.ascontiguousarray(array, DTYPES[dtype])
            f.write(raw.data)
            bar.update(raw.nbytes)
