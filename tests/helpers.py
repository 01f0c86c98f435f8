"""Small shared helpers for the tests: random GPT-2 tensors and paths to the fixtures."""

from pathlib import Path

import numpy as np

from picogpt.gpt2 import GPT2Config
from picogpt.io.params import expected_shapes, params_from_tensors
from picogpt.model import GPT2

FIXTURES = Path(__file__).parent / "fixtures"
PARITY = FIXTURES / "parity"


def random_tensors(config, seed=0):
    """Every tensor a checkpoint of `config` needs, bare names, random float32 values."""
    rng = np.random.default_rng(seed)
    return {name: (rng.standard_normal(shape) * 0.3).astype(np.float32)
            for name, shape in expected_shapes(config).items()}


def random_gpt2(n_layer=2, n_head=2, n_embd=32, n_ctx=300, n_vocab=97, seed=0):
    config = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_ctx=n_ctx, n_vocab=n_vocab)
    return GPT2(params_from_tensors(random_tensors(config, seed), config), config, "random")
