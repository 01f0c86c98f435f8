"""The one cost/speedup measurement (measure/speedup.py), on tiny random models: costs read inside
the loops, a breakdown that adds up to the wall time, alpha pooled over every decision, the
speedup as the median of the repeat-by-repeat ratios inside its own interquartile range, a draft
that proposes nothing reported (not a crash), predictions from the formulas, and a JSON round trip."""

import json

import numpy as np
import pytest
from helpers import NoDrafts, random_gpt2

from picogpt import sampling, speculative, theory
from picogpt.errors import PicoGPTError
from picogpt.measure import results, speedup
from picogpt.model import ModelView

PROMPT = [1, 2, 3]


class FakeClock:
    """Stands in for the `time` module of the samplers: time moves only when a model is called."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


class Clocked(ModelView):
    """A model whose every call costs `base + per_position * (n_new - 1)` seconds of the fake
    clock, plus `prefill` when its cache is empty (the call that reads the prompt)."""

    def __init__(self, model, clock, base, per_position, prefill=100.0):
        super().__init__(model)
        self.clock, self.base, self.per_position, self.prefill = clock, base, per_position, prefill

    def __call__(self, ids, cache):
        self.clock.now += self.base + self.per_position * (len(ids) - 1) + (self.prefill if len(cache) == 0 else 0)
        return self.model(ids, cache)


@pytest.fixture
def clocked_pair(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(sampling, "time", clock)
    monkeypatch.setattr(speculative, "time", clock)
    draft = Clocked(random_gpt2(0, n_ctx=64), clock, base=1.0, per_position=0.0)
    target = Clocked(random_gpt2(1, n_ctx=64), clock, base=10.0, per_position=1.0)
    return draft, target


@pytest.fixture
def recorded(monkeypatch):
    """Every SpeculativeResult measure_speedup gets, by K."""
    runs = {}

    sample = speculative.speculative_sampling

    def recording(draft, target, ids, N, *, K, **controls):
        result = sample(draft, target, ids, N, K=K, **controls)
        runs.setdefault(K, []).append(result)
        return result

    monkeypatch.setattr(speculative, "speculative_sampling", recording)  # what speculative.Chain runs
    return runs


def test_in_loop_costs_are_the_planted_costs_with_the_prefill_left_out(clocked_pair):
    m = speedup.measure_speedup(*clocked_pair, PROMPT, N=20, Ks=[1, 2, 4], repeats=3)
    assert m.t_draft_s == 1.0 and m.t_target_s == 10.0  # not 101 or 112: the prefill is left out
    assert m.costs.t_score_s == {1: 11.0, 2: 12.0, 4: 14.0}  # one call on K + 1 positions
    assert all(at.t_decide_s == 0.0 for at in m.by_K.values())
    # Algorithm 1: the prefill (100 + 10 + 2 positions), then 19 decoding steps
    assert m.autoregressive_s == speedup.Spread(112.0 + 19 * 10.0, 112.0 + 19 * 10.0, 112.0 + 19 * 10.0)
    assert m.autoregressive_breakdown_s == {"target_s": 302.0, "other_s": 0.0}


def test_the_breakdown_adds_up_and_the_speedup_is_the_median_of_the_per_repeat_ratios(clocked_pair, recorded):
    autoregressive = []
    m = speedup.measure_speedup(*clocked_pair, PROMPT, N=20, Ks=[2, 3], repeats=3, warmup_tokens=0,
                                on_run=lambda K, run: autoregressive.append(run.seconds) if K is None else None)
    for K, at in m.by_K.items():
        runs = recorded[K]
        assert len(runs) == 3
        seconds = [run.seconds for run in runs]
        assert at.seconds.median == np.median(seconds) and at.seconds.q1 <= at.seconds.median <= at.seconds.q3
        ratios = [ar / spec for ar, spec in zip(autoregressive, seconds)]  # the same repeat: the same seed
        assert at.speedup == at.speedup_runs.median == np.median(ratios)
        assert at.speedup_runs == speedup.Spread(np.median(ratios), *np.percentile(ratios, [25, 75]))
        b = at.breakdown_s
        assert b["other_s"] == 0.0  # the fake clock only moves inside model calls
        assert b["draft_s"] + b["score_s"] + b["decide_s"] + b["other_s"] == pytest.approx(np.mean(seconds))
        drafted = sum(loop.K for run in runs for loop in run.loops)
        assert b["draft_s"] == pytest.approx((drafted + 3 * 100.0) / 3)  # 1 s a draft call + one prefill a run


def test_alpha_is_pooled_over_every_decision_of_every_run(recorded):
    draft, target = random_gpt2(0, n_ctx=64), random_gpt2(1, n_ctx=64)
    m = speedup.measure_speedup(draft, target, PROMPT, N=16, Ks=[1, 3], repeats=2, warmup_tokens=0)
    loops = [loop for runs in recorded.values() for run in runs for loop in run.loops]
    assert m.n_accepted == sum(loop.n_accepted for loop in loops)
    assert m.n_decisions == sum(len(loop.r) for loop in loops)
    assert m.alpha_hat == m.n_accepted / m.n_decisions
    assert 0 < m.n_accepted < m.n_decisions  # these two random models neither always agree nor never
    for K, at in m.by_K.items():
        assert at.n_loops == sum(len(run.loops) for run in recorded[K])
        assert at.tokens_per_loop == sum(len(loop.tokens) for run in recorded[K] for loop in run.loops) / at.n_loops
        assert at.predicted == pytest.approx(theory.predicted_speedup(
            alpha=m.alpha_hat, K=K, t_draft_s=m.t_draft_s, t_target_s=m.t_target_s, t_score_s=at.t_score_s))


def test_on_a_real_clock_the_breakdown_adds_up_to_the_wall_time(recorded):
    draft, target = random_gpt2(0, n_ctx=64), random_gpt2(1, n_ctx=64, n_layer=2)
    m = speedup.measure_speedup(draft, target, PROMPT, N=12, Ks=[2], repeats=3, warmup_tokens=0)
    at = m.by_K[2]
    parts = at.breakdown_s
    assert sum(parts.values()) == pytest.approx(np.mean([run.seconds for run in recorded[2]]), rel=1e-9)
    assert parts["other_s"] >= 0 and min(parts.values()) >= 0
    assert m.autoregressive_breakdown_s["other_s"] >= 0
    assert at.speedup_runs.q1 <= at.speedup == at.speedup_runs.median <= at.speedup_runs.q3
    assert speedup.speedup_text(at) == (f"{at.speedup:.2f}x (IQR {at.speedup_runs.q1:.2f}-"
                                        f"{at.speedup_runs.q3:.2f})")


def test_a_draft_that_proposes_nothing_is_a_result_not_a_crash():
    target = random_gpt2(1, n_ctx=64)
    m = speedup.measure_speedup(NoDrafts(target.config.n_vocab), target, PROMPT, N=8, Ks=[3], repeats=3)
    assert m.n_decisions == 0 and np.isnan(m.alpha_hat) and np.isnan(m.by_K[3].alpha_hat)
    at = m.by_K[3]
    assert at.tokens_per_loop == 1.0 and at.n_loops == 3 * 8  # every loop one plain target step
    assert np.isfinite(at.speedup) and at.speedup_runs.q1 <= at.speedup <= at.speedup_runs.q3
    text = "\n".join(speedup.text_lines(m))
    assert speedup.NO_DRAFTS in text and "alpha undefined" in text
    again = speedup.from_dict(json.loads(json.dumps(speedup.as_dict(m))))  # nan survives JSON
    assert again.n_decisions == 0 and np.isnan(again.alpha_hat)


def test_a_draft_identical_to_the_target_is_always_accepted():
    model = random_gpt2(0)
    m = speedup.measure_speedup(model, model, PROMPT, N=9, Ks=[2], repeats=2)
    assert m.alpha_hat == 1.0 and m.by_K[2].tokens_per_loop == 3.0 == theory.expected_tokens_per_loop(1.0, 2)
    assert m.best_K == (2, 2)


def test_the_measurement_survives_json(clocked_pair):
    m = speedup.measure_speedup(*clocked_pair, PROMPT, N=8, Ks=[1, 2], repeats=2)
    again = speedup.from_dict(json.loads(json.dumps(speedup.as_dict(m))))
    assert again == m and again.by_K[2].seconds == m.by_K[2].seconds
    assert "speedup" not in speedup.as_dict(m)["by_K"]["2"]  # derived from speedup_runs, never stored twice


def test_bad_requests_are_refused():
    model = random_gpt2(0)
    with pytest.raises(PicoGPTError, match="at least one K"):
        speedup.measure_speedup(model, model, PROMPT, N=8, Ks=[])
    with pytest.raises(PicoGPTError, match="N >= 2"):
        speedup.measure_speedup(model, model, PROMPT, N=1, Ks=[2])


def test_predictions_follow_the_formulas():
    costs = speedup.Costs(t_draft_s=0.002, t_target_s=0.010, t_score_s={1: 0.010, 4: 0.020})
    pred = speedup.predictions(costs, alpha=0.8, Ks=[1, 4])
    in_loop, flat = pred.values()
    # K = 1, t_score = t_target: both agree: (1 + 0.8) / (0.002 + 0.010) * 0.010
    assert in_loop[0] == pytest.approx(1.8 / 0.012 * 0.010) == pytest.approx(flat[0])
    # K = 4, scoring 5 positions costs twice a step: the arithmetic with t_score = 0.020
    tokens = (1 - 0.8**5) / (1 - 0.8)
    assert in_loop[1] == pytest.approx(tokens / (4 * 0.002 + 0.020) * 0.010)
    # Leviathan et al.'s formula is the same arithmetic with t_score = t_target: one curve
    assert flat[1] == pytest.approx(tokens / (4 * 0.002 + 0.010) * 0.010)
    assert flat[1] == pytest.approx(theory.predicted_speedup(alpha=0.8, K=4, t_draft_s=0.002, t_target_s=0.010))
    assert in_loop[1] < flat[1]


def test_the_gap_accounting_names_the_planted_causes(clocked_pair, recorded):
    """Planted costs: a prompt prefill of 100 s in each first call, none elsewhere. The factors
    must multiply back to the measured speedup, and each must be what the planted clock says."""
    m = speedup.measure_speedup(*clocked_pair, PROMPT, N=20, Ks=[2, 4], repeats=3, warmup_tokens=0)
    gaps = speedup.gap_accounting(m)
    ar_mean_s = 112.0 + 19 * 10.0  # Algorithm 1: prefill call (100 + 10 + 2 positions), 19 steps
    for K, g in gaps.items():
        runs = recorded[K]
        assert g["predicted"] * g["tokens"] * g["loop_time"] / g["autoregressive"] * g["rest"] == pytest.approx(g["measured"])
        assert g["autoregressive"] == pytest.approx(20 * 10.0 / ar_mean_s)  # the prefill is what N t_target leaves out
        n_loops = sum(len(run.loops) for run in runs)
        mean_loop_s = sum(run.seconds for run in runs) / n_loops  # includes the two 100 s prefills per run
        assert g["loop_time"] == pytest.approx((K * 1.0 + 10.0 + K) / mean_loop_s) and g["loop_time"] < 1
        tokens_per_loop = sum(len(loop.tokens) for run in runs for loop in run.loops) / n_loops
        assert g["tokens"] == pytest.approx(tokens_per_loop / theory.expected_tokens_per_loop(m.alpha_hat, K))
    assert len(speedup.gap_lines(m)) == 1 + len(gaps)


def test_a_busy_machine_is_named(clocked_pair):
    m = speedup.measure_speedup(*clocked_pair, PROMPT, N=4, Ks=[1], repeats=1)
    busy = speedup.SpeedupMeasurement(**{**m.__dict__, "load_average_before": [5.0, 1.0, 1.0],
                                         "load_average_after": [0.2, 0.1, 0.1]})
    assert "busy (load average up to 5.0 on 2 cores)" in speedup.busy_warning(busy, cores=2)
    idle = speedup.SpeedupMeasurement(**{**m.__dict__, "load_average_before": [0.1, 0.1, 0.1],
                                         "load_average_after": [0.2, 0.1, 0.1]})
    assert speedup.busy_warning(idle, cores=2) == ""


def test_bench_measurements_say_when_there_are_none(tmp_path):
    found, note = results.bench_measurements(tmp_path / "bench.json")
    assert found == [] and "not measured yet" in note
    (tmp_path / "bench.json").write_text(json.dumps({"models": {}}))
    found, note = results.bench_measurements(tmp_path / "bench.json")
    assert found == [] and "holds no end-to-end speculative-sampling measurement" in note
    (tmp_path / "bench.json").write_text(json.dumps({"speculative": [{"measurement": {}}]}))
    found, note = results.bench_measurements(tmp_path / "bench.json")
    assert found == [] and "cannot be read" in note and str(tmp_path) not in note


def test_measure_chains_races_verifiers_in_the_same_repeats_against_the_same_autoregressive_runs(clocked_pair):
    chains = [speculative.Chain(2), speculative.Chain(2, "block"), speculative.Chain(3)]
    seen = []
    measured = speedup.measure_chains(*clocked_pair, PROMPT, 20, chains, repeats=2, warmup_tokens=0,
                                      on_run=lambda chain, run: seen.append(chain))
    # per repeat each chain and autoregressive sampling, the same seed; the order reversed every other repeat
    assert seen == [*chains, None, None, *chains[::-1]]
    for m in measured.values():  # each repeat's times kept, in repeat order: the pairs compare.py judges
        assert len(m.autoregressive_runs_s) == 2 and all(len(at.runs_s) == 2 for at in m.by_K.values())
    assert set(measured) == {"token", "block"}
    assert measured["token"].Ks == [2, 3] and measured["block"].Ks == [2]
    assert measured["token"].autoregressive_s == measured["block"].autoregressive_s
    for m in measured.values():
        for at in m.by_K.values():
            assert at.speedup_runs.q1 <= at.speedup <= at.speedup_runs.q3
    alone = speedup.measure_speedup(*clocked_pair, PROMPT, 20, [2, 3], repeats=2, warmup_tokens=0)
    assert alone.by_K[2].seconds == measured["token"].by_K[2].seconds  # the fake clock: the same runs
