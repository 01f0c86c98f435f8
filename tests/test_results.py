"""Reading measurements for the notebooks (picogpt/course/speed_panels.py) and the pooled-acceptance
simulation of notebook 05 (course/panels.py): claims no stronger than the numbers."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from picogpt.course import panels, speed_panels
from picogpt.measure import compare, speedup


def measurement(speedups, predicted_best=2):
    """A stand-in SpeedupMeasurement: speedups {K: each repeat's speedup} (autoregressive runs of 1 s)."""
    n = len(next(iter(speedups.values())))
    by_K = {K: SimpleNamespace(speedup=float(np.median(x)), runs_s=tuple(1 / np.array(x)), predicted=float(np.median(x)))
            for K, x in speedups.items()}
    return SimpleNamespace(Ks=sorted(by_K), by_K=by_K, best_K=(max(by_K, key=lambda K: by_K[K].speedup), predicted_best),
                           repeats=n, N=32, autoregressive_runs_s=(1.0,) * n)


def test_a_best_K_that_some_repeats_reverse_is_said_not_resolved():
    m = measurement({1: [1.2, 1.1, 1.3, 1.2, 1.25, 1.2], 2: [1.5, 1.4, 1.6, 1.5, 1.45, 1.55],
                     3: [1.45, 1.5, 1.35, 1.55, 1.4, 1.6]})
    assert speed_panels.indistinguishable_from_best({K: speedup.speedups_by_repeat(m, K) for K in m.Ks}) == (2, [2, 3])
    lines = speed_panels.best_K_lines(m)
    assert "best K measured: 2" in lines[0] and lines[1].startswith("not resolved: K = 2; K = 3 cannot be told apart")
    assert "falls among them" in lines[1] and "would need" in lines[1]


def test_a_best_K_ahead_in_every_repeat_is_said_resolved():
    m = measurement({K: [x * (1 + 0.01 * r) for r in range(8)] for K, x in {1: 1.2, 2: 1.8, 3: 1.3}.items()})
    assert speed_panels.best_K_lines(m)[1].startswith("resolved: K = 2 faster than every other")


def test_five_repeats_resolve_nothing_and_say_so():
    m = measurement({1: [1.2] * 5, 2: [1.8] * 5})
    assert "5 pairs cannot resolve" in speed_panels.best_K_lines(m)[1]


def test_results_saved_without_their_repeats_are_not_judged():
    m = measurement({1: [1.2] * 6, 2: [1.8] * 6})
    m.autoregressive_runs_s = ()
    assert speed_panels.best_K_lines(m)[1].startswith(compare.NOT_KEPT)


def test_without_the_bench_file_everything_says_not_measured(tmp_path):
    missing = tmp_path / "bench.json"
    assert "not in bench.json" in speed_panels.decode_vs_floor_lines(path=missing)[0]
    assert "not measured" in speed_panels.bench_best_K_lines(path=missing)[0]
    assert speed_panels.read_bench(missing) is None


@pytest.mark.parametrize("median_s", [0.5, 0.99, 1.0, 1.3])
def test_a_decode_under_its_floor_is_printed_with_why(tmp_path, median_s):
    """A bench decode faster than its floor (the bandwidth moved during the run) gets a line saying
    so; one at or above it does not."""
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"ceiling": {"gb_per_s": 8.0}, "speculative": [], "models": {"gpt2-xl": {
        "floor_s": 1.0, "engines": {"picogpt": {"decode": {"128": {"median_s": median_s}}}}}}}))
    lines = speed_panels.decode_vs_floor_lines(path=path)
    assert f"{median_s:.2f} x the floor" in lines[1]
    assert ("bandwidth moved" in lines[-1] and "8.0 GB/s" in lines[-1]) is (median_s < 1)


def test_the_committed_bench_is_read_with_its_setup():
    if not speed_panels.bench_pair_measurements():
        pytest.skip("benchmarks/bench.json holds no GPT-2 small -> XL measurement")
    decode = speed_panels.decode_vs_floor_lines()
    assert "x the floor" in "\n".join(decode) and "gpt2-xl" in decode[0]
    best = "\n".join(speed_panels.bench_best_K_lines())
    assert "best K measured" in best and ("resolved" in best or compare.NOT_KEPT in best)
    others = "\n".join(speed_panels.others_lines())
    assert "temperature 0 (greedy)" in others and "the bench: gpt2 -> gpt2-xl" in others and "setup:" in others


def test_mody_without_a_picogpt_measurement_says_so(monkeypatch):
    monkeypatch.setattr(speed_panels, "bench_pair_measurements", lambda *a, **k: [])
    assert "not measured" in speed_panels.others_lines()[-1]


def test_pooled_acceptance_with_one_rate_matches_the_formula():
    r = panels.pooled_acceptance((0.8,), K=4, n_loops=200_000)
    assert r.alpha_hat == pytest.approx(0.8, abs=0.005)
    assert r.tokens_per_loop == pytest.approx(r.at_alpha_hat, rel=0.01)


@pytest.mark.parametrize("K", [2, 4, 8])
def test_varying_rates_raise_the_mean_but_the_pooled_rate_overstates_it(K):
    r = panels.pooled_acceptance((0.95, 0.5), K=K, n_loops=200_000)
    assert r.alpha_hat > r.mean_alpha  # easy loops judge more drafts
    assert r.tokens_per_loop > r.at_mean_alpha  # convexity: variation raises the mean
    assert r.tokens_per_loop < r.at_alpha_hat  # ... yet below the formula at the pooled rate
