"""The model and its KV cache: the cache gives the same logits as a full forward pass, rolls
back with `truncate`, grows by doubling instead of re-copying per token, and bad ids are
explained before anything is computed."""

import numpy as np
import pytest
from helpers import random_gpt2

from picogpt.errors import PicoGPTError
from picogpt.gpt2 import causal_mask, gelu, layer_norm, softmax
from picogpt.kv_cache import KVCache

TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def model():
    return random_gpt2(1, n_layer=2, n_head=2, n_embd=32, n_ctx=300, n_vocab=97, peaked=False)


@pytest.fixture(scope="module")
def ids():
    return np.random.default_rng(2).integers(0, 97, size=150)


def max_diff(a, b):
    return float(np.abs(a - b).max())


# ---- the building blocks -------------------------------------------------------------------

def test_softmax_rows_sum_to_one_and_survive_large_inputs():
    x = np.array([[1000.0, 1001.0, 1002.0], [-5.0, 0.0, 5.0]], np.float32)
    p = softmax(x)
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(p[0], softmax(x[0] - 1000.0), rtol=1e-6)


def test_gelu_is_the_tanh_approximation():
    x = np.array([-3.0, -1.0, 0.0, 0.5, 2.0])
    expected = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(gelu(x), expected, rtol=1e-12)
    assert gelu(np.array(0.0)) == 0.0 and abs(gelu(np.array(10.0)) - 10.0) < 1e-9


def test_layer_norm_normalises_then_scales_and_shifts():
    x = np.random.default_rng(0).standard_normal((4, 16)) * 3 + 7
    ln = {"weight": np.full(16, 2.0), "bias": np.full(16, 0.5)}
    y = layer_norm(x, ln, eps=1e-5)
    np.testing.assert_allclose(y.mean(axis=-1), 0.5, atol=1e-6)
    np.testing.assert_allclose(y.std(axis=-1), 2.0, rtol=1e-4)


def test_causal_mask_lets_each_query_see_only_the_past():
    mask = causal_mask(n_new=2, n_past=3)  # queries at positions 3 and 4, keys 0..4
    assert mask.shape == (2, 5)
    assert np.all(mask[0, :4] == 0) and mask[0, 4] == -np.inf
    assert np.all(mask[1] == 0)


# ---- the KV cache gives the same logits as the full forward pass ---------------------------

def test_full_forward_returns_float32_logits(model, ids):
    logits = model(ids)
    assert logits.shape == (len(ids), 97) and logits.dtype == np.float32
    assert np.isfinite(logits).all()


def test_cached_decoding_equals_full_forward(model, ids):
    full = model(ids)
    cache = model.new_cache()
    prefill = model(ids[:10], cache)
    steps = [model(ids[i:i + 1], cache) for i in range(10, len(ids))]
    cached = np.concatenate([prefill, *steps])
    assert len(cache) == len(ids)
    diff = max_diff(cached, full)
    print(f"cached vs full forward: max |logit diff| {diff:.2e}")
    assert diff <= TOLERANCE * max(1.0, np.abs(full).max())


def test_logits_do_not_depend_on_later_tokens(model, ids):
    other = ids.copy()
    other[60:] = (other[60:] + 1) % 97
    assert max_diff(model(ids)[:60], model(other)[:60]) == 0.0
    assert max_diff(model(ids)[60:], model(other)[60:]) > 0.0


def test_truncate_forgets_the_rejected_positions(model, ids):
    full = model(ids[:40])
    cache = model.new_cache()
    model(ids[:30], cache)
    model(np.array([5, 6, 7, 8, 9]), cache)  # a "draft" that gets rejected
    cache.truncate(30)
    assert len(cache) == 30
    again = model(ids[30:40], cache)
    assert max_diff(again, full[30:40]) <= TOLERANCE * max(1.0, np.abs(full).max())


def test_truncate_to_zero_is_a_fresh_cache(model, ids):
    cache = model.new_cache()
    model(ids[:20], cache)
    cache.truncate(0)
    assert max_diff(model(ids[:20], cache), model(ids[:20])) <= TOLERANCE * 10


@pytest.mark.parametrize("n", [-1, 21])
def test_truncate_outside_the_held_positions_is_an_error(model, ids, n):
    cache = model.new_cache()
    model(ids[:20], cache)
    with pytest.raises(PicoGPTError, match=f"cannot truncate a cache of 20 positions to {n}"):
        cache.truncate(n)
    assert len(cache) == 20


# ---- the cache grows geometrically, and appends do not re-copy it ---------------------------

def test_appending_below_capacity_keeps_the_same_arrays():
    cache = KVCache(n_layer=2, n_head=2, head_dim=4, n_ctx=1000, capacity=8)
    k_array, v_array = cache.k, cache.v
    for _ in range(8):
        append_one(cache)
        assert cache.k is k_array and cache.v is v_array  # written in place, never re-copied
    append_one(cache)  # the 9th position does not fit: one doubling
    assert cache.k is not k_array and cache.k.shape[2] == 16


def test_capacity_grows_by_doubling_and_stops_at_the_context():
    cache = KVCache(n_layer=1, n_head=1, head_dim=2, n_ctx=100, capacity=4)
    capacities, allocations, held = [], 0, cache.k  # `held` keeps the array alive: `is` compares arrays
    for _ in range(100):
        append_one(cache)
        capacities.append(cache.k.shape[2])
        allocations, held = allocations + (cache.k is not held), cache.k
    assert sorted(set(capacities)) == [4, 8, 16, 32, 64, 100]
    assert allocations == 5  # 100 appends, 5 allocations after the first: O(log n), not O(n)


def test_grown_cache_keeps_the_old_positions():
    cache = KVCache(n_layer=1, n_head=1, head_dim=2, n_ctx=100, capacity=2)
    for t in range(5):
        append_one(cache, value=t)
    np.testing.assert_array_equal(cache.k[0, 0, :5, 0], [0, 1, 2, 3, 4])


def test_model_decoding_grows_the_cache_geometrically(model, ids):
    cache = model.new_cache()
    allocations, held = 0, cache.k
    for token in ids[:150]:
        model([token], cache)
        allocations, held = allocations + (cache.k is not held), cache.k
    assert cache.k.shape[2] == 256 and allocations == 2  # 64 -> 128 -> 256


def append_one(cache, value=1.0):
    """What one forward pass of one token does to the cache: reserve, store per layer, advance."""
    cache.reserve(1)
    n_layer, n_head, _, head_dim = cache.k.shape
    kv = np.full((n_head, 1, head_dim), value, np.float32)
    for layer in range(n_layer):
        cache.store(layer, kv, kv)
    cache.advance(1)


# ---- bad ids are explained ------------------------------------------------------------------

def test_prompt_longer_than_the_context(model):
    with pytest.raises(PicoGPTError, match="301 positions exceed .* context of 300 tokens"):
        model(np.zeros(301, int))


def test_cached_decoding_past_the_context(model):
    cache = model.new_cache()
    model(np.zeros(299, int), cache)
    model([1], cache)
    with pytest.raises(PicoGPTError, match="context of 300"):
        model([1], cache)
    assert len(cache) == 300  # the failed call changed nothing


@pytest.mark.parametrize("bad_id", [97, -1, 10**6])
def test_out_of_vocabulary_ids(model, bad_id):
    cache = model.new_cache()
    with pytest.raises(PicoGPTError, match=f"token id {bad_id} is outside .* vocabulary of 97"):
        model([1, 2, bad_id], cache)
    assert len(cache) == 0


@pytest.mark.parametrize("bad_ids", [[], np.zeros((2, 3), int), [1.5, 2.0], "hello"])
def test_empty_or_malformed_ids(model, bad_ids):
    with pytest.raises(PicoGPTError, match="non-empty 1-D sequence of token ids"):
        model(bad_ids)


def test_model_reports_its_size(model):
    c = model.config
    per_block = 4 * c.n_embd + 12 * c.n_embd**2 + 9 * c.n_embd  # 2 LayerNorms, attn, mlp
    expected = c.n_vocab * c.n_embd + c.n_ctx * c.n_embd + 2 * c.n_embd + c.n_layer * per_block
    assert model.n_params == expected and model.nbytes == 4 * expected
    assert "random" in repr(model)


# ---- a failed call leaves its cache exactly as it was ----------------------------------------------

def test_a_call_that_fails_the_finite_check_leaves_its_cache_as_it_was():
    model = random_gpt2(3, n_vocab=12)
    finite_check = model.ensure_finite

    def fails_once(logits):
        model.ensure_finite = finite_check
        return finite_check(logits * np.float32(np.nan))  # as NaN weights would make them

    for call in (model, model.plain):
        cache = model.new_cache()
        call([1, 2], cache)
        model.ensure_finite = fails_once
        with pytest.raises(PicoGPTError, match="non-finite logits"):
            call([3, 4], cache)
        assert len(cache) == 2  # not 4
        np.testing.assert_allclose(call([3], cache), model.plain([1, 2, 3])[-1:], atol=TOLERANCE)


# ---- a memory-mapped checkpoint that changes on disk is detected -----------------------------------

def written_an_hour_ago(folder):
    """A random checkpoint in folder, its file dated an hour back: any later write gives it a
    new modification time even where the file system's clock ticks coarsely."""
    import os
    import time

    from helpers import write_random_checkpoint

    write_random_checkpoint(folder, 4, n_vocab=40, n_ctx=16)
    os.utime(folder / "model.safetensors", (time.time() - 3600,) * 2)
    return folder


@pytest.fixture()
def loaded(tmp_path):
    """(model, path) of a random checkpoint loaded from a temporary folder."""
    from picogpt import load

    folder = written_an_hour_ago(tmp_path / "model")
    return load(folder), folder / "model.safetensors"


def rewrite_in_place(path):
    """The same size, other bytes: what an editor or `dd conv=notrunc` does to a file."""
    data = bytearray(path.read_bytes())
    data[-400:] = bytes(400)
    with open(path, "r+b") as f:
        f.write(data)


def copy_another_over(path):
    """`cp other.safetensors model.safetensors`: the same file (inode), truncated, then refilled."""
    import shutil

    from helpers import write_random_checkpoint

    other = write_random_checkpoint(path.parent.parent / "other", 5, n_vocab=50, n_ctx=16)
    shutil.copyfile(other / "model.safetensors", path)


def rename_another_over(path):
    """A download or an atomic write: a new file (inode) renamed over the old one."""
    import os
    import shutil

    shutil.copyfile(path, path.with_name("new"))
    os.replace(path.with_name("new"), path)


def changes(path):
    """Ways a checkpoint changes underneath a running model."""
    import os

    return {"rewritten in place": lambda: rewrite_in_place(path),
            "truncated": lambda: os.truncate(path, path.stat().st_size // 2),
            "another copied over it": lambda: copy_another_over(path),
            "another renamed over it": lambda: rename_another_over(path),
            "deleted": lambda: path.unlink()}


@pytest.mark.parametrize("how", list(changes("x")))
def test_a_checkpoint_changed_on_disk_is_refused_before_the_next_call(loaded, how):
    """Truncated or cp'd over: a bus error, no message; rewritten in place: logits changed silently."""
    model, path = loaded
    model([1, 2, 3])
    changes(path)[how]()
    for call in (model, model.plain):
        with pytest.raises(PicoGPTError, match="changed on disk since .* was loaded.*load it again"):
            call([1, 2, 3])


def test_in_memory_weights_run_on_after_the_file_changes_and_plain_does_not(tmp_path):
    from picogpt import load

    folder = written_an_hour_ago(tmp_path / "model")
    model = load(folder, in_memory=True)
    before = model([1, 2, 3])  # the first call copies the weights into memory
    rewrite_in_place(folder / "model.safetensors")
    np.testing.assert_array_equal(model([1, 2, 3]), before)  # the copy no longer depends on the file
    with pytest.raises(PicoGPTError, match="changed on disk"):
        model.plain([1, 2, 3])  # the reference path reads the checkpoint's own (mapped) arrays


def test_a_file_changed_while_in_memory_copies_it_is_refused(tmp_path, monkeypatch):
    import picogpt.model
    from picogpt import load

    folder = written_an_hour_ago(tmp_path / "model")
    model = load(folder, in_memory=True)
    copy = picogpt.model.copied_into_memory

    def copy_while_it_changes(params, name):
        copied = copy(params, name)
        rewrite_in_place(folder / "model.safetensors")
        return copied

    monkeypatch.setattr(picogpt.model, "copied_into_memory", copy_while_it_changes)
    with pytest.raises(PicoGPTError, match="changed on disk"):
        model([1, 2, 3])
    assert model.fast_params is None  # the mixed copy is not kept


def test_the_identity_check_is_one_stat_call(loaded, monkeypatch):
    """ensure_checkpoint_unchanged asks the OS once per call (a stat of the file, microseconds),
    and reads nothing of the file."""
    import picogpt.io.checkpoint as checkpoint

    model, _ = loaded
    calls = []
    real_stat = checkpoint.os.stat
    monkeypatch.setattr(checkpoint.os, "stat", lambda *a, **k: calls.append(a) or real_stat(*a, **k))
    monkeypatch.setattr("builtins.open", lambda *a, **k: pytest.fail("the check opened a file"))
    for _ in range(3):
        model.ensure_checkpoint_unchanged()
    assert len(calls) == 3
