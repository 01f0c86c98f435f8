"""The Theorem 1 pictures and widget (notebook 04), tested headless: the numbers behind each figure, the
labels on each axis, and the Theorem 1 explorer driven without a browser."""

import base64

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure

import picogpt
from picogpt.course import viz
from picogpt.errors import PicoGPTError

P_SMALL = np.array([0.5, 0.5, 0.0])
Q_SMALL = np.array([0.2, 0.3, 0.5])


class FixedLogitsModel:
    """Stands in for a GPT2: the same seeded random logits row for each position of any prompt."""

    def __init__(self, seed, n_vocab=50257, scale=3.0):
        self.row = np.random.default_rng(seed).standard_normal(n_vocab).astype(np.float32) * scale
        self.calls = 0
        self.name = f"fixed-{seed}"

    def __call__(self, ids):
        self.calls += 1
        return np.stack([np.roll(self.row, i) for i in range(len(ids))])  # [n_seq, n_vocab]


def walk(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from walk(child)


def find(box, kind):
    return [w for w in walk(box) if type(w).__name__ == kind]


# ---- distributions ---------------------------------------------------------------------------

def test_toy_distributions_are_distributions_and_overlap_falls_as_the_centres_part():
    p, q = viz.toy_distributions(centre_p=3.0, centre_q=3.0, width_p=1.0, width_q=1.0)
    assert p.shape == q.shape == (len(viz.TOY_VOCAB),)
    assert np.isclose(p.sum(), 1) and np.isclose(q.sum(), 1) and (p > 0).all()
    assert viz.theorem1_panel(p, q).p_accept == pytest.approx(1.0)
    alphas = [viz.theorem1_panel(*viz.toy_distributions(centre_p=3.0, centre_q=3.0 + d)).p_accept for d in (0, 1, 2, 4)]
    assert all(a > b for a, b in zip(alphas, alphas[1:])), alphas


def test_toy_width_must_be_positive():
    with pytest.raises(PicoGPTError, match="width"):
        viz.toy_distributions(width_p=0.0)


def test_distributions_at_reads_the_chosen_position_at_each_temperature():
    logits = np.log(np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]]))
    p, q = viz.distributions_at(logits, logits, 1, temperature_p=1.0, temperature_q=0.0)
    np.testing.assert_allclose(p, [0.1, 0.1, 0.8])
    np.testing.assert_array_equal(q, [0.0, 0.0, 1.0])  # temperature 0: greedy, one-hot
    with pytest.raises(PicoGPTError, match="position 2"):
        viz.distributions_at(logits, logits, 2)


def test_token_labels_are_drawable():
    tok = picogpt.tokenizer()
    assert viz.token_label(tok, tok.encode(" the")[0]) == "␣the"
    assert viz.token_label(tok, tok.encode("\n")[0]) == "↵"
    assert viz.token_label(tok, tok.encode(" 🙂")[-1]) == "␣\\U0001f642"  # not in the plot font
    partial = viz.token_label(tok, tok.encode("你好")[0])  # the first bytes of a UTF-8 character
    assert partial.startswith("\\x") and all(ord(c) in viz.drawable_codepoints() for c in partial), partial
    japanese = viz.token_label(tok, tok.encode("の")[0])
    assert japanese == "\\u306e", japanese


def test_shown_tokens_picks_the_largest_mass_of_either_model_and_the_ones_asked_for():
    p, q = np.array([0.6, 0.1, 0.1, 0.2]), np.array([0.1, 0.1, 0.7, 0.1])
    assert list(viz.shown_tokens(p, q, 2)) == [2, 0]
    assert list(viz.shown_tokens(p, q, 2, include=[1, 0])) == [2, 0, 1]
    assert list(viz.shown_tokens(p, q, 10)) == [0, 1, 2, 3]


# ---- Theorem 1 panel ---------------------------------------------------------------------------

def test_theorem1_panel_by_hand():
    panel = viz.theorem1_panel(P_SMALL, Q_SMALL)
    np.testing.assert_allclose(panel.overlap, [0.2, 0.3, 0.0])
    np.testing.assert_allclose(panel.excess, [0.0, 0.0, 0.5])
    np.testing.assert_allclose(panel.residual, [0.0, 0.0, 1.0])
    assert panel.p_accept == pytest.approx(0.5)
    assert "P(accept) = Σ min(p, q) = 0.500" in viz.readout(panel)


def test_accepted_plus_resampled_mass_is_q_for_random_pairs():
    rng = np.random.default_rng(0)
    for _ in range(20):
        p, q = rng.dirichlet(np.ones(50) * 0.3), rng.dirichlet(np.ones(50) * 0.3)
        panel = viz.theorem1_panel(p, q)
        assert panel.identity_error < 1e-15
        assert panel.excess.sum() == pytest.approx(1 - panel.p_accept)  # P(reject) = Σ max(0, q − p)
        assert panel.p_accept == pytest.approx(1 - viz.tv_distance(p, q))


def test_check_pair_rejects_non_distributions():
    with pytest.raises(PicoGPTError, match="same vocabulary"):
        viz.theorem1_panel(np.ones(3) / 3, np.ones(4) / 4)
    with pytest.raises(PicoGPTError, match="q is not a probability distribution"):
        viz.theorem1_panel(np.ones(3) / 3, np.array([0.5, 0.5, 0.5]))


# ---- Monte-Carlo -------------------------------------------------------------------------------

def test_monte_carlo_output_follows_q_not_p():
    p, q = viz.toy_distributions()
    mc = viz.monte_carlo(p, q, 200_000, seed=1)
    assert mc.n == 200_000
    assert mc.tv < 0.01, mc.tv
    assert viz.tv_distance(mc.empirical, p) > 0.3
    assert mc.n_accepted / mc.n == pytest.approx(viz.theorem1_panel(p, q).p_accept, abs=0.01)


def test_monte_carlo_is_seeded():
    p, q = viz.toy_distributions()
    a, b, c = (viz.monte_carlo(p, q, 1000, seed=s) for s in (3, 3, 4))
    np.testing.assert_array_equal(a.counts, b.counts)
    assert not np.array_equal(a.counts, c.counts)
    with pytest.raises(PicoGPTError, match="at least 1"):
        viz.monte_carlo(p, q, 0)


def test_tv_shrinks_as_n_grows():
    p, q = viz.toy_distributions()
    tvs = viz.tv_by_n(p, q, [100, 1_000, 10_000, 100_000], seed=0)
    assert tvs[-1] < tvs[0] / 5, tvs
    assert tvs[-1] < 0.01


def test_lump_keeps_the_shown_tokens_and_one_bucket():
    np.testing.assert_allclose(viz.lump(np.array([0.1, 0.2, 0.3, 0.4]), np.array([3, 1])), [0.4, 0.2, 0.4])


# ---- plots -------------------------------------------------------------------------------------

def labelled(ax):
    return ax.get_xlabel() and ax.get_ylabel() and ax.get_title() and ax.get_legend() is not None


def test_plots_make_their_own_figure_when_given_no_axes():
    ax = viz.plot_identity(viz.theorem1_panel(*viz.toy_distributions()), viz.TOY_VOCAB)
    assert labelled(ax)
    plt.close(ax.figure)


def test_theorem1_figure_has_three_labelled_panels():
    panel = viz.theorem1_panel(*viz.toy_distributions())
    fig = viz.theorem1_figure(panel, viz.TOY_VOCAB)
    assert len(fig.axes) == 3 and all(labelled(ax) for ax in fig.axes)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == list(viz.TOY_VOCAB)
    assert "0.443" in fig.axes[0].get_legend().get_texts()[2].get_text()  # P(accept) of the default toy
    assert viz.figure_png(fig).startswith(b"\x89PNG")


def test_plots_of_a_large_vocabulary_say_what_the_hidden_tokens_hold():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(1000)), rng.dirichlet(np.ones(1000))
    shown = viz.shown_tokens(p, q, 5)
    ax = viz.plot_overlap(viz.theorem1_panel(p, q), [str(t) for t in shown], shown, ax=Figure().subplots())
    assert "the other 995 tokens hold" in ax.get_xlabel()
    assert len(ax.get_xticklabels()) == 5


def test_histogram_and_tv_curve_are_labelled():
    p, q = viz.toy_distributions()
    ax = viz.plot_histogram(viz.monte_carlo(p, q, 500), q, viz.TOY_VOCAB, ax=Figure().subplots())
    assert labelled(ax) and "TV" in ax.get_title()
    ax = viz.plot_tv_curve([10, 100, 1000], [0.3, 0.1, 0.03])
    assert labelled(ax) and ax.get_xscale() == "log"


# ---- the explorer --------------------------------------------------------------------------------

def test_explorer_update_is_pure_and_shows_a_png():
    p, q = viz.toy_distributions()
    text, outputs, panel = viz.explorer_update(p, q, viz.TOY_VOCAB)
    assert text.startswith("P(accept) = Σ min(p, q) = 0.443")
    assert base64.b64decode(outputs[0]["data"]["image/png"]).startswith(b"\x89PNG")
    outputs, mc = viz.monte_carlo_update(p, q, 2000, 0, viz.TOY_VOCAB)
    assert f"TV(empirical, q) = {mc.tv:.4f}" in outputs[0]["text"]


def test_toy_explorer_follows_the_widget_contract():
    box = viz.theorem1_explorer()
    sliders = find(box, "FloatSlider")
    assert len(sliders) == 4 and all(s.description and not s.continuous_update for s in sliders)
    (readout,), (button,), (n_trials,) = find(box, "HTML"), find(box, "Button"), find(box, "Dropdown")
    figure_out, histogram_out = find(box, "Output")
    assert button.description == "Run Monte-Carlo" and n_trials.description
    assert "P(accept) = Σ min(p, q) = 0.443" in readout.value
    first_png = figure_out.outputs[0]["data"]["image/png"]

    sliders[2].value = sliders[0].value  # the target's centre onto the draft's: more overlap
    expected = viz.theorem1_panel(*viz.toy_distributions(**{"centre_p": 2.0, "width_p": 1.5, "centre_q": 2.0, "width_q": 1.0}))
    assert f"P(accept) = Σ min(p, q) = {expected.p_accept:.3f}" in readout.value
    assert figure_out.outputs[0]["data"]["image/png"] != first_png

    n_trials.value = 1000
    button.click()
    text, image = histogram_out.outputs
    assert "n = 1,000 trials" in text["text"] and "TV(empirical, q)" in text["text"]
    assert "image/png" in image["data"]


def test_model_explorer_runs_the_models_once_and_moves_between_positions():
    tok = picogpt.tokenizer()
    draft, target = FixedLogitsModel(0), FixedLogitsModel(1)
    ids = tok.encode("And God said")
    box = viz.theorem1_explorer(draft, target, ids, tok, n_show=6)
    (position,) = find(box, "IntSlider")
    temperatures = find(box, "FloatSlider")
    (readout,) = find(box, "HTML")
    assert position.max == len(ids) - 1 and len(temperatures) == 2
    before = readout.value
    position.value = 0
    temperatures[0].value = 0.0  # greedy draft: P(accept) = q(argmax p)
    p, q = viz.distributions_at(viz.prompt_logits(draft, ids), viz.prompt_logits(target, ids), 0, 0.0, 1.0)
    assert f"= {viz.theorem1_panel(p, q).p_accept:.3f}" in readout.value and readout.value != before
    assert draft.calls == target.calls == 2  # once to build, once here: sliders ran no forward pass
    find(box, "Button")[0].click()
    assert "over the 6 tokens shown plus one bucket" in find(box, "Output")[1].outputs[0]["text"]
