"""Notebook 05's measurements: the costs the speedup formulas need, the predictions made from
them, and the measured speedup of speculative over autoregressive sampling."""

import json

import numpy as np
import pytest

from helpers_sampling import random_gpt2
from picogpt import theory
from picogpt.perf import speedup
from picogpt.errors import PicoGPTError

PROMPT = [1, 2, 3]


def test_cached_call_leaves_the_cache_as_it_found_it_and_costs_time():
    model = random_gpt2(0, n_ctx=16)
    seconds = speedup.cached_call_s(model, PROMPT, 5, repeats=3)
    assert 0 < seconds < 5
    with pytest.raises(PicoGPTError, match="at least 1"):
        speedup.cached_call_s(model, PROMPT, 0)


def test_measure_costs_has_one_scoring_cost_per_K():
    draft, target = random_gpt2(0), random_gpt2(1, n_layer=2)
    costs = speedup.measure_costs(draft, target, PROMPT, Ks=[1, 3], repeats=2)
    assert sorted(costs.t_score_s) == [1, 3]
    assert costs.t_draft_s > 0 and costs.t_target_s > 0
    assert costs.c == pytest.approx(costs.t_draft_s / costs.t_target_s)


def test_predictions_follow_the_formulas():
    costs = speedup.Costs(t_draft_s=0.002, t_target_s=0.010, t_score_s={1: 0.010, 4: 0.020})
    pred = speedup.predictions(costs, alpha=0.8, Ks=[1, 4])
    paper, flat, leviathan = pred.values()
    # K = 1, t_score = t_target: every formula agrees: (1 + 0.8) / (0.002 + 0.010) * 0.010
    assert paper[0] == pytest.approx(1.8 / 0.012 * 0.010) == flat[0] == pytest.approx(leviathan[0])
    # K = 4, scoring 5 positions costs twice a step: the paper's arithmetic with t_score = 0.020
    tokens = (1 - 0.8**5) / (1 - 0.8)
    assert paper[1] == pytest.approx(tokens / (4 * 0.002 + 0.020) * 0.010)
    assert flat[1] == pytest.approx(tokens / (4 * 0.002 + 0.010) * 0.010) == pytest.approx(leviathan[1])
    assert paper[1] < flat[1]


def test_a_draft_identical_to_the_target_is_always_accepted():
    model = random_gpt2(0)
    ar_s, measured = speedup.measure_speedups(model, model, PROMPT, N=9, Ks=[2], seeds=(0, 1))
    m = measured[2]
    assert m.alpha_hat == 1.0 and m.tokens_per_loop == 3.0 and speedup.pooled_alpha(measured) == 1.0
    assert m.speedup == pytest.approx(ar_s / m.seconds)


def test_measured_acceptance_is_pooled_over_every_decision():
    draft, target = random_gpt2(0), random_gpt2(1)
    _, measured = speedup.measure_speedups(draft, target, PROMPT, N=12, Ks=[1, 3], seeds=(0, 1, 2))
    assert all(0 <= m.alpha_hat <= 1 and 1 <= m.tokens_per_loop <= m.K + 1 for m in measured.values())
    pooled = speedup.pooled_alpha(measured)
    accepted = sum(m.n_accepted for m in measured.values())
    decisions = sum(m.n_decisions for m in measured.values())
    assert pooled == accepted / decisions
    assert min(m.alpha_hat for m in measured.values()) <= pooled <= max(m.alpha_hat for m in measured.values())


def test_theory_and_measurement_agree_on_tokens_per_loop_for_identical_models():
    model = random_gpt2(2)
    _, measured = speedup.measure_speedups(model, model, PROMPT, N=8, Ks=[3], seeds=(0,))
    assert measured[3].tokens_per_loop == theory.expected_tokens_per_loop(1.0, 3)
    assert np.isfinite(measured[3].speedup)


def test_bench_costs_reads_the_committed_benchmark(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({
        "date_utc": "2026-01-01T00:00:00+00:00", "machine": {"cpu": "Test CPU"},
        "models": {"gpt2": {"source": "random weights"}, "gpt2-xl": {"source": "random weights"}},
        "predicted": {"t_draft_s": 0.01, "t_target_s": 0.1, "t_score_s": {"1": 0.11, "4": 0.13}}}))
    costs, note = speedup.bench_costs(path)
    assert costs.t_score_s == {1: 0.11, 4: 0.13} and costs.c == pytest.approx(0.1)
    assert "Test CPU" in note and "gpt2-xl: random weights" in note


def test_bench_costs_says_when_there_are_none(tmp_path):
    costs, note = speedup.bench_costs(tmp_path / "bench.json")
    assert costs is None and "not measured yet" in note
    (tmp_path / "bench.json").write_text(json.dumps({"models": {}}))
    costs, note = speedup.bench_costs(tmp_path / "bench.json")
    assert costs is None and "predicted" in note
