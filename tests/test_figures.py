"""The course's figures: the right tokens in the right order, every axis labelled."""

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

from picogpt.course import figures, panels  # noqa: E402 (after choosing matplotlib's backend)
from picogpt.io.tokenizer import tokenizer  # noqa: E402 (after choosing matplotlib's backend)


def test_top_tokens_most_probable_first_ties_by_lower_id():
    probs = np.array([0.1, 0.3, 0.2, 0.3, 0.1])
    assert panels.top_tokens(probs, 3).tolist() == [1, 3, 2]


def test_token_label_shows_whitespace():
    tok = tokenizer()
    assert panels.token_label(tok, tok.encode(" Paris")[0]) == "␣Paris"
    assert panels.token_label(tok, tok.encode("\n")[0]) == "↵"


def assert_labelled(ax):
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    assert ax.get_legend() is not None


def test_plot_top_tokens_draws_k_labelled_bars():
    tok = tokenizer()
    probs = np.random.default_rng(0).dirichlet(np.ones(100))
    ax = figures.plot_top_tokens(probs, tok, k=7)
    assert_labelled(ax)
    assert len(ax.patches) == 7
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == [panels.token_label(tok, i) for i in panels.top_tokens(probs, 7)]


def test_plot_top_tokens_against_a_reference_uses_the_reference_order():
    tok = tokenizer()
    reference = np.random.default_rng(1).dirichlet(np.ones(100))
    after = np.zeros(100)
    after[np.argmax(reference)] = 1.0
    ax = figures.plot_top_tokens(after, tok, k=5, reference=reference)
    assert len(ax.patches) == 10  # reference bars behind, new bars in front
    heights = [p.get_height() for p in ax.patches[5:]]
    assert heights == [1.0, 0, 0, 0, 0]


def test_time_and_attention_plots_are_labelled():
    ax = figures.plot_seconds([1, 2, 3], {"with cache": [0.001, 0.001, 0.001]})
    assert_labelled(ax)
    assert "ms" in ax.get_ylabel()
    assert ax.get_lines()[0].get_ydata().tolist() == [1.0, 1.0, 1.0]  # seconds drawn as ms
    ax = figures.plot_grouped_bars(["p", "q"], {"measured": [1, 2], "floor": [0.5, 1]}, title="t")
    assert ax.get_ylabel() and ax.get_title() and ax.get_legend() is not None
    assert [p.get_height() for p in ax.patches] == [1, 2, 0.5, 1]
    ax = figures.plot_attention(np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None], ["a", "b", "c"])
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
