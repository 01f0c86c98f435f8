"""The published GPT-2 checkpoints picogpt uses, pinned: the Hugging Face repository each lives
in (served by the hub, or the mirror $HF_ENDPOINT names), the revision (a git commit of that
repository, so the bytes can never change), their sha256 and, where a public record gives it,
their size. A file from anywhere (a download: io/download.py; the Hugging Face cache a user
already has: io/hf_cache.py) is used only once its size and sha256 are the pinned ones
(`sha256_of` hashes it).
"""

import hashlib
import math
import os
import urllib.parse
from dataclasses import dataclass

from ..errors import DownloadError
from ..gpt2 import GPT2Config
from .params import N_CTX, N_VOCAB, PRETRAINED, expected_shapes, hf_config

DEFAULT_ENDPOINT = "https://huggingface.co"
CHUNK_BYTES = 1 << 20  # read and hash 1 MiB at a time


@dataclass(frozen=True)
class WeightSpec:
    """One published checkpoint: where it lives, what it must hash to, and its config."""

    name: str
    repo: str  # Hugging Face repository, e.g. "openai-community/gpt2"
    revision: str  # a commit of that repository: pinned, so the bytes never change
    sha256: str
    n_bytes: int | None  # None where no public record gives the exact size: n_bytes_bounds then
    n_layer: int
    n_head: int
    n_embd: int
    filename: str = "model.safetensors"
    n_bytes_bounds: tuple[int, int] | None = None  # (fewest, most) bytes the file can have, without n_bytes

    def size_problem(self, n_bytes):
        """Why a file of n_bytes cannot be this checkpoint, or None: refused before a byte is
        hashed (a 300 GB sparse file, or /proc/self/pagemap, which says it has 0)."""
        if self.n_bytes is not None and n_bytes != self.n_bytes:
            return f"{n_bytes:,} bytes, where {self.name}'s file has {self.n_bytes:,}"
        low, high = self.n_bytes_bounds or (0, math.inf)
        if not low <= n_bytes <= high:
            return f"{n_bytes:,} bytes, where {self.name}'s file has {low:,} to {high:,}"
        return None

    def url(self):
        """The download URL, under $HF_ENDPOINT (read at call time, so tests can redirect it)."""
        return f"{endpoint()}/{self.repo}/resolve/{self.revision}/{self.filename}"

    def config(self):
        """The Hugging Face config.json keys picogpt reads (see params.config_from_json)."""
        return {**hf_config(self.n_layer, self.n_head, self.n_embd), "activation_function": "gelu_new",
                "_source": f"https://huggingface.co/{self.repo}/tree/{self.revision}"}


# Pinned revisions and sha256 of openai-community/<name>/model.safetensors (public hub metadata;
# sizes where a public record gives them exactly: the hub's file listing, "lfs": {"size": ...}).
# Hyperparameters come from params.PRETRAINED.
PINNED_FILES = {
    "gpt2": ("607a30d783dfa663caf39e06633721c8d4cfcd7e",
             "248dfc3911869ec493c76e65bf2fcf7f615828b0254c12b473182f0f81d3a707", 548_105_171),
    "gpt2-medium": ("6dcaa7a952f72f9298047fd5137cd6e4f05f41da",
                    "fc5a354a19255ad494f3d71549390baca1ccf61d1d822b9408971705c687c9cd", 1_519_984_962),
    "gpt2-large": ("32b71b12589c2f8d625668d2335a01cac3249519",
                   "5f47f3e12f91cd33b662ce7e433b6150ad5512b5884a2cee961b50e9c3bbebce", None),
    "gpt2-xl": ("15ea56dee5df4983c59b2538573817e1667135e2",
                "0f8b28eb05a8075f48b61b6f35332978c74fc7763fa9fb4051a1c30511736a6a", None),
}
MAX_HEADER_BYTES = 1 << 20  # GPT-2's safetensors headers: 14,283 bytes (small), 28,986 (medium)


def published_weights_bytes(name):
    """Bytes of the published checkpoint `name`'s weights in float32 (every parameter, 4 bytes):
    what memory holds and what decoding reads for every token. The one source of the size the
    documents quote (tests/test_repository.py checks them); the downloaded file is somewhat larger,
    as Hugging Face's also stores each layer's attention mask, which picogpt does not load."""
    shape = PRETRAINED[name]
    config = GPT2Config(n_layer=shape["n_layer"], n_head=shape["n_head"], n_embd=shape["n_embd"], n_ctx=N_CTX,
                        n_vocab=N_VOCAB)
    return 4 * sum(math.prod(size) for size in expected_shapes(config).values())


def published_size_bounds(name):
    """(fewest, most) bytes the published model.safetensors of `name` can have, where no exact
    size is pinned: at least its float32 weights; at most those, every layer's float32 attention
    mask [n_ctx, n_ctx] (the hub's files hold them: gpt2's and gpt2-medium's pinned sizes are
    exactly weights + masks + header) and a header of MAX_HEADER_BYTES. The hub's file pages
    round the two unpinned files to 3.25 GB (gpt2-large) and 6.43 GB (gpt2-xl), inside these."""
    masks = 4 * PRETRAINED[name]["n_layer"] * N_CTX * N_CTX
    weights = published_weights_bytes(name)
    return weights + 8, weights + masks + 8 + MAX_HEADER_BYTES


PINNED = {
    name: WeightSpec(name=name, repo=f"openai-community/{name}", revision=revision, sha256=sha256,
                     n_bytes=n_bytes, n_layer=PRETRAINED[name]["n_layer"],
                     n_head=PRETRAINED[name]["n_head"], n_embd=PRETRAINED[name]["n_embd"],
                     n_bytes_bounds=None if n_bytes else published_size_bounds(name))
    for name, (revision, sha256, n_bytes) in PINNED_FILES.items()
}


def url_problem(text):
    """What is wrong with `text` as the address of a server (None if nothing): it must be an
    http(s) URL with a host, a numeric port if any, and no spaces or control characters."""
    if not text.isprintable() or any(c.isspace() for c in text):
        return "it holds spaces, line breaks or control characters"
    try:
        parts = urllib.parse.urlsplit(text)
        _ = parts.port  # raises ValueError for a port that is not a number from 0 to 65535
    except ValueError as e:
        return str(e)
    if parts.scheme not in ("http", "https"):
        return "expected it to start with http:// or https://"
    if not parts.hostname:
        return "it names no host"
    return None


def endpoint():
    """The server to download from: $HF_ENDPOINT if set and not empty, else the Hugging Face
    hub. A value that is not a usable URL is refused before any request."""
    text = os.environ.get("HF_ENDPOINT", "")
    if not text:
        return DEFAULT_ENDPOINT
    problem = url_problem(text)
    if problem:
        raise DownloadError(f"HF_ENDPOINT={text[:200]!r} is not a usable server address ({problem}): set it "
                            f"to a mirror's URL, e.g. https://hf-mirror.com, or unset it to download from {DEFAULT_ENDPOINT}")
    return text.rstrip("/")


def sha256_of(f, label=None):
    """The sha256 of the open file f from its start, hashed in chunks (a 6 GB checkpoint never
    sits in memory); with a label, a progress bar (tqdm) says what is being checked."""
    from tqdm.auto import tqdm

    hasher = hashlib.sha256()
    with tqdm(total=os.fstat(f.fileno()).st_size, unit="B", unit_scale=True, unit_divisor=1024, desc=label,
              disable=label is None, dynamic_ncols=True) as bar:
        while chunk := f.read(CHUNK_BYTES):
            hasher.update(chunk)
            bar.update(len(chunk))
    return hasher.hexdigest()
