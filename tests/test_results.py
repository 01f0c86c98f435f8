"""Reading measurements for the notebooks (picogpt/course/speed_panels.py) and the pooled-acceptance
simulation of notebook 05 (course/panels.py): claims no stronger than the numbers."""

import json
from types import SimpleNamespace

import pytest

from picogpt.course import panels, speed_panels
from picogpt.measure.timing import Spread


def measurement(speedups, runs, predicted_best=2):
    """A stand-in SpeedupMeasurement: speedups {K: x}, runs {K: (q1, q3)}."""
    by_K = {K: SimpleNamespace(speedup=x, speedup_runs=Spread(x, *runs[K]), predicted=x) for K, x in speedups.items()}
    return SimpleNamespace(Ks=sorted(by_K), by_K=by_K, best_K=(max(by_K, key=lambda K: speedups[K]), predicted_best),
                           repeats=3, N=32)


def test_a_best_K_whose_runs_overlap_others_is_said_not_resolved():
    m = measurement({1: 1.2, 2: 1.5, 3: 1.45}, {1: (1.1, 1.3), 2: (1.4, 1.6), 3: (1.35, 1.5)})
    assert speed_panels.indistinguishable_from_best({K: m.by_K[K].speedup_runs for K in m.Ks}) == (2, [2, 3])
    lines = speed_panels.best_K_lines(m)
    assert "best K measured: 2" in lines[0] and lines[1].startswith("not resolved: K in [2, 3]")
    assert "falls among them" in lines[1]


def test_a_clear_best_K_is_said_resolved():
    m = measurement({1: 1.2, 2: 1.8, 3: 1.3}, {1: (1.1, 1.3), 2: (1.7, 1.9), 3: (1.2, 1.4)})
    assert speed_panels.best_K_lines(m)[1].startswith("resolved")


def test_any_choice_made_from_measured_speedups_says_whether_it_is_resolved():
    runs = {"fixed K = 4": Spread(1.75, 1.67, 1.80), "adaptive K": Spread(1.67, 1.55, 1.76),
            "the formula's K = 5": Spread(1.82, 1.75, 1.90)}
    line = speed_panels.resolution_line(runs, "strategy", repeats=3, N=64)
    assert line.startswith("not resolved: strategy in [fixed K = 4, adaptive K, the formula's K = 5]")
    named = {"draft, K = 4": Spread(1.7, 1.6, 1.8), "draft, K = 5": Spread(1.75, 1.65, 1.85)}
    assert "[draft, K = 4; draft, K = 5]" in speed_panels.resolution_line(named, "strategy", 3, 64)
    apart = {1: Spread(1.1, 1.05, 1.12), 2: Spread(1.4, 1.35, 1.45)}
    assert speed_panels.resolution_line(apart, "L", 5, 64).startswith("resolved: the interquartile range of every other L's")


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
    assert "best K measured" in best and "resolved" in best
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
