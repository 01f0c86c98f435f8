"""Checkpoints to time: the real ones when downloaded, else random weights of the published shapes
(the speed of a matrix product does not depend on the values)."""

import json
import os
import shutil
import sys
import zlib
from pathlib import Path

import numpy as np

from ..errors import PicoGPTError, shown
from ..io.atomic import atomic_folder, write_text_atomically
from ..io.checkpoint import write_safetensors
from ..io.params import config_from_json, expected_shapes
from ..io.registry import (
    EMBEDDED,
    PRETRAINED,
    checkpoint_path,
    is_available,
    published_config,
    published_weights_bytes,
    weights_dir,
)
from ..model import checked_checkpoint

REPO = Path(__file__).resolve().parents[2]


def shown_path(path):
    """A path as the results record it: relative to the repository when inside it (no machine
    paths in committed files; a weights folder that links elsewhere is named as inside), else as given."""
    for where in (Path(os.path.abspath(path)), Path(path).resolve()):
        if where.is_relative_to(REPO):
            return str(where.relative_to(REPO))
    return str(path)


class RandomTensor:
    """A tensor generated only when written (so writing XL holds one tensor at a time):
    GPT-2's initialisation scale, layer norms at weight 1 and bias 0."""

    def __init__(self, name, shape):
        self.name, self.shape = name, shape

    def __array__(self, dtype=None, copy=None):
        if self.name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            return np.ones(self.shape, np.float32)
        if self.name.endswith("bias"):
            return np.zeros(self.shape, np.float32)
        rng = np.random.default_rng(zlib.crc32(self.name.encode()))
        return rng.standard_normal(self.shape, np.float32) * np.float32(0.02)


def random_checkpoint(name, folder=None, config=None):
    """weights/random-<name>/model.safetensors: random F32 weights with the bare Hugging Face
    names and exact shapes of the published checkpoint `name` (or of the Hugging Face `config`
    dict given), + config.json. Made once, then reused: it says how many GB it writes and
    where, and shows its progress. The folder is built beside its place and renamed into it once
    whole (io/atomic.py's atomic_folder), so a full disk, Ctrl-C or SIGTERM leaves no half folder."""
    folder = Path(folder or random_folder(name))
    path = folder / "model.safetensors"
    if path.exists() and (folder / "config.json").exists():
        return path
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with atomic_folder(folder) as building:
            write_text_atomically(building / "config.json", json.dumps(config or published_config(name), indent=2))
            shapes = expected_shapes(config_from_json(building / "config.json"))
            n_bytes = 4 * sum(int(np.prod(shape)) for shape in shapes.values())
            if shutil.disk_usage(building).free < n_bytes:
                raise PicoGPTError(f"bench: random-weight {name} needs {n_bytes / 1e9:.2f} GB in {shown(folder.parent)} and "
                                   f"only {shutil.disk_usage(building).free / 1e9:.2f} GB is free: free some space, set "
                                   "PICOGPT_WEIGHTS_DIR to another disk, or bench fewer --models")
            print(f"writing random-weight {name} ({n_bytes / 1e9:.2f} GB) to {shown(folder)} (once)", file=sys.stderr,
                  flush=True)
            write_safetensors(building / "model.safetensors", {n: RandomTensor(n, shape) for n, shape in shapes.items()},
                              metadata={"picogpt": f"random weights with the shapes of {name}"}, progress=True)
    except OSError as e:
        raise PicoGPTError(f"bench: could not write random-weight {name} to {shown(folder)} ({e.strerror or e}); "
                           "nothing partial was left there: free some space, set "
                           "PICOGPT_WEIGHTS_DIR to a writable disk, or bench fewer --models") from None
    return path


def given_checkpoint(name):
    """The checkpoint a --models entry that is no model name points to (a folder holding
    model.safetensors, or the file), checked as loading it checks it (a regular file, its header,
    its config.json, the memory it takes) without reading a tensor."""
    path = Path(name)
    path = path / "model.safetensors" if path.is_dir() else path
    if not path.exists():
        raise PicoGPTError(f"bench: no model named '{shown(name, 200)}' and no such checkpoint "
                           f"(use {', '.join([*PRETRAINED, *EMBEDDED])} or a path)")
    checked_checkpoint(path)
    return path


def given_checkpoints(names):
    """{name: checkpoint} for every --models entry that is no model name, each checked
    (given_checkpoint): what the bench checks before it says what it will write or measures."""
    return {name: given_checkpoint(name) for name in names if name not in (*PRETRAINED, *EMBEDDED)}


def random_folder(name):
    return weights_dir() / f"random-{name}"


def random_to_write(names):
    """[(folder, bytes)] of the random-weight checkpoints a bench of `names` writes before it
    measures: each published GPT-2 neither downloaded nor written as random weights already."""
    return [(random_folder(name), published_weights_bytes(name)) for name in names
            if name in PRETRAINED and not is_available(name)
            and not all((random_folder(name) / file).exists() for file in ("model.safetensors", "config.json"))]


def resolve_models(names):
    """{label: (path, source)} for names (gpt2, gpt2-xl, tiny-draft, tiny-target) or paths.
    Published names fall back to random weights; missing embedded models are skipped. Every
    path is checked before a random-weight checkpoint is written (and so before anything is
    measured). A label is the folder's name as printed (errors.shown: no escape sequence from a
    folder's name reaches the terminal)."""
    given = given_checkpoints(names)
    models, notes = {}, []
    for name in names:
        if name in PRETRAINED:
            if is_available(name):
                models[name] = (checkpoint_path(name), "real")
            else:
                models[name] = (random_checkpoint(name), "random weights, published shapes")
        elif name in EMBEDDED:
            if is_available(name):
                models[name] = (checkpoint_path(name), "embedded")
            else:
                notes.append(f"{name}: not in weights/ yet, skipped")
        else:
            models[shown(given[name].parent.name)] = (given[name], "file")
    return models, notes
