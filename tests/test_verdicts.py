"""Every sentence a verdict or readout prints is true for the numbers it was given, over its whole
domain (Hypothesis draws the numbers): the exercise checkers of notebooks 01-02, notebook 02's
pace and scoring readouts, the resolution statements, the busy-machine warnings.

Each test reads the sentence back (the figures it printed, the claim it made) and checks the
claim against the numbers, computed here independently of the function under test.
"""

import itertools
import math
import re

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from picogpt.course import speed_panels
from picogpt.course.grading import check_number
from picogpt.course.nb01_gpt2_in_numpy import block_params, check_block_params, check_kv_cache_bytes
from picogpt.course.nb02_autoregressive_sampling import check_arithmetic_intensity, machine_line
from picogpt.errors import PicoGPTError
from picogpt.measure import compare, machine, speedup
from picogpt.measure.timing import spread

finite = st.floats(allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-9, max_value=1e9, allow_nan=False, allow_infinity=False)
samples = st.lists(st.floats(min_value=1e-4, max_value=1e3, allow_nan=False), min_size=1, max_size=7)


def number_in(text):
    """The first number printed in text, thousands separators and all, as a float."""
    return float(re.search(r"-?[\d,]*\.?\d+(?:e[+-]?\d+)?", text).group().replace(",", ""))


# ---------------------------------------------------------------------------------------------
# The exercise checkers: the answer shown is the answer given, the hint names every cause
# ---------------------------------------------------------------------------------------------

@given(st.one_of(finite, st.integers(min_value=-2**53, max_value=2**53)))
def test_an_answer_is_shown_exactly_as_given(answer):
    message = check_number(answer, expected=1.0, how="method", solution="worked").message
    shown = message.split(" is not it")[0].split(": ")[0].split(". ")[0] if message else ""
    assert "e+" not in shown or abs(answer) >= 2**53, message  # a whole number is never 7.08787e+06
    assert float(shown.replace(",", "")) == float(answer), message


@given(st.integers(min_value=1, max_value=5000), st.one_of(st.integers(min_value=0, max_value=10**9), positive))
def test_block_params_is_right_exactly_when_the_count_is(n_embd, answer):
    result = check_block_params(answer, n_embd=n_embd)
    assert bool(result) == math.isclose(answer, 12 * n_embd**2 + 13 * n_embd, rel_tol=1e-9)
    if "biases and the LayerNorm weights count too" in result.message:  # the claim: weights alone, 12 n_embd²
        assert math.isclose(answer, 12 * n_embd**2, rel_tol=1e-9)
    assert f"{block_params(n_embd):,}" not in result.message or result  # the number only once right


def kv_cache_ways(n_layer, n_embd, n_positions):
    """{size: {slips}}: every way of counting the KV cache wrong, by brute force over the factors."""
    tensors = {2: None, 1: "counting keys or values but not both"}
    bytes_per_number = {4: None, 1: "counting numbers rather than bytes", 2: "counting 2 bytes per number (float16)",
                        8: "counting 8 bytes per number (float64)"}
    layers = {1: "counting one layer instead of all of them", n_layer: None}  # one layer is no slip when n_layer = 1
    ways = {}
    for t, b, n in itertools.product(tensors, bytes_per_number, layers):
        slips = [slip for slip in (tensors[t], bytes_per_number[b], layers[n]) if slip]
        if slips:
            ways.setdefault(t * b * n * n_positions * n_embd, set()).add(" and ".join(slips))
    return ways


@given(st.integers(1, 96), st.integers(1, 4096), st.integers(1, 4096), st.data())
def test_kv_cache_bytes_names_every_cause_of_a_wrong_size_and_no_other(n_layer, n_embd, n_positions, data):
    expected = 2 * n_layer * n_positions * n_embd * 4
    ways = kv_cache_ways(n_layer, n_embd, n_positions)
    ways.pop(expected, None)  # n_layer = 1 etc.: a slip that changes nothing is no mistake
    answer = data.draw(st.sampled_from([expected, *ways]) | st.integers(1, 10**12))
    result = check_kv_cache_bytes(answer, n_layer, n_embd, n_positions)
    assert bool(result) == (answer == expected)
    if answer in ways:
        named = result.message.split("you get by ", 1)[1].split(": the cache", 1)[0].split(", or by ")
        assert set(named) == ways[answer], result.message
    elif not result:
        assert "is not it" in result.message and "counting" not in result.message


@given(st.floats(min_value=1e-6, max_value=1e6))
@example(0.5).via("exactly what decoding needs")
@example(0.50004).via("a hair above, printed as 0.5")
@example(0.4996).via("a hair below, printed as 0.5")
def test_the_machine_line_agrees_with_the_ratio_it_prints(ratio):
    line = machine_line(ratio)
    printed = number_in(line.split("does ", 1)[1])
    assert math.isclose(printed, ratio, rel_tol=5e-3)
    if "waits on memory" in line:
        assert printed > 0.5 and math.isclose(number_in(line.split("byte, ", 1)[1]), printed / 0.5, rel_tol=5e-3)
    elif "finish together" in line:
        assert printed == 0.5
    else:
        assert "arithmetic, not memory" in line and printed < 0.5
    assert line in check_arithmetic_intensity(0.5, ratio).message


# ---------------------------------------------------------------------------------------------
# Notebook 02's readouts
# ---------------------------------------------------------------------------------------------

@given(st.floats(min_value=1e3, max_value=1e11), st.data(), st.booleans())
@example(1e9, None, False).via("pairs drawn, or the fixed ones below")
def test_the_pace_line_says_what_the_pairs_it_was_given_show(nbytes, data, busy):
    if data is None:  # exactly half in every pair: the interval is [50, 50]
        seconds, gb_per_s = [0.4] * 6, [5.0] * 6
    else:
        n = data.draw(st.integers(1, 20))
        seconds = data.draw(st.lists(positive, min_size=n, max_size=n))
        gb_per_s = data.draw(st.lists(st.floats(min_value=1e-3, max_value=1e4), min_size=n, max_size=n))
    line = speed_panels.pace_line("model", nbytes, seconds, gb_per_s, busy)
    assert ("the machine was busy" in line) == busy
    shares = 100 * nbytes / (np.array(gb_per_s) * 1e9) / np.array(seconds)  # the floor / the decode, per pair
    median, low, high, _ = compare.median_interval(shares)
    assert f"median of {len(shares)} pairs" in line
    if np.isnan(low):
        assert "no verdict" in line and "sets its pace" not in line
        return
    printed_low, printed_high = (float(x.replace(",", "")) for x in
                                 re.search(r"95% interval ([0-9,.]+)-([0-9,.]+)%", line).groups())
    if "from the CPU's caches" in line:
        assert low > 100 and printed_low > 100 and "no pace is read" in line
    elif "reading the weights sets its pace" in line:
        assert 50 < low <= 100 and printed_low > 50
    elif "per-call overhead sets its pace" in line:
        assert high < 50 and printed_high < 50
    else:
        assert "do not say which sets its pace" in line and low <= 50 <= high


@pytest.mark.parametrize("bad", [dict(seconds_per_token=[0]), dict(bandwidth_gbs=[float("nan")]), dict(nbytes=-1),
                                 dict(seconds_per_token=[1e-3, 1e-3])])
def test_the_pace_line_refuses_numbers_it_cannot_read(bad):
    with pytest.raises(PicoGPTError):
        speed_panels.pace_line(**{"name": "m", "nbytes": 1e6, "seconds_per_token": [1e-3], "bandwidth_gbs": [5.0], **bad})


@given(st.integers(1, 16), st.data())
def test_the_scoring_line_claims_a_difference_only_where_the_pairs_resolve_one(n, data):
    one_call_s = data.draw(samples)
    calls_of_one_s = data.draw(st.lists(st.floats(1e-4, 1e3), min_size=len(one_call_s), max_size=len(one_call_s)))
    line = speed_panels.scoring_line(n, one_call_s, calls_of_one_s)
    verdict = compare.compare("one call", one_call_s, f"{n} calls of one", calls_of_one_s,
                              compare.Words(better="cheaper", worse="dearer"))
    assert line.endswith(compare.sentence(verdict))
    one = spread(one_call_s)
    assert f"{one.median * 1e3:.1f} ms ({one.q1 * 1e3:.1f}-{one.q3 * 1e3:.1f}) in one call" in line
    if verdict.resolved:
        cheaper = "one call" if verdict.a_better else f"{n} calls of one"
        assert f"one call {'cheaper' if verdict.a_better else 'dearer'} than {n} calls of one" in line
        ratios = np.array(calls_of_one_s) / one_call_s
        assert np.mean(ratios > 1 if cheaper == "one call" else ratios < 1) > 0.5
    else:
        assert "not resolved" in line


# ---------------------------------------------------------------------------------------------
# Does a measurement resolve its best choice?
# ---------------------------------------------------------------------------------------------

@st.composite
def paired_speedups(draw, min_size=1):
    """{K: each repeat's speedup}, the same number of repeats for every K."""
    repeats = draw(st.integers(1, 12))
    Ks = draw(st.lists(st.integers(1, 12), min_size=min_size, max_size=6, unique=True))
    return {K: draw(st.lists(st.floats(0.1, 10), min_size=repeats, max_size=repeats)) for K in Ks}


@given(paired_speedups(), st.integers(2, 512))
def test_the_resolution_line_is_true_of_the_runs(runs, N):
    repeats = len(next(iter(runs.values())))
    line = speed_panels.resolution_line(runs, "K", repeats, N)
    best = max(runs, key=lambda K: float(np.median(runs[K])))
    assert line.endswith(f"({repeats} repeats of {N} tokens)")
    if len(runs) == 1:
        assert line.startswith(f"nothing to resolve: K = {best} is the only one")
        return
    _, comparisons = compare.best_of(runs, compare.SPEEDUP)
    if line.startswith("resolved:"):  # the best ahead of every other, each interval above 1
        assert f"K = {best} faster than every other" in line and all(c.low > 1 for c in comparisons.values())
        assert all(sum(a > b for a, b in zip(runs[best], runs[K])) > repeats / 2 for K in runs if K != best)
    else:
        listed = [int(K.removeprefix("K = ")) for K in line.split("not resolved: ", 1)[1].split(" cannot", 1)[0].split("; ")]
        assert listed[0] == best and len(listed) >= 2
        assert set(listed[1:]) == {K for K, c in comparisons.items() if not c.low > 1}


# ---------------------------------------------------------------------------------------------
# The busy-machine warning
# ---------------------------------------------------------------------------------------------

loads = st.one_of(st.none(), st.lists(st.floats(min_value=0, max_value=64), min_size=3, max_size=3))


@given(st.lists(loads, min_size=1, max_size=3), st.integers(1, 64))
@example([[2.04, 1.0, 1.0], None], 2).via("a load a hair above the cores, which prints as the cores")
@example([[2.06, 1.0, 1.0]], 2).via("one that prints above them")
def test_the_busy_warning_says_busy_exactly_when_the_load_it_prints_exceeds_the_cores(load_averages, cores):
    warning = machine.busy_warning(load_averages, cores)
    known = [load[0] for load in load_averages if load]
    if warning:
        printed = number_in(warning.split("up to ", 1)[1])
        assert printed == round(max(known), 1) and printed > cores and f"on {cores} cores" in warning
    else:
        assert not known or round(max(known), 1) <= cores


@given(st.floats(min_value=0, max_value=64), st.integers(1, 64))
@example(2.04, 2)
def test_the_speedup_busy_warning_agrees_with_the_load_it_prints(load, cores):
    m = speedup.SpeedupMeasurement(draft="p", target="q", N=2, repeats=1, controls={}, autoregressive_s=spread([1.0]),
                                   autoregressive_breakdown_s={}, t_target_s=1.0, t_draft_s=1.0, alpha_hat=0.5,
                                   n_accepted=0, n_decisions=0, by_K={}, load_average_before=[load, 0, 0],
                                   load_average_after=None)
    assert speedup.busy_warning(m, cores) == machine.busy_warning([[load, 0, 0]], cores)


def measurement(speedups, predicted, N=64):
    """A SpeedupMeasurement holding only what the best-K lines read: each K's repeat-by-repeat
    speedups (over autoregressive runs of 1 s) and its predicted speedup."""
    repeats = len(next(iter(speedups.values())))

    def at(K):
        return speedup.AtK(K=K, seconds=spread([1.0]), speedup_runs=spread(speedups[K]), predicted=predicted[K],
                           t_score_s=1.0, t_decide_s=0.0, tokens_per_loop=1.0, n_accepted=0, n_decisions=0, n_loops=1,
                           breakdown_s={}, runs_s=tuple(1 / np.array(speedups[K])))
    return speedup.SpeedupMeasurement(draft="p", target="q", N=N, repeats=repeats, controls={},
                                      autoregressive_s=spread([1.0]), autoregressive_breakdown_s={}, t_target_s=1.0,
                                      t_draft_s=1.0, alpha_hat=0.5, n_accepted=0, n_decisions=0,
                                      by_K={K: at(K) for K in speedups}, load_average_before=None,
                                      load_average_after=None, autoregressive_runs_s=(1.0,) * repeats)


@given(paired_speedups(), st.data())
def test_the_best_K_lines_name_the_best_measured_and_predicted_and_where_the_prediction_falls(runs, data):
    predicted_by_K = {K: data.draw(st.floats(min_value=0.1, max_value=10)) for K in runs}
    m = measurement(runs, predicted_by_K)
    first, second = speed_panels.best_K_lines(m)
    medians = {K: m.by_K[K].speedup for K in m.Ks}
    best = max(medians, key=medians.get)
    predicted = max(m.Ks, key=lambda K: m.by_K[K].predicted)
    assert first.startswith(f"best K measured: {best} ({medians[best]:.2f}x")
    assert f"best K predicted (in-loop t_score(K)): {predicted} ({m.by_K[predicted].predicted:.2f}x)" in first
    _, tied = speed_panels.indistinguishable_from_best({K: speedup.speedups_by_repeat(m, K) for K in m.Ks})
    if second.startswith("not resolved"):
        assert second.endswith("falls among them" if predicted in tied else "falls outside them")
    else:
        assert "the prediction" not in second
