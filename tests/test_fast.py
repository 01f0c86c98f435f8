"""The fast path computes what the plain path computes: the same matrix products (one row, a few
streamed rows, many rows; with and without threads; sizes that do not divide into blocks), and
the same logits, full and cached, to ~1e-5 relative. Big models keep the transposed weights in a
file beside the checkpoint: made once, remade when stale or broken, skipped when it cannot be
written."""

import os
import threading
from collections import namedtuple

import numpy as np
import pytest

from helpers import random_gpt2, random_tensors
from picogpt.errors import PicoGPTError
from picogpt.io.checkpoint import read_metadata, write_safetensors
from picogpt.model import load_checkpoint
from picogpt.perf import kernels, layout as fast
from picogpt.perf.kernels import (BIG_MATRIX, MAX_STREAMED_ROWS, SMALL_GEMM, TiedEmbedding, TransposedWeight,
                                  matmul, matmul_transposed, rows_per_block, streamed, transpose)
from picogpt.perf.layout import fast_params as prepare

RELATIVE = 1e-5


def relative_diff(got, reference):
    return float(np.abs(got - reference).max() / max(1e-30, np.abs(reference).max()))


@pytest.mark.parametrize("n_items", [0, 1, 2, 7, 1000])
def test_parallel_covers_every_item_once(n_items):
    seen = []
    kernels.parallel(lambda start, stop: seen.extend(range(start, stop)), n_items)
    assert sorted(seen) == list(range(n_items))


def test_parallel_hands_an_error_to_the_caller():
    def fail_at_500(start, stop):
        if start <= 500 < stop:
            raise ZeroDivisionError("chunk with 500")

    with pytest.raises(ZeroDivisionError, match="chunk with 500"):
        kernels.parallel(fail_at_500, 1000)


@pytest.mark.parametrize("n_in, n_out", [(32, 97), (1024, 1030)])  # 1024 x 1030: GEMV, threads
@pytest.mark.parametrize("n_rows", [1, 2, 3, 5, 9, MAX_STREAMED_ROWS, MAX_STREAMED_ROWS + 1, 40])
def test_matmul_transposed_is_x_at_w(n_in, n_out, n_rows):
    rng = np.random.default_rng(n_rows)
    weight = rng.standard_normal((n_in, n_out)).astype(np.float32)
    x = rng.standard_normal((n_rows, n_in)).astype(np.float32)
    got = matmul(x, TransposedWeight(transpose(weight)))
    reference = x.astype(np.float64) @ weight.astype(np.float64)
    assert got.shape == (n_rows, n_out) and got.dtype == np.float32 and got.flags.c_contiguous
    assert relative_diff(got, reference) < RELATIVE


def test_the_big_matrix_of_the_test_above_takes_the_all_core_paths():
    assert 32 * 97 < BIG_MATRIX <= 1024 * 1030


@pytest.mark.parametrize("big_matrix", [0, 1 << 40])  # blocks shared among threads, or not
@pytest.mark.parametrize("n_rows", [1, 2, 5, 16])
@pytest.mark.parametrize("n_in, n_out", [(7, 5), (64, 64), (100, 1030)])
def test_streamed_blocks_on_one_core_or_all(monkeypatch, big_matrix, n_rows, n_in, n_out):
    monkeypatch.setattr(kernels, "BIG_MATRIX", big_matrix)
    rng = np.random.default_rng(n_in + n_rows)
    weight_t = rng.standard_normal((n_out, n_in)).astype(np.float32)
    x = rng.standard_normal((n_rows, n_in)).astype(np.float32)
    got = streamed(x, weight_t)
    assert got.shape == (n_rows, n_out) and got.flags.c_contiguous
    assert relative_diff(got, x.astype(np.float64) @ weight_t.T.astype(np.float64)) < RELATIVE


def test_matmul_transposed_of_a_non_contiguous_input():
    rng = np.random.default_rng(0)
    weight_t = rng.standard_normal((50, 40)).astype(np.float32)
    x = rng.standard_normal((40, 6)).astype(np.float32).T  # [6, 40], Fortran-ordered
    np.testing.assert_allclose(matmul_transposed(x, weight_t), x @ weight_t.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(1, 1), (63, 5), (64, 64), (130, 7)])
def test_transpose_copies_exactly(shape):
    weight = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    weight_t = transpose(weight)
    assert weight_t.flags.c_contiguous and np.array_equal(weight_t, weight.T)


@pytest.mark.parametrize("n_in", [1, 64, 1600, 6400])
@pytest.mark.parametrize("n_rows", [2, 5, 9, 16])
def test_blocks_stay_small(n_in, n_rows):
    block = rows_per_block(n_in, n_rows)
    assert 1 <= block <= kernels.MAX_BLOCK_ROWS
    assert block == 1 or block * n_in * n_rows <= SMALL_GEMM


def test_prepare_keeps_shapes_and_leaves_the_checkpoint_arrays_alone():
    model = random_gpt2(n_layer=2, n_head=2, n_embd=32, n_ctx=300, n_vocab=97, peaked=False)
    params = model.params
    prepared = prepare(params)
    for block, fast_block in zip(params["h"], prepared["h"]):
        for group, name in (("attn", "c_attn"), ("attn", "c_proj"), ("mlp", "c_fc"), ("mlp", "c_proj")):
            weight, fast = block[group][name]["weight"], fast_block[group][name]["weight"]
            assert isinstance(weight, np.ndarray) and isinstance(fast, TransposedWeight)
            assert fast.shape == weight.shape and np.array_equal(fast.t, weight.T)
    wte = prepared["wte"]["weight"]
    assert isinstance(wte, TiedEmbedding) and wte.T.t is params["wte"]["weight"]  # no copy
    assert np.array_equal(wte[np.array([3, 1, 3])], params["wte"]["weight"][[3, 1, 3]])


@pytest.fixture(scope="module")
def model():  # c_fc is 256 x 1024 = 2^18 weights; n_vocab 1030 is not a multiple of 16
    return random_gpt2(3, n_layer=2, n_head=4, n_embd=256, n_ctx=128, n_vocab=1030, peaked=False)


def test_fast_full_forward_equals_plain(model):
    ids = np.random.default_rng(4).integers(0, 1030, size=40)
    for n in (1, 2, 5, 9, 17, 40):
        assert relative_diff(model(ids[:n]), model.plain(ids[:n])) < RELATIVE, f"{n} positions"


def test_fast_cached_decoding_and_scoring_equal_plain(model):
    ids = np.random.default_rng(5).integers(0, 1030, size=60)
    fast_cache, plain_cache = model.new_cache(), model.new_cache()
    start = 0
    for n_new in (20, 1, 1, 5, 9, 1, 3, 2, 17):  # prompt, decode steps, K+1 scoring calls
        chunk = ids[start:start + n_new]
        got, reference = model(chunk, fast_cache), model.plain(chunk, plain_cache)
        assert got.shape == (n_new, 1030)
        assert relative_diff(got, reference) < RELATIVE, f"{n_new} positions after {start}"
        start += n_new
    assert len(fast_cache) == len(plain_cache) == start


# ---- the transposed copy kept on disk beside big checkpoints ----------------------------------


@pytest.fixture
def checkpoint(tmp_path, model):
    """The module's random model, written as a checkpoint with its config.json."""
    path = tmp_path / "model.safetensors"
    write_safetensors(path, random_tensors(model.config, seed=3))
    (tmp_path / "config.json").write_text(
        '{"n_layer": 2, "n_head": 4, "n_embd": 256, "n_positions": 128, "vocab_size": 1030}')
    return path


def transposes_counted(monkeypatch):
    calls = []
    real = fast.transpose_all
    monkeypatch.setattr(fast, "transpose_all", lambda weights: calls.append(1) or real(weights))
    return calls


def test_big_models_keep_the_transposed_copy_beside_the_checkpoint(checkpoint, monkeypatch):
    monkeypatch.setattr(fast, "CACHE_MIN_BYTES", 0)
    calls = transposes_counted(monkeypatch)
    ids = np.arange(7)
    first = load_checkpoint(checkpoint)
    logits = first(ids)
    cache = fast.cache_path(checkpoint)
    assert cache.name == "model.picogpt-fast.safetensors" and len(calls) == 1
    assert read_metadata(cache) == fast.stamp(checkpoint)
    weight = first.fast_params["h"][1]["mlp"]["c_fc"]["weight"].t
    assert not weight.flags.writeable  # served memory-mapped from the file
    assert np.array_equal(weight, first.params["h"][1]["mlp"]["c_fc"]["weight"].T)

    second = load_checkpoint(checkpoint)  # a later load: read, not transposed again
    assert np.array_equal(second(ids), logits) and len(calls) == 1
    assert relative_diff(logits, second.plain(ids)) < RELATIVE


def test_a_stale_or_broken_cache_is_remade(checkpoint, monkeypatch):
    monkeypatch.setattr(fast, "CACHE_MIN_BYTES", 0)
    calls = transposes_counted(monkeypatch)
    load_checkpoint(checkpoint).prepare()
    cache = fast.cache_path(checkpoint)
    stat = checkpoint.stat()
    os.utime(checkpoint, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # as if downloaded again
    load_checkpoint(checkpoint).prepare()
    assert len(calls) == 2 and read_metadata(cache) == fast.stamp(checkpoint)
    cache.write_bytes(cache.read_bytes()[:1000])  # truncated
    model = load_checkpoint(checkpoint)
    ids = np.arange(5)
    assert relative_diff(model(ids), model.plain(ids)) < RELATIVE and len(calls) == 3


def test_without_disk_space_or_write_access_the_copy_stays_in_memory(checkpoint, monkeypatch, capsys):
    monkeypatch.setattr(fast, "CACHE_MIN_BYTES", 0)
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(fast.shutil, "disk_usage", lambda path: Usage(10**9, 10**9, 1000))
    model = load_checkpoint(checkpoint)
    ids = np.arange(5)
    assert relative_diff(model(ids), model.plain(ids)) < RELATIVE
    assert not fast.cache_path(checkpoint).exists() and "not enough free disk" in capsys.readouterr().err

    monkeypatch.undo()
    monkeypatch.setattr(fast, "CACHE_MIN_BYTES", 0)

    def refuse(*args, **kwargs):
        raise PermissionError("read-only folder")

    monkeypatch.setattr(fast, "write_safetensors", refuse)
    model = load_checkpoint(checkpoint)
    assert relative_diff(model(ids), model.plain(ids)) < RELATIVE
    assert not fast.cache_path(checkpoint).exists() and "could not write" in capsys.readouterr().err


def test_small_models_are_transposed_in_memory(checkpoint):
    load_checkpoint(checkpoint).prepare()  # 2.6 MB of linear weights: under CACHE_MIN_BYTES
    assert not fast.cache_path(checkpoint).exists()


def test_in_memory_copies_every_weight_out_of_the_mapped_file(checkpoint, monkeypatch):
    monkeypatch.setattr(fast, "CACHE_MIN_BYTES", 0)  # so the transposed weights are mapped from a file
    ids = np.arange(9)
    mapped = load_checkpoint(checkpoint).prepare()
    copied = load_checkpoint(checkpoint, in_memory=True).prepare()
    pairs = list(zip(fast.arrays_of(mapped.fast_params), fast.arrays_of(copied.fast_params)))
    assert len(pairs) == len(mapped.arrays)  # wte, wpe, every weight, bias and layer norm
    assert any(not a.flags.writeable for a, _ in pairs)  # the mapped side does come from files
    for a, b in pairs:
        assert np.array_equal(a, b) and b.flags.owndata and not np.shares_memory(a, b)
    wte = copied.fast_params["wte"]["weight"]
    assert wte.T.t is wte.wte  # the LM head stays tied to the copied embedding
    logits = []
    for model in (mapped, copied):  # the same arithmetic on the same numbers: identical logits
        cache = model.new_cache()
        logits.append([model(ids[:5], cache), model(ids[5:], cache)])
    assert all(np.array_equal(a, b) for a, b in zip(*logits))


def test_in_memory_refuses_what_would_not_fit(checkpoint, monkeypatch):
    monkeypatch.setattr(fast, "available_memory_bytes", lambda: fast.MEMORY_MARGIN + 1000)
    model = load_checkpoint(checkpoint, "big", in_memory=True)
    with pytest.raises(PicoGPTError, match=r"copying big's weights into memory needs 0\.0 GB.*without in_memory"):
        model(np.arange(3))
    assert model.fast_params is None  # nothing half-made: the next call tries again
    monkeypatch.setattr(fast, "available_memory_bytes", lambda: None)  # unknown (not Linux): just copy
    assert model(np.arange(3)).shape == (3, 1030)


def test_background_copy_swaps_every_weight_in_while_the_model_runs(checkpoint, monkeypatch):
    monkeypatch.setattr(fast, "CACHE_MIN_BYTES", 0)  # so the transposed weights are mapped from a file
    copies, halfway, release = [], threading.Event(), threading.Event()

    def slow_copy(array):  # after 5 arrays the copy waits, so the model runs on a mix of both
        if len(copies) == 5:
            halfway.set()
            release.wait(10)
        copies.append(array.nbytes)
        return np.array(array)

    monkeypatch.setattr(fast, "copy_array", slow_copy)
    ids = np.arange(9)
    mapped = load_checkpoint(checkpoint).prepare()
    reference = mapped(ids)
    model = load_checkpoint(checkpoint, in_memory="background").prepare()
    assert halfway.wait(10) and model.copying.is_alive()
    arrays = fast.arrays_of(model.fast_params)
    assert sum(a.flags.writeable for a in arrays) == 5  # copied so far; the rest still read-only, mapped
    assert np.array_equal(model(ids), reference)  # runs at once, mid-copy
    release.set()
    model.copying.join(10)
    assert not model.copying.is_alive() and len(copies) == len(arrays)
    assert all(a.flags.owndata and a.flags.writeable for a in fast.arrays_of(model.fast_params))
    assert model.fast_params["wte"]["weight"].T.t is model.fast_params["wte"]["weight"].wte
    assert np.array_equal(model(ids), reference)
    assert not any(a.flags.writeable for a in model.arrays)  # the model's own params stay the mapped arrays


def test_background_copy_that_would_not_fit_leaves_the_model_mapped(checkpoint, monkeypatch, capsys):
    monkeypatch.setattr(fast, "available_memory_bytes", lambda: fast.MEMORY_MARGIN + 1000)
    model = load_checkpoint(checkpoint, "big", in_memory="background")
    assert model(np.arange(3)).shape == (3, 1030) and model.copying is None
    assert "copying big's weights into memory needs" in capsys.readouterr().err


def test_in_memory_must_be_false_true_or_background(checkpoint):
    with pytest.raises(PicoGPTError, match="in_memory='yes': expected False"):
        load_checkpoint(checkpoint, in_memory="yes")
