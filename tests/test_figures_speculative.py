"""Notebooks 03, 05 and 06's pictures: the speculative loop as a table, the resample, tokens per
loop, and the speedup plots with their whiskers, tested headless."""

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
from helpers import random_gpt2
from matplotlib.figure import Figure

import picogpt
from picogpt import theory
from picogpt.course import figures, model_runs, panels
from picogpt.errors import PicoGPTError
from picogpt.measure import speedup
from picogpt.measure.timing import Spread
from picogpt.speculative import LoopTrace, speculative_sampling

TOK = picogpt.tokenizer()
A, B, C, D = (TOK.encode(word)[0] for word in (" And", " the", " LORD", " said"))


def trace(n_accepted, resampled, r, new_token=D, **distributions):
    return LoopTrace(drafted=(A, B, C), p_drafted=(0.5, 0.4, 0.2), q_drafted=(0.6, 0.1, 0.3), r=r,
                     n_accepted=n_accepted, new_token=new_token, resampled=resampled,
                     t_draft_s=0.0, t_score_s=0.0, t_decide_s=0.0, **distributions)


def labelled(ax):
    return ax.get_xlabel() and ax.get_ylabel() and ax.get_title() and ax.get_legend() is not None


def test_loop_table_after_a_rejection():
    loop = trace(n_accepted=1, resampled=True, r=(0.9, 0.7))
    rows = panels.loop_rows(loop, TOK)
    assert [row[0] for row in rows] == [1, 2, 3]  # the paper's t, from 1
    assert [row[-1] for row in rows] == ["accepted", "rejected", "not judged (after a rejection)"]
    assert rows[1][4] == pytest.approx(0.25)  # min(1, q/p) = 0.1 / 0.4
    text = panels.loop_table(loop, TOK)
    assert "␣LORD" in text and "x̃_2 rejected; in its place, from (q − p)+: ␣said" in text
    assert "emitted 2 token(s): ␣And ␣said" in text


def test_tiny_probabilities_keep_their_digits():
    assert panels.probability(0.0831) == "  0.0831" and panels.probability(2.1e-5) == " 2.1e-05"
    assert panels.probability(0.0) == "  0.0000"


def test_loop_table_when_every_draft_passes():
    text = panels.loop_table(trace(n_accepted=3, resampled=False, r=(0.1, 0.1, 0.1)), TOK)
    assert "all K = 3 accepted: extra token from q_4: ␣said" in text
    assert "emitted 4 token(s)" in text and "rejected" not in text


def test_marked_text_shows_where_each_token_came_from():
    loops = [trace(1, True, (0.1, 0.9)), trace(3, False, (0.1,) * 3)]
    assert panels.marked_text(loops, TOK) == " And[ said] And the LORD{ said}"
    assert panels.marked_text(loops, TOK, N=3) == " And[ said] And"


def test_rejection_view_points_at_the_resampled_token():
    p = np.full(20, 0.05)
    q = np.zeros(20)
    q[[3, 4]] = 0.5
    loop = trace(n_accepted=0, resampled=True, r=(0.9,), new_token=4,
                 p=np.stack([p, p, p]), q=np.stack([q, q, q, q]))
    panel, shown, labels, highlight, drafted = panels.rejection_view(loop, TOK, n_show=3)
    assert shown[highlight] == 4 and shown[drafted] == A and len(labels) == len(shown)
    assert panel.p_accept == pytest.approx(0.1)
    with pytest.raises(PicoGPTError, match="keep_distributions"):
        panels.rejection_view(trace(n_accepted=0, resampled=True, r=(0.9,)), TOK)


def test_tokens_per_loop_counts_and_prediction():
    loops = [trace(0, True, (0.9,)), trace(1, True, (0.1, 0.9)), trace(3, False, (0.1,) * 3),
             trace(3, False, (0.1,) * 3)]
    assert panels.tokens_per_loop_counts(loops, K=3).tolist() == [1, 1, 0, 2]
    pmf = panels.tokens_per_loop_pmf(0.7, 4)
    assert pmf.sum() == pytest.approx(1)
    assert np.dot(np.arange(1, 6), pmf) == pytest.approx(theory.expected_tokens_per_loop(0.7, 4))


def test_tokens_per_loop_plot_of_a_real_run():
    draft, target = random_gpt2(0), random_gpt2(1)
    result = speculative_sampling(draft, target, [1, 2], 20, K=3, seed=0)
    ax = figures.plot_tokens_per_loop(result.loops, 3, alpha=result.alpha_hat)
    assert labelled(ax) and len(ax.patches) == 4
    assert sum(p.get_height() for p in ax.patches) == pytest.approx(1)
    plt.close(ax.figure)


def test_speedup_plots_are_labelled():
    costs = speedup.Costs(t_draft_s=0.002, t_target_s=0.010, t_score_s={K: 0.010 + 0.001 * K for K in range(1, 9)})
    ax = figures.plot_loop_cost(costs, ax=Figure().subplots())
    assert labelled(ax) and "ms" in ax.get_ylabel()
    calls = {K: Spread(t, t - 0.001, t + 0.002) for K, t in costs.t_score_s.items()}
    ax = figures.plot_loop_cost(costs, calls, ax=Figure().subplots())
    (_, _, (whiskers,)), = ax.containers  # the scoring calls' quartiles, in ms
    assert np.allclose([segment[:, 1] for segment in whiskers.get_segments()],
                       [(1e3 * (t - 0.001), 1e3 * (t + 0.002)) for t in costs.t_score_s.values()])
    Ks = list(range(1, 9))
    measured = [Spread(x, x - 0.1, x + 0.2) for x in np.linspace(1, 2, 8)]
    ax = figures.plot_speedup(Ks, measured, speedup.predictions(costs, 0.8, Ks), ax=Figure().subplots())
    assert labelled(ax) and len(ax.get_legend().get_texts()) == 3  # two predictions and the measurement
    (line, _, (whiskers,)), = ax.containers  # every measured point has its interquartile whisker
    assert np.allclose(line.get_ydata(), np.linspace(1, 2, 8))
    assert np.allclose([segment[:, 1] for segment in whiskers.get_segments()],
                       [(r.q1, r.q3) for r in measured])


def test_the_strategies_figure_draws_each_measured_speedup_with_its_whiskers():
    found = {name: SimpleNamespace(speedup_runs=Spread(x, x - 0.1, x + 0.1), predicted=x + 0.05)
             for name, x in (("prompt lookup", 0.8), ("draft model, fixed K = 4", 1.7))}
    ax = figures.plot_strategies(found, ax=Figure().subplots())
    assert labelled(ax) and len(ax.get_xticklabels()) == 2
    measured = next(c for c in ax.containers if getattr(c, "errorbar", None) is not None)
    assert [bar.get_height() for bar in measured] == pytest.approx([0.8, 1.7])
    (whiskers,) = measured.errorbar.lines[2]
    assert np.allclose([segment[:, 1] for segment in whiskers.get_segments()], [(0.7, 0.9), (1.6, 1.8)])


def test_a_scoring_call_and_one_row_calls_agree_up_to_rounding():
    """Notebook 03's measurement of where floating point enters: the same logits, summed in
    another order, differ by float32 rounding, far below the gaps that decide a greedy choice."""
    model = random_gpt2(2)
    ids = list(np.random.default_rng(0).integers(0, model.config.n_vocab, 20))
    rounding = model_runs.scoring_rounding(model, ids, n_prompt=5, K=4)
    print(rounding)
    assert rounding.n_positions == 15 and rounding.max_abs_diff < 1e-4 and rounding.max_relative_diff < 1e-5
    assert rounding.smallest_gap > 0 and rounding.could_flip_greedy == (rounding.smallest_gap <= 2 * rounding.max_abs_diff)
