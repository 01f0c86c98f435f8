"""benchmarks/kernels/candidates.py still runs: every candidate it measures computes x @ W (to
1e-5 relative, against float64) on tiny shapes, the former fast path (former.py: a thread team
for each call, the compiled block) gives the plain path's logits, and the script's own modes run
end to end. No timing is checked: the machine's speed is not a property of the code."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import random_gpt2

from picogpt.fast import compiled, threads

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "kernels" / "candidates.py"
sys.path.insert(0, str(SCRIPT.parent))  # its modules import one another, as when it runs as a script
RELATIVE = 1e-5


@pytest.fixture(scope="module")
def candidates_script():
    spec = importlib.util.spec_from_file_location("kernel_candidates", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    module.set_blas_threads(1)  # as the fast path leaves it


@pytest.fixture(scope="module")
def tiny_weights(candidates_script, tmp_path_factory):
    folder = tmp_path_factory.mktemp("kernel-bench")
    weights = candidates_script.make_weights(folder, "tiny", 64, 1)
    # above kernels.BIG_MATRIX, so the products take their threaded paths; and a shape that the
    # tiles do not divide
    rng = np.random.default_rng(0)
    return weights + [rng.standard_normal((1024, 1024), dtype=np.float32),
                      rng.standard_normal((1000, 1030), dtype=np.float32)]


def test_weights_have_gpt2_shapes_and_are_memory_mapped(candidates_script, tmp_path):
    weights = candidates_script.make_weights(tmp_path, "tiny", 32, 2)
    assert [W.shape for W in weights] == [(32, 96), (32, 32), (32, 128), (128, 32)] * 2
    assert all(isinstance(W.base, np.memmap) or isinstance(W, np.memmap) for W in weights)
    again = candidates_script.make_weights(tmp_path, "tiny", 32, 2)  # read back, not rewritten
    assert all(np.array_equal(a, b) for a, b in zip(weights, again))


@pytest.mark.parametrize("n_rows", [1, 2, 5])
def test_every_candidate_computes_x_times_w(candidates_script, tiny_weights, n_rows):
    found = candidates_script.candidates(candidates_script.find_sgemm(),
                                         candidates_script.transposed_copies(tiny_weights))
    rows = candidates_script.random_rows(tiny_weights, n_rows)
    applied = set()
    for label, candidate in found.items():
        candidates_script.set_blas_threads(candidate.blas_threads)
        for W in tiny_weights:
            error = candidates_script.check(candidate, rows[W.shape[0]], W)
            if error is not None:
                applied.add(label)
                assert error < RELATIVE, f"{label}, W {W.shape}, {n_rows} rows: {error:.1e} relative"
    assert applied == set(found), f"never applicable: {set(found) - applied}"


def test_rows_mode_writes_raw_times(candidates_script, tiny_weights, tmp_path, monkeypatch):
    monkeypatch.setattr(candidates_script, "MODELS", {"tiny": 64})
    monkeypatch.setattr(candidates_script, "SETTLE_S", 0.0)
    out = tmp_path / "results.json"
    candidates_script.main(["rows", "--models", "tiny", "--layers", "1", "--runs", "1", "--rows", "1,3",
                            "--data", str(tmp_path), "--out", str(out)])
    record = json.loads(out.read_text())
    assert [block["n_rows"] for block in record["blocks"]] == [1, 3]
    assert all(len(times) == 1 for block in record["blocks"] for times in block["times_s"].values())


def test_cache_mode_reports_a_bandwidth_per_tile_and_row_count(candidates_script):
    from argparse import Namespace

    results = candidates_script.cache_mode(Namespace(runs=1), None, n_repeats=8, tiles=((8, 16),))
    assert [row["n_rows"] for row in results["tiles"]] == [1, 2, 5, 9]
    assert all(np.isfinite([row["gemv_per_row_gbs"], row["gemm_gbs"]]).all() for row in results["tiles"])


def test_compute_mode_sets_the_loop_s_arithmetic_beside_the_memory_rate(candidates_script, tmp_path, monkeypatch):
    from argparse import Namespace

    pytest.importorskip("numba")
    monkeypatch.setattr(candidates_script, "MODELS", {"xl": 64})
    args = Namespace(runs=1, layers=1, data=tmp_path)
    results = candidates_script.compute_mode(args, None, n_repeats=4, shape=(16, 40), row_counts=(1, 3))
    assert [row["n_rows"] for row in results["compute"]] == [1, 3]
    assert results["memory_gbs"] > 0
    for row in results["compute"]:
        for way in (row["on_boundary"], row["from_column_0"]):
            assert way["one_thread_gbs"] > 0 and way["all_threads_gbs"] > 0
            assert way["all_threads_over_memory"] == pytest.approx(way["all_threads_gbs"] / results["memory_gbs"])


@pytest.mark.parametrize("offset", [0, 8, 24])
def test_weights_are_placed_where_asked_past_a_32_byte_boundary(candidates_script, offset):
    W = candidates_script.placed_at((4, 40), offset, np.random.default_rng(0))
    assert W.ctypes.data % 32 == offset and W.shape == (4, 40) and W.dtype == np.float32


def test_one_row_mode_rates_each_shape_for_every_way_of_threading_one_row(candidates_script, tmp_path, monkeypatch):
    monkeypatch.setattr(candidates_script, "MODELS", {"tiny": 64})
    out = tmp_path / "results.json"
    candidates_script.main(["one-row", "--models", "tiny", "--layers", "2", "--runs", "1",
                            "--data", str(tmp_path), "--out", str(out)])
    record = json.loads(out.read_text())
    assert [shape["shape"] for shape in record["shapes"]] == [[64, 192], [64, 64], [64, 256], [256, 64]]
    if threads.n_threads() > 1:  # with one thread there is no helper to wait for
        assert record["helper_start_us"] and all(us > 0 for us in record["helper_start_us"])
    for shape in record["shapes"]:
        assert shape["matrices"] == 2 and len(shape["gbs"]) >= 2 and all(rate > 0 for rate in shape["gbs"].values())


def test_between_mode_times_the_work_between_products_both_ways(candidates_script, tmp_path, monkeypatch):
    if compiled.loops() is None:
        pytest.skip("numba is not installed")
    monkeypatch.setattr(candidates_script, "MODELS", {"tiny": 64})
    out = tmp_path / "results.json"
    candidates_script.main(["between", "--models", "tiny", "--layers", "2", "--runs", "1", "--out", str(out)])
    record = json.loads(out.read_text())
    assert [row["n_rows"] for row in record["models"]] == [1, 5, 9]
    for row in record["models"]:
        assert set(row["times_s"]) == {"gpt2.py (NumPy)", "block.py (compiled, candidate)"}
        assert all(len(times) == 1 and times[0] > 0 for times in row["times_s"].values())


def test_the_former_path_gives_the_plain_paths_logits(candidates_script, monkeypatch):
    """former.FormerPath, the fast path before it was simplified (a team ready for each call,
    the work between products compiled), on a model it takes as big: the plain path's logits
    for a prompt, decode steps and scoring calls."""
    import former

    if former.team() is None:
        pytest.skip("the former path needs numba and two threads")
    monkeypatch.setattr(former, "BIG_MODEL_BYTES", 0)
    monkeypatch.setattr(former, "TEAM_MATRIX", 0)
    model = former.FormerPath.of(random_gpt2(3, n_layer=2, n_head=4, n_embd=64, n_ctx=64, n_vocab=300, peaked=False))
    ids = np.random.default_rng(5).integers(0, 300, size=40)
    cache, plain_cache, start = model.new_cache(), model.new_cache(), 0
    for n_new in (20, 1, 5, 9, 1):
        got, expected = model(ids[start:start + n_new], cache), model.plain(ids[start:start + n_new], plain_cache)
        assert float(np.abs(got - expected).max() / np.abs(expected).max()) < RELATIVE, (start, n_new)
        start += n_new


@pytest.mark.parametrize("n_rows", [1, 5])
def test_every_paired_way_computes_x_times_w_and_the_lm_head(candidates_script, n_rows):
    """paired.py's ways (the products before the profile, the head by its outputs, the package)
    are x @ W for a linear weight and for the LM head's wte.T view, above kernels.BIG_MATRIX."""
    import paired

    rng = np.random.default_rng(n_rows)
    W, wte = rng.standard_normal((1024, 1030), np.float32), rng.standard_normal((5003, 768), np.float32)
    for weight in (W, wte.T):
        x = rng.standard_normal((n_rows, weight.shape[0]), np.float32)
        expected = x.astype(np.float64) @ weight.astype(np.float64)
        for way, matmul in paired.WAYS.items():
            got = matmul(x, weight)
            assert float(np.abs(got - expected).max() / np.abs(expected).max()) < RELATIVE, (way, weight.shape)


def test_the_profile_times_every_product_of_a_decode_by_name(candidates_script):
    """decode_profile.py on the teaching pair's draft: every weight product of a decode is named and
    timed, with its bytes, and the three kinds of call are timed once per round."""
    import decode_profile

    from picogpt.bench.checkpoints import resolve_models

    (name, (path, _)), = resolve_models(["tiny-draft"])[0].items()
    result = decode_profile.profile_model(name, path, calls=2)
    n_layer = result["n_layer"]
    assert set(result["products"]) == {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj", "LM head (wte.T)"}
    assert all(p["per_decode"] == (1 if name.startswith("LM") else n_layer) and len(p["times_s"]) == 2
               and p["bytes_per_decode"] > 0 for name, p in result["products"].items())
    assert all(len(times) == 2 for times in result["times_s"].values())


def test_truncation_before_gives_the_bits_of_truncation_now(candidates_script):
    """truncation.py compares sampling's top-k and top-p with former.py's whole-row np.partition
    and np.sort: on rows of ties, a constant row and random ones, the two give the same bits, so
    the timing compares two ways of one result."""
    import former

    from picogpt import sampling

    rng = np.random.default_rng(0)
    for logits in (rng.integers(0, 50, (3, 50257)) * 0.3, np.zeros(50257), rng.standard_normal((2, 50257))):
        probs = sampling.softmax64(logits)
        for k in (1, 5, 40):
            assert np.array_equal(former.partition_top_k_filter(probs, k), sampling.top_k_filter(probs, k))
        for top_p in (0.5, 0.9):
            assert np.array_equal(former.sort_top_p_filter(probs, top_p), sampling.top_p_filter(probs, top_p))


def test_the_pool_script_checks_its_prange_product_and_writes_its_ratios(candidates_script, tmp_path):
    """pool.py, in a child process as it always runs its measurements (so that no threading layer
    of numba's is loaded into the test process): its prange product is x @ W (checked as it builds
    its items) and every ratio it summarises is written."""
    import pool

    out = tmp_path / "pool.json"
    pool.main(["--processes", "1", "--blocks", "1", "--calls", "1", "--layers", "workqueue", "--shapes", "small",
               "--out", str(out)])
    summary = json.loads(out.read_text())["summary"]
    assert sorted(summary) == ["workqueue | small | empty region", "workqueue | small | one row x W"]
