"""Notebook 06's measurements (picogpt/course/nb06_beyond_one_draft_model.py): the prediction for loops of varying
K is notebook 05's when K is fixed, any draft goes through the same measurement, strategies raced
together share their autoregressive runs, a draft that proposes nothing is reported, and the byte
count of a model's decoding step is the model's own."""

import dataclasses

import numpy as np
import pytest
from helpers import NoDrafts, random_gpt2

from picogpt import theory
from picogpt.course import nb06_beyond_one_draft_model as nb06
from picogpt.drafts import AdaptiveK, PromptLookup, first_layers
from picogpt.measure import speedup
from picogpt.sampling import distribution
from picogpt.speculative import LoopTrace


def loop(K, n_accepted, t_score_s, t_draft_s=0.0):
    return LoopTrace(drafted=(0,) * K, p_drafted=(1.0,) * K, q_drafted=(1.0,) * K, r=(), n_accepted=n_accepted,
                     new_token=0, resampled=n_accepted < K, t_draft_s=t_draft_s, t_score_s=t_score_s, t_decide_s=0.0)


def test_with_one_K_the_loop_prediction_is_notebook_05s_arithmetic():
    loops = [loop(4, 2, 0.012), loop(4, 4, 0.014), loop(4, 0, 0.013)]
    expected = theory.predicted_speedup(alpha=0.7, K=4, t_draft_s=0.002, t_target_s=0.010, t_score_s=0.013)
    assert nb06.loop_prediction(loops, 0.7, 0.002, 0.010) == pytest.approx(expected)


def test_loops_that_drafted_nothing_predict_one_token_each_whatever_alpha():
    loops = [loop(0, 0, 0.011), loop(0, 0, 0.011)]
    assert nb06.loop_prediction(loops, float("nan"), float("nan"), 0.010) == pytest.approx(0.010 / 0.011)


def test_the_loop_prediction_sums_over_loops_of_different_K():
    loops = [loop(0, 0, 0.010), loop(2, 1, 0.012), loop(2, 2, 0.014)]
    tokens = 1 + 2 * theory.expected_tokens_per_loop(0.5, 2)
    seconds = 0.010 + 2 * (2 * 0.001 + 0.013)
    assert nb06.loop_prediction(loops, 0.5, 0.001, 0.010) == pytest.approx(tokens / seconds * 0.010)


@pytest.fixture(scope="module")
def pair():
    return random_gpt2(1), random_gpt2(2, n_layer=2)


@pytest.mark.parametrize("make", [lambda d, t: d, lambda d, t: PromptLookup(t.config.n_vocab),
                                  lambda d, t: AdaptiveK(d, K_start=2), lambda d, t: first_layers(t, 1)])
def test_every_draft_is_measured_by_the_same_measurement(pair, make):
    draft, target = pair
    result = nb06.measure_strategies({"x": (make(draft, target), 3)}, target, [3, 1, 4, 3, 1], N=12,
                                           repeats=2)["x"]
    m = result.measurement
    assert result.K_per_loop <= 3 and result.measured > 0 and result.predicted > 0
    assert result.speedup_runs.q1 <= result.measured <= result.speedup_runs.q3
    assert m.by_K[3].n_loops > 0 and np.isfinite(m.t_target_s)
    assert len(nb06.strategy_lines([result])) == 2 + (m.n_decisions == 0)


def test_strategies_raced_together_share_their_autoregressive_runs(pair):
    draft, target = pair
    seen = []
    found = nb06.measure_strategies({"K = 1": (draft, 1), "K = 3": (draft, 3)}, target, [3, 1, 4], N=10,
                                          repeats=3, on_run=lambda name, run: seen.append(name))
    # interleaved: each strategy and the target alone, the order reversed every other repeat
    assert seen == ["K = 1", "K = 3", None, None, "K = 3", "K = 1", "K = 1", "K = 3", None]
    one, three = found.values()
    assert one.measurement.autoregressive_s == three.measurement.autoregressive_s
    lines = nb06.best_strategy_lines(found)
    assert lines[0].startswith("best strategy measured: K = ") and "resolved" in lines[1]


def test_a_strategy_that_proposes_nothing_is_reported_with_alpha_undefined(pair):
    target = pair[1]
    result = nb06.measure_strategies({"lookup": (NoDrafts(target.config.n_vocab), 4)}, target, [3, 1, 4],
                                           N=8, repeats=2)["lookup"]
    assert result.K_per_loop == 0 and np.isnan(result.alpha_hat) and np.isnan(result.c)
    assert result.predicted == pytest.approx(1 / result.t_score_ratio)  # one token per scoring call
    assert nb06.strategy_lines([result])[-1] == f"lookup: {speedup.NO_DRAFTS}"


def test_a_fixed_K_measurement_reads_as_a_strategy(pair):
    draft, target = pair
    result = nb06.measure_strategies({"x": (draft, 2)}, target, [3, 1, 4], N=10, repeats=2)["x"]
    again = nb06.measurement_result("x", result.measurement, 2)
    assert again.measured == result.measured and again.alpha_hat == result.alpha_hat and again.K_per_loop == 2
    assert again.predicted == result.measurement.by_K[2].predicted


def test_acceptance_of_a_model_with_itself_is_one_and_of_its_first_layer_less(pair):
    target = pair[1]
    ids = [3, 1, 4, 1, 5]
    q_rows = distribution(target(ids))
    assert nb06.mean_acceptance(target, ids, q_rows) == pytest.approx(1.0)
    assert 0 < nb06.mean_acceptance(first_layers(target, 1), ids, q_rows) < 1


def test_bytes_per_token_of_a_config_is_what_the_model_reads():
    model = random_gpt2(3, n_layer=3)
    assert nb06.bytes_per_token(model.config) == model.bytes_per_token
    assert nb06.bytes_per_token(dataclasses.replace(model.config, n_layer=1)) == first_layers(model, 1).bytes_per_token


def test_isolated_c_interleaves_the_two_models_steps_and_reports_the_spread_of_their_ratios(pair):
    calls = []

    class Recorded:
        """A model that notes which model each call was made on."""

        def __init__(self, model, name):
            self.model, self.name = model, name

        def new_cache(self):
            return self.model.new_cache()

        def __call__(self, ids, cache):
            calls.append((self.name, len(ids)))
            return self.model(ids, cache)

    draft, target = pair
    c = nb06.isolated_c(Recorded(draft, "draft"), Recorded(target, "target"), [1, 3, 1, 4, 1], repeats=4, steps=2)
    assert 0 < c.q1 <= c.median <= c.q3
    steps = [name for name, n in calls if n == 1]
    assert calls[:2] == [("draft", 4), ("target", 4)]  # the text before the last token, once each
    assert steps == ["draft", "target"] + ["draft", "draft", "target", "target"] * 4  # warm-up, then each repeat
