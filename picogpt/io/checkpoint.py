"""The checkpoint format: Hugging Face `model.safetensors` files, read without pickle or torch.

A safetensors file is
    [8 bytes: header length N, little-endian u64][N bytes: JSON header][raw tensor bytes]
and the header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]},
offsets counted from the start of the raw bytes. We memory-map the file, so a float32
checkpoint (GPT-2 XL is 6.4 GB) is ready at once and its pages are read on first use.
Half-precision tensors (F16, BF16) are widened to float32, the precision we compute in.

Every field is validated before a byte is used, so a truncated or corrupt file gives an
error that names the file and the tensor instead of garbage logits.
"""

import json
import math
import mmap
import os
import secrets
import struct
from pathlib import Path

import numpy as np

from ..errors import CheckpointError

DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}
MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit


def _bf16_to_f32(raw):
    """bfloat16 is the top half of a float32: shift the 16 stored bits into place."""
    return (raw.astype(np.uint32) << 16).view(np.float32)


def open_checkpoint(path):
    """Open a checkpoint for reading, or say why it cannot be read (permissions, a folder...)."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise CheckpointError(f"{path} not found") from None
    except OSError as e:
        hint = ("check its permissions (ls -l; chmod a+r)" if isinstance(e, PermissionError)
                else "check that it is a readable file")
        raise CheckpointError(f"cannot read {path} ({e.strerror or e}): {hint}") from None


def read_raw_header(path):
    """The header as parsed JSON (its __metadata__ included) and where the tensor data starts."""
    path = Path(path)
    with open_checkpoint(path) as f:
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
            header = json.loads(f.read(n_header))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointError(f"{path}: header is not valid JSON ({e})") from None
        except RecursionError:
            raise CheckpointError(f"{path}: header nests too deeply to be a safetensors header "
                                  "(corrupt or not a safetensors file)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: header is not a JSON object")
    return header, 8 + n_header


def read_metadata(path):
    """The header's __metadata__ ({str: str}; {} if it has none)."""
    metadata = read_raw_header(path)[0].get("__metadata__")
    return metadata if isinstance(metadata, dict) else {}


def read_header(path):
    """Parse and validate the header. Returns ({name: (dtype, shape, begin, end)}, data_start)."""
    header, data_start = read_raw_header(path)
    header.pop("__metadata__", None)
    n_data = Path(path).stat().st_size - data_start
    entries = {}
    for name, info in header.items():
        entries[name] = _validate_entry(path, name, info, n_data)
    _validate_no_overlap(path, entries)
    return entries, data_start


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
        raise CheckpointError(f"{path}: tensor '{name}' has a malformed header entry: {str(info)[:200]}")
    if dtype not in DTYPES:
        raise CheckpointError(f"{path}: tensor '{name}' has dtype {dtype[:20]}; "
                              f"picogpt reads {', '.join(DTYPES)}")
    if not begin <= end <= n_data:
        raise CheckpointError(f"{path}: tensor '{name}' has offsets [{begin}, {end}] outside the "
                              f"{n_data:,} bytes of tensor data (truncated file?)")
    expected = math.prod(shape) * DTYPES[dtype].itemsize  # exact: Python integers never overflow
    if end - begin != expected:
        raise CheckpointError(f"{path}: tensor '{name}' holds {end - begin:,} bytes but {dtype} "
                              f"x {shape} needs {expected:,}")
    return dtype, tuple(shape), begin, end


def _validate_no_overlap(path, entries):
    spans = sorted((begin, end, name) for name, (_, _, begin, end) in entries.items() if end > begin)
    for (_, end_a, a), (begin_b, _, b) in zip(spans, spans[1:]):
        if begin_b < end_a:
            raise CheckpointError(f"{path}: tensors '{a}' and '{b}' overlap in the file (corrupt header)")


def read_safetensors(path):
    """Read every tensor as a float32 array: zero-copy views of the mapped file for F32."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} not found")
    entries, data_start = read_header(path)
    with open_checkpoint(path) as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise CheckpointError(f"{path}: empty file")
        buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # stays open via the arrays
    tensors = {}
    for name, (dtype, shape, begin, end) in entries.items():
        count = (end - begin) // DTYPES[dtype].itemsize
        raw = np.frombuffer(buffer, DTYPES[dtype], count, data_start + begin).reshape(shape)
        if dtype == "F32":
            tensors[name] = raw
        elif dtype == "F16":
            tensors[name] = raw.astype(np.float32)
        else:
            tensors[name] = _bf16_to_f32(raw)
    return tensors


def _f32_to_bf16(x):
    """Round float32 to bfloat16 bits, to nearest even (used to write BF16 test files)."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors, dtype="F32", metadata=None):
    """Write {name: array} as a safetensors file, atomically: into a temporary file of a name no
    other writer uses, flushed to disk, then renamed over `path`. So `path` is either absent, the
    old file, or the whole new one; on any failure (a full disk, Ctrl-C) the temporary file is
    deleted and the error raised.

    Tensors are converted and written one at a time, so writing GPT-2 XL (6.4 GB) needs no
    second copy of the weights in memory."""
    path = Path(path)
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
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for array in tensors.values():
                array = np.asarray(array, np.float32)
                raw = _f32_to_bf16(array) if dtype == "BF16" else np.ascontiguousarray(array, DTYPES[dtype])
                f.write(raw.data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
