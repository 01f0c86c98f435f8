"""Model names and where their checkpoints live.

`picogpt.load(x)` (model.py) takes a model name ("gpt2", "gpt2-xl", "tiny-draft", ...), a folder holding
`model.safetensors` (+ `config.json`), or the path of a `.safetensors` file.

Downloaded checkpoints live in `$PICOGPT_WEIGHTS_DIR/<name>/` when that variable is set, else
in `weights/<name>/` of the source checkout picogpt runs from (`pip install -e .`), else, for an
installed wheel, in the user's cache folder (`~/.cache/picogpt/weights`, or under
$XDG_CACHE_HOME). A published GPT-2 that is not there is looked for in the user's Hugging Face
cache, and used in place once its size and sha256 match the pins (io/hf_cache.py). The embedded
teaching pair ships inside the package (`picogpt/io/data/`), so any install runs the course
offline; a `tiny-draft/` or `tiny-target/` in the weights folder takes its place (a retrained pair).
"""

import os
import sys
from pathlib import Path

from ..errors import CheckpointError, PicoGPTError, shown
from .hf_cache import RECORD, verified_copy
from .params import PRETRAINED, hf_config  # PRETRAINED: the published GPT-2 shapes
from .pins import PINNED, published_weights_bytes  # noqa: F401  (the size the documents quote)

SOURCE_TREE = Path(__file__).resolve().parents[2]  # the repository, when run from a checkout
REPO_WEIGHTS = SOURCE_TREE / "weights"
EMBEDDED_DIR = Path(__file__).resolve().parent / "data"  # the teaching pair, package data

EMBEDDED = ("tiny-draft", "tiny-target")  # the teaching pair, committed in weights/


def published_config(name):
    """The Hugging Face config.json dict of the published checkpoint `name`."""
    shape = PRETRAINED[name]
    return hf_config(n_layer=shape["n_layer"], n_head=shape["n_head"], n_embd=shape["n_embd"])


def weights_dir():
    """Where downloads go: $PICOGPT_WEIGHTS_DIR, else the source checkout's weights/ folder,
    else the user's cache folder (an installed wheel has no repository to write into)."""
    chosen = os.environ.get("PICOGPT_WEIGHTS_DIR")
    if chosen:
        return Path(chosen)
    return REPO_WEIGHTS if in_source_checkout() else user_cache_dir("weights", "PICOGPT_WEIGHTS_DIR")


def in_source_checkout():
    """Whether picogpt runs from its repository (pip install -e .), not from an installed wheel."""
    return (SOURCE_TREE / "pyproject.toml").is_file() and (SOURCE_TREE / "picogpt").is_dir()


def user_cache_dir(what, variable):
    """picogpt's folder `what` in the user's cache ($XDG_CACHE_HOME, else ~/.cache); without a
    home folder, an error naming `variable`, which chooses the folder instead."""
    cache = os.environ.get("XDG_CACHE_HOME")
    if not cache:
        try:
            cache = Path.home() / ".cache"
        except RuntimeError:  # no $HOME and no user entry to find it from (some containers)
            raise PicoGPTError(f"cannot tell where to keep picogpt's {what}: $HOME is not set; set "
                               f"{variable} to a folder you can write to") from None
    return Path(cache) / "picogpt" / what


def model_names():
    return [*PRETRAINED, *EMBEDDED]


def own_checkpoint(name):
    """Where picogpt keeps the checkpoint `name` in its own weights folder (it may not exist)."""
    return weights_dir() / name / "model.safetensors"


def say(text):
    print(f"picogpt: {text}", file=sys.stderr, flush=True)


def hub_copy(name):
    """((path, identity) of the Hugging Face cache's copy of the published `name` whose size
    and sha256 are pinned, or None; [the files there that are not, with why]): io/hf_cache.py."""
    return verified_copy(PINNED[name], weights_dir() / name / RECORD, say)


def checkpoint_path(name):
    """The model.safetensors a model name refers to (it may not exist yet): a published GPT-2
    in picogpt's weights folder, else its verified copy in the Hugging Face cache."""
    if name in EMBEDDED:
        retrained = own_checkpoint(name)
        return retrained if retrained.exists() else EMBEDDED_DIR / name / "model.safetensors"
    return located(name)[0]


def located(name):
    """(checkpoint_path(name), the identity its file must have when mapped, or None): a copy in
    the Hugging Face cache is the file verified only while its identity is the one verified
    (hf_cache.verified_copy), so the loader compares it with the file it maps."""
    if name in EMBEDDED:
        return checkpoint_path(name), None
    own = own_checkpoint(name)
    if own.exists() or name not in PINNED:
        return own, None
    return hub_copy(name)[0] or (own, None)


def unused_copies(rejected):
    """What an error says of the files in the Hugging Face cache that were not used ('' if none)."""
    if not rejected:
        return ""
    path, reason = rejected[0]
    more = f" (and {len(rejected) - 1} more there)" if len(rejected) > 1 else ""
    return f"; {not_used(path, reason)}{more}"


def not_used(path, reason):
    """Why a file in the Hugging Face cache was not used, in words (errors, download's log)."""
    return f"{shown(path)} in the Hugging Face cache does not match the pinned file, so it was not used: {reason}"


def in_hub_cache(name, path):
    """Whether `path`, found for the published name `name`, is its copy in the Hugging Face cache."""
    return name in PINNED and Path(path).absolute() != own_checkpoint(name).absolute()


def pinned_config(name, path):
    """The pinned hyperparameters (a config.json dict) of `name` where its checkpoint `path` is a
    copy in the Hugging Face cache, in which only the file is verified, not the config.json
    beside it; else None: the config.json beside the checkpoint, as for any folder."""
    return PINNED[name].config() if in_hub_cache(name, path) else None


def source_of(name, path):
    """Where the weights of the model `name` (None: a path) loaded from `path` came from, in words."""
    path = Path(path).absolute()
    if path.is_relative_to(EMBEDDED_DIR):
        return "shipped inside picogpt (the teaching pair)"
    if in_hub_cache(name, path):
        spec = PINNED[name]
        return (f"the Hugging Face cache, read in place (size and sha256 match {spec.repo} "
                f"at the pinned revision {spec.revision[:7]})")
    if name in PINNED:
        return "picogpt's weights folder (python -m picogpt download checked its size and sha256)"
    if name in EMBEDDED:
        return "picogpt's weights folder (a retrained teaching pair)"
    return "the file named (not checked against a pinned file)"


def is_available(name):
    return checkpoint_path(name).exists()


def resolve(name_or_path):
    """Turn a model name or a path into (the path of a model.safetensors file, the identity
    its file must have when mapped or None: located), or explain."""
    text = str(name_or_path)
    if text in model_names():
        path, identity = located(text)
        if not path.exists():
            hint = (f"run: python -m picogpt download {text}  (or: make weights)"
                    if text in PRETRAINED else "it ships inside the package: reinstall picogpt-speculative "
                    "(from a checkout: git checkout picogpt/io/data/ && pip install -e .)")
            unused = unused_copies(hub_copy(text)[1]) if text in PINNED else ""
            raise CheckpointError(f"{path} not found — {hint}{unused}")
        return path, identity
    path = Path(text).expanduser()
    if path.is_dir():
        path = path / "model.safetensors"
        if not path.exists():
            raise CheckpointError(f"{path} not found: a model folder must hold model.safetensors")
        return path, None
    if path.suffix == ".safetensors" or path.exists():
        if not path.exists():
            raise CheckpointError(f"{path} not found")
        return path, None
    raise PicoGPTError(f"unknown model '{text}': use one of {', '.join(model_names())}, "
                       "or the path of a folder or .safetensors file")
