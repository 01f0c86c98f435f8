"""fast/block.py's forward pass (the work between products compiled) computes what gpt2.py
computes, and the fast path takes it exactly for a few positions with a KV cache."""

import numpy as np
import pytest

from helpers import random_gpt2
from picogpt.gpt2 import gpt2
from picogpt.kv_cache import KVCache
from picogpt.fast import compiled, kernels

pytestmark = pytest.mark.skipif(compiled.compile_kernels() is None, reason="numba is not installed")


def relative_diff(got, reference):
    return float(np.abs(got - reference).max() / np.abs(reference).max())


@pytest.fixture(scope="module")
def model():
    return random_gpt2(7, n_layer=3, n_head=4, n_embd=64, n_ctx=160, n_vocab=300, peaked=False)


@pytest.mark.parametrize("read_only", [False, True])
def test_the_compiled_block_equals_gpt2_py_call_after_call(model, read_only):
    """Prompt, decodes, K + 1 scorings and a roll-back, past the cache's first capacity (64)."""
    params = model.params
    if read_only:  # as memory-mapped from a checkpoint
        for array in model.arrays:
            array.flags.writeable = False
    block = compiled.compile_kernels()["block"]
    ids = np.random.default_rng(8).integers(0, 300, size=150)
    fast, plain = model.new_cache(), model.new_cache()
    gpt2(ids[:20], params, model.config, fast), gpt2(ids[:20], params, model.config, plain)
    start = 20
    for n_new in (1, 1, 5, 9, 16, 2, 1, 13, 16, 16, 16, 5, 9):
        chunk = ids[start:start + n_new]
        got = block.gpt2_cached(chunk, params, model.config, fast, np.matmul)
        reference = gpt2(chunk, params, model.config, plain)
        assert got.shape == reference.shape == (n_new, 300)
        assert relative_diff(got, reference) < 1e-5, f"{n_new} positions after {start}"
        start += n_new
        if n_new == 13:  # a rejection: both roll back
            fast.truncate(start - 6), plain.truncate(start - 6)
            start -= 6
    assert len(fast) == len(plain) == start
    assert np.allclose(fast.k[:, :, :start], plain.k[:, :, :start], rtol=1e-5, atol=1e-6)
    assert np.allclose(fast.v[:, :, :start], plain.v[:, :, :start], rtol=1e-5, atol=1e-6)
    for array in model.arrays:
        array.flags.writeable = True


def test_the_fast_path_takes_the_block_for_a_few_positions_with_a_cache(monkeypatch):
    block = compiled.compile_kernels()["block"].gpt2_cached
    cache, big = KVCache(n_layer=1, n_head=1, head_dim=4, n_ctx=8), kernels.BIG_MODEL_BYTES
    assert kernels.forward(1, cache, big) is block and kernels.forward(kernels.MAX_TILED_ROWS, cache, big) is block
    assert kernels.forward(kernels.MAX_TILED_ROWS + 1, cache, big) is None  # a prompt: gpt2.py
    assert kernels.forward(1, None, big) is None  # no cache: gpt2.py
    assert kernels.forward(1, cache, big - 1) is None  # a small model (the teaching pair): gpt2.py
    monkeypatch.setenv(compiled.KERNEL_ENV, "numpy")
    assert kernels.forward(1, cache, big) is None  # the NumPy path: gpt2.py


def test_a_model_decodes_with_the_block_and_gpt2_py_alike(model, monkeypatch):
    monkeypatch.setattr(kernels, "BIG_MODEL_BYTES", 0)  # this small model counts as big
    ids = np.random.default_rng(9).integers(0, 300, size=40)
    logits = {}
    for kernel in ("numba", "numpy"):
        monkeypatch.setenv(compiled.KERNEL_ENV, kernel)
        cache = model.new_cache()
        logits[kernel] = [model(ids[:30], cache)] + [model(ids[i:i + 1], cache) for i in range(30, 40)]
    for got, reference in zip(logits["numba"], logits["numpy"]):
        assert relative_diff(got, reference) < 1e-5
