"""Small shared helpers for the tests: random GPT-2s (the one `random_gpt2`), checkpoints of
them on disk, paths to the fixtures, and a file on a disk filling up."""

import json
import os
from pathlib import Path

import numpy as np

from picogpt.gpt2 import GPT2Config
from picogpt.io.checkpoint import write_safetensors
from picogpt.io.params import expected_shapes, params_from_tensors
from picogpt.model import GPT2
from picogpt.speculative import ChainDraft

FIXTURES = Path(__file__).parent / "fixtures"
PARITY = FIXTURES / "parity"


def random_tensors(config, seed=0):
    """Every tensor a checkpoint of `config` needs, bare names, random float32 values."""
    rng = np.random.default_rng(seed)
    return {name: (rng.standard_normal(shape) * 0.3).astype(np.float32)
            for name, shape in expected_shapes(config).items()}


def peaked_tensors(config, seed):
    """random_tensors with LayerNorm gains of 1 (not ~N(0, 0.3)): peaked next-token
    distributions, so that two seeds give a draft and target that clearly differ."""
    tensors = random_tensors(config, seed)
    for name in tensors:
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            tensors[name] = np.ones_like(tensors[name])
    return tensors


def random_gpt2(seed=0, n_layer=1, n_head=2, n_embd=16, n_ctx=32, n_vocab=8, peaked=True):
    """A random GPT-2 named random-<seed>. The defaults are the sampling tests' model: one
    layer, 8 tokens (small enough to enumerate every sequence), peaked distributions; pass
    peaked=False for LayerNorm gains as random as every other weight."""
    config = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_ctx=n_ctx, n_vocab=n_vocab)
    tensors = peaked_tensors(config, seed) if peaked else random_tensors(config, seed)
    return GPT2(params_from_tensors(tensors, config), config, f"random-{seed}")


def write_random_checkpoint(folder, seed, **sizes):
    """A model folder (model.safetensors + config.json) of random_gpt2(seed, **sizes) that
    `picogpt.load(folder)` reads."""
    c = random_gpt2(seed, **sizes).config
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / "model.safetensors", peaked_tensors(c, seed))
    (folder / "config.json").write_text(json.dumps(dict(
        n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd, n_positions=c.n_ctx, vocab_size=c.n_vocab)))
    return folder


class FillingFile:
    """A file whose writes fail with `error` once `room` bytes are written (a disk filling up)."""

    def __init__(self, f, room, error):
        self.f, self.room, self.error = f, room, error

    def write(self, data):
        if self.room < len(data):
            raise OSError(self.error, os.strerror(self.error))
        self.room -= len(data)
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


class NoDrafts(ChainDraft):
    """A draft that never finds anything to propose (a prompt lookup on text that never repeats)."""
    name = "no drafts"

    def __init__(self, n_vocab):
        self.n_vocab = n_vocab

    def propose(self, sequence, K, controls, rng):
        return [], np.zeros((0, self.n_vocab))
