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
from picogpt.course import figures, model_runs, panels, widgets
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
    p, q = panels.toy_distributions(centre_p=3.0, centre_q=3.0, width_p=1.0, width_q=1.0)
    assert p.shape == q.shape == (len(panels.TOY_VOCAB),)
    assert np.isclose(p.sum(), 1) and np.isclose(q.sum(), 1) and (p > 0).all()
    assert panels.theorem1_panel(p, q).p_accept == pytest.approx(1.0)
    alphas = [panels.theorem1_panel(*panels.toy_distributions(centre_p=3.0, centre_q=3.0 + d)).p_accept for d in (0, 1, 2, 4)]
    assert all(a > b for a, b in zip(alphas, alphas[1:])), alphas


def test_toy_width_must_be_positive():
    with pytest.raises(PicoGPTError, match="width"):
        panels.toy_distributions(width_p=0.0)


def test_distributions_at_reads_the_chosen_position_at_each_temperature():
    logits = np.log(np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]]))
    p, q = panels.distributions_at(logits, logits, 1, temperature_p=1.0, temperature_q=0.0)
    np.testing.assert_allclose(p, [0.1, 0.1, 0.8])
    np.testing.assert_array_equal(q, [0.0, 0.0, 1.0])  # temperature 0: greedy, one-hot
    with pytest.raises(PicoGPTError, match="position 2"):
        panels.distributions_at(logits, logits, 2)


def test_token_labels_are_drawable():
    tok = picogpt.tokenizer()
    assert panels.token_label(tok, tok.encode(" the")[0]) == "␣the"
    assert panels.token_label(tok, tok.encode("\n")[0]) == "↵"
    assert panels.token_label(tok, tok.encode(" 🙂")[-1]) == "␣\\U0001f642"  # not in the plot font
    partial = panels.token_label(tok, tok.encode("你好")[0])  # the first bytes of a UTF-8 character
    assert partial.startswith("\\x") and all(ord(c) in panels.drawable_codepoints() for c in partial), partial
    japanese = panels.token_label(tok, tok.encode("の")[0])
    assert japanese == "\\u306e", japanese


def test_shown_tokens_picks_the_largest_mass_of_either_model_and_the_ones_asked_for():
    p, q = np.array([0.6, 0.1, 0.1, 0.2]), np.array([0.1, 0.1, 0.7, 0.1])
    assert list(panels.shown_tokens(p, q, 2)) == [2, 0]
    assert list(panels.shown_tokens(p, q, 2, include=[1, 0])) == [2, 0, 1]
    assert list(panels.shown_tokens(p, q, 10)) == [0, 1, 2, 3]


# ---- Theorem 1 panel ---------------------------------------------------------------------------

def test_theorem1_panel_by_hand():
    panel = panels.theorem1_panel(P_SMALL, Q_SMALL)
    np.testing.assert_allclose(panel.overlap, [0.2, 0.3, 0.0])
    np.testing.assert_allclose(panel.excess, [0.0, 0.0, 0.5])
    np.testing.assert_allclose(panel.residual, [0.0, 0.0, 1.0])
    assert panel.p_accept == pytest.approx(0.5)
    assert "P(accept) = Σ min(p, q) = 0.500" in panels.readout(panel)


def test_accepted_plus_resampled_mass_is_q_for_random_pairs():
    rng = np.random.default_rng(0)
    for _ in range(20):
        p, q = rng.dirichlet(np.ones(50) * 0.3), rng.dirichlet(np.ones(50) * 0.3)
        panel = panels.theorem1_panel(p, q)
        assert panel.identity_error < 1e-15
        assert panel.excess.sum() == pytest.approx(1 - panel.p_accept)  # P(reject) = Σ max(0, q − p)
        assert panel.p_accept == pytest.approx(1 - panels.tv_distance(p, q))


def test_check_pair_rejects_non_distributions():
    with pytest.raises(PicoGPTError, match="same vocabulary"):
        panels.theorem1_panel(np.ones(3) / 3, np.ones(4) / 4)
    with pytest.raises(PicoGPTError, match="q is not a probability distribution"):
        panels.theorem1_panel(np.ones(3) / 3, np.array([0.5, 0.5, 0.5]))


# ---- Monte-Carlo -------------------------------------------------------------------------------

def test_monte_carlo_output_follows_q_not_p():
    p, q = panels.toy_distributions()
    mc = panels.monte_carlo(p, q, 200_000, seed=1)
    assert mc.n == 200_000
    assert mc.tv < 0.01, mc.tv
    assert panels.tv_distance(mc.empirical, p) > 0.3
    assert mc.n_accepted / mc.n == pytest.approx(panels.theorem1_panel(p, q).p_accept, abs=0.01)


def test_monte_carlo_is_seeded():
    p, q = panels.toy_distributions()
    a, b, c = (panels.monte_carlo(p, q, 1000, seed=s) for s in (3, 3, 4))
    np.testing.assert_array_equal(a.counts, b.counts)
    assert not np.array_equal(a.counts, c.counts)
    with pytest.raises(PicoGPTError, match="at least 1"):
        panels.monte_carlo(p, q, 0)


def test_tv_shrinks_as_n_grows():
    p, q = panels.toy_distributions()
    tvs = panels.tv_by_n(p, q, [100, 1_000, 10_000, 100_000], seed=0)
    assert tvs[-1] < tvs[0] / 5, tvs
    assert tvs[-1] < 0.01


def test_lump_keeps_the_shown_tokens_and_one_bucket():
    np.testing.assert_allclose(panels.lump(np.array([0.1, 0.2, 0.3, 0.4]), np.array([3, 1])), [0.4, 0.2, 0.4])


# ---- plots -------------------------------------------------------------------------------------

def labelled(ax):
    return ax.get_xlabel() and ax.get_ylabel() and ax.get_title() and ax.get_legend() is not None


def test_plots_make_their_own_figure_when_given_no_axes():
    ax = figures.plot_identity(panels.theorem1_panel(*panels.toy_distributions()), panels.TOY_VOCAB)
    assert labelled(ax)
    plt.close(ax.figure)


def test_theorem1_figure_has_three_labelled_panels():
    panel = panels.theorem1_panel(*panels.toy_distributions())
    fig = figures.theorem1_figure(panel, panels.TOY_VOCAB)
    assert len(fig.axes) == 3 and all(labelled(ax) for ax in fig.axes)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == list(panels.TOY_VOCAB)
    assert "0.443" in fig.axes[0].get_legend().get_texts()[2].get_text()  # P(accept) of the default toy
    assert figures.figure_png(fig).startswith(b"\x89PNG")


def test_plots_of_a_large_vocabulary_say_what_the_hidden_tokens_hold():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(1000)), rng.dirichlet(np.ones(1000))
    shown = panels.shown_tokens(p, q, 5)
    ax = figures.plot_overlap(panels.theorem1_panel(p, q), [str(t) for t in shown], shown, ax=Figure().subplots())
    assert "the other 995 tokens hold" in ax.get_xlabel()
    assert len(ax.get_xticklabels()) == 5


def test_histogram_and_tv_curve_are_labelled():
    p, q = panels.toy_distributions()
    ax = figures.plot_histogram(panels.monte_carlo(p, q, 500), q, panels.TOY_VOCAB, ax=Figure().subplots())
    assert labelled(ax) and "TV" in ax.get_title()
    ax = figures.plot_tv_curve([10, 100, 1000], [0.3, 0.1, 0.03])
    assert labelled(ax) and ax.get_xscale() == "log"


# ---- the explorer --------------------------------------------------------------------------------

def test_explorer_update_is_pure_and_shows_a_png():
    p, q = panels.toy_distributions()
    text, outputs, panel = widgets.explorer_update(p, q, panels.TOY_VOCAB)
    assert text.startswith("P(accept) = Σ min(p, q) = 0.443")
    assert base64.b64decode(outputs[0]["data"]["image/png"]).startswith(b"\x89PNG")
    outputs, mc = widgets.monte_carlo_update(p, q, 2000, 0, panels.TOY_VOCAB)
    assert f"TV(empirical, q) = {mc.tv:.4f}" in outputs[0]["text"]


def test_toy_explorer_follows_the_widget_contract():
    box = widgets.theorem1_explorer()
    sliders = find(box, "FloatSlider")
    assert len(sliders) == 4 and all(s.description and not s.continuous_update for s in sliders)
    (readout,), (button,), (n_trials,) = find(box, "HTML"), find(box, "Button"), find(box, "Dropdown")
    figure_out, histogram_out = find(box, "Output")
    assert button.description == "Run Monte-Carlo" and n_trials.description
    assert "P(accept) = Σ min(p, q) = 0.443" in readout.value
    first_png = figure_out.outputs[0]["data"]["image/png"]

    sliders[2].value = sliders[0].value  # the target's centre onto the draft's: more overlap
    expected = panels.theorem1_panel(*panels.toy_distributions(centre_p=2.0, width_p=1.5, centre_q=2.0, width_q=1.0))
    assert f"P(accept) = Σ min(p, q) = {expected.p_accept:.3f}" in readout.value
    assert figure_out.outputs[0]["data"]["image/png"] != first_png

    n_trials.value = 1000
    button.click()
    text, image = histogram_out.outputs
    assert "n = 1,000 trials" in text["text"] and "TV(empirical, q)" in text["text"]
    assert "image/png" in image["data"]

    (switch,) = find(box, "ToggleButtons")  # the residual switch re-runs the trials
    assert switch.value == "(q − p)+" and set(switch.options) == {(v, k) for k, v in panels.RESIDUALS.items()}
    switch.value = "q"
    assert "wrong: resample from q" in readout.value and "TV(output, q)" in readout.value
    text, _ = histogram_out.outputs
    wrong = panels.theorem1_panel(*panels.toy_distributions(centre_q=2.0), choice="q").output_tv
    assert f"exactly, TV(output, q) = {wrong:.4f}" in text["text"]


def test_every_wrong_residual_moves_the_output_away_from_q_and_the_right_one_does_not():
    p, q = panels.toy_distributions()
    for choice in panels.RESIDUALS:
        panel = panels.theorem1_panel(p, q, choice)
        np.testing.assert_allclose(panel.output.sum(), 1)
        mc = panels.monte_carlo(p, q, 100_000, seed=1, choice=choice)
        print(f"{choice}: exact TV(output, q) = {panel.output_tv:.4f}, Monte-Carlo TV = {mc.tv:.4f}")
        if choice == "(q − p)+":
            assert panel.output_tv < 1e-12 and mc.tv < 0.01
        else:
            assert panel.output_tv > 0.05 and abs(mc.tv - panel.output_tv) < 0.01
    np.testing.assert_allclose(panels.theorem1_panel(p, q, "none").output, p)  # always accept: output p
    with pytest.raises(PicoGPTError, match="residual choice"):
        panels.theorem1_panel(p, q, "q - p")


def test_the_naive_test_accepts_less_than_min_p_q():
    for seed in range(5):
        p, q = np.random.default_rng(seed).dirichlet(np.ones(6), size=2)
        panel = panels.theorem1_panel(p, q)
        assert panel.p_accept_naive == pytest.approx(p @ q) and panel.p_accept_naive <= panel.p_accept
    assert "Σ p·q = " in panels.readout(panel)


def test_figures_are_sharp_enough_for_a_projector_and_mark_the_draft():
    assert figures.DPI >= 110
    panel = panels.theorem1_panel(*panels.toy_distributions())
    ax = figures.plot_overlap(panel, panels.TOY_VOCAB, drafted=2, ax=Figure().subplots())
    assert any("drafted x̃" in t.get_text() for t in ax.get_legend().get_texts())
    fig = figures.theorem1_figure(panel, panels.TOY_VOCAB)
    png = figures.figure_png(fig)
    width = int.from_bytes(png[16:20], "big")
    assert width == round(fig.get_figwidth() * figures.DPI)


def test_model_explorer_runs_the_models_once_and_moves_between_positions():
    tok = picogpt.tokenizer()
    draft, target = FixedLogitsModel(0), FixedLogitsModel(1)
    ids = tok.encode("And God said")
    box = widgets.theorem1_explorer(draft, target, ids, tok, n_show=6)
    (position,) = find(box, "IntSlider")
    temperatures = find(box, "FloatSlider")
    (readout,) = find(box, "HTML")
    assert position.max == len(ids) - 1 and len(temperatures) == 2
    before = readout.value
    position.value = 0
    temperatures[0].value = 0.0  # greedy draft: P(accept) = q(argmax p)
    p, q = panels.distributions_at(model_runs.prompt_logits(draft, ids), model_runs.prompt_logits(target, ids), 0, 0.0, 1.0)
    assert f"= {panels.theorem1_panel(p, q).p_accept:.3f}" in readout.value and readout.value != before
    assert draft.calls == target.calls == 2  # once to build, once here: sliders ran no forward pass
    find(box, "Button")[0].click()
    assert "over the 6 tokens shown + the rest lumped" in find(box, "Output")[1].outputs[0]["text"]


def test_legends_sit_clear_of_the_bars():
    peaked = np.array([0.02, 0.9, 0.02, 0.02, 0.02, 0.02])
    for p, q in (panels.toy_distributions(), (peaked, np.roll(peaked, 1)), (np.roll(peaked, 1), peaked)):
        fig = figures.theorem1_figure(panels.theorem1_panel(p, q), [str(i) for i in range(len(p))])
        fig.canvas.draw()
        for ax in fig.axes:
            legend = ax.get_legend().get_window_extent()
            bars = [bar.get_window_extent() for bar in ax.patches if bar.get_height() > 0]
            assert not any(legend.overlaps(bar) for bar in bars), ax.get_title()


def test_the_residual_panel_shows_what_a_wrong_step_draws_from():
    p, q = panels.toy_distributions()
    ax = figures.plot_residual(panels.theorem1_panel(p, q, "p"), panels.TOY_VOCAB, ax=Figure().subplots())
    assert "(wrong)" in ax.get_title() and len(ax.patches) == 3 * len(p)
    np.testing.assert_allclose([bar.get_height() for bar in ax.patches[2 * len(p):]], p)
    ax = figures.plot_residual(panels.theorem1_panel(p, q), panels.TOY_VOCAB, ax=Figure().subplots())
    assert ax.get_title() == "Reject: resample from (q − p)+" and len(ax.patches) == 2 * len(p)


# ---- p = q, and wrong residuals that happen to give q -------------------------------------------

def test_a_wrong_residual_that_gives_q_says_why_and_is_never_called_wrong_at_tv_0():
    p = q = panels.toy_distributions(centre_p=3.0, width_p=1.0)[0]
    disjoint_p, disjoint_q = np.array([0.5, 0.5, 0.0, 0.0]), np.array([0.0, 0.0, 0.3, 0.7])
    point_q = np.array([0.0, 1.0, 0.0])  # a greedy target: (q − p)+ = q whatever p is
    cases = [((p, q, "q"), "nothing is rejected"), ((p, q, "p"), "nothing is rejected"),
             ((p, q, "none"), "keeping every draft gives q"), ((disjoint_p, disjoint_q, "q"), "share no token"),
             ((np.array([0.2, 0.5, 0.3]), point_q, "q"), "q is a point mass"),
             ((np.array([0.1, 0.3, 0.3, 0.3]), np.array([0.0, 0.0, 0.5, 0.5]), "q"), "same fraction of q")]
    for (p_, q_, choice), why in cases:
        panel = panels.theorem1_panel(p_, q_, choice)
        text = panels.readout(panel)
        assert "gives exactly q for this pair" in text and why in text and "not q" not in text, text
        assert "too small" not in text and "sliders" not in text, text  # it is 0, and no slider move changes that
        outputs, _ = widgets.monte_carlo_update(p_, q_, 500, 0, [str(i) for i in range(len(p_))], choice=choice)
        assert "however large n is" not in outputs[0]["text"] and why in outputs[0]["text"], outputs[0]["text"]
    wrong = panels.theorem1_panel(*panels.toy_distributions(), "q")
    assert f"the output is not q, TV(output, q) = {wrong.output_tv:.3f}" in panels.readout(wrong)
    assert panels.why_exact(wrong) is None and wrong.output_tv > 0.1
    outputs, _ = widgets.monte_carlo_update(*panels.toy_distributions(), 500, 0, panels.TOY_VOCAB, choice="q")
    assert "however large n is" in outputs[0]["text"]
    nearly = panels.theorem1_panel(np.array([0.5, 0.5]), np.array([0.5001, 0.4999]), "p")  # visible to no bar
    text = panels.readout(nearly)
    assert "too small to show" in text and "0.0001 × 0.5 = 5e-05" in text, text


def test_with_p_equal_to_q_the_residual_is_drawn_empty_and_said_to_be_unused():
    p = q = panels.toy_distributions()[1]
    panel = panels.theorem1_panel(p, q)
    assert panel.never_rejects and panels.NOTHING_REJECTED in panels.readout(panel)
    ax = figures.plot_residual(panel, panels.TOY_VOCAB, ax=Figure().subplots())
    assert all(bar.get_height() == 0 for bar in ax.patches)  # neither max(0, q − p) nor (q − p)+ has any mass
    assert any(panels.NOTHING_REJECTED in t.get_text() for t in ax.get_legend().get_texts())
    assert not panels.theorem1_panel(*panels.toy_distributions()).never_rejects


def test_a_histogram_of_some_tokens_is_titled_with_the_tv_it_can_show():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(5000)), rng.dirichlet(np.ones(5000))
    mc = panels.monte_carlo(p, q, 2000, seed=0)
    shown = panels.shown_tokens(p, q, 10)
    lumped, over = panels.shown_tv(mc, q, shown)
    assert lumped < mc.tv and "10 tokens shown" in over  # over 5,000 tokens, 2,000 trials are mostly noise
    ax = figures.plot_histogram(mc, q, [str(t) for t in shown], shown, ax=Figure().subplots())
    assert f"{lumped:.4f}" in ax.get_title() and f"{mc.tv:.4f}" not in ax.get_title()
    outputs, _ = widgets.monte_carlo_update(p, q, 2000, 0, [str(t) for t in shown], shown)
    assert outputs[0]["text"].startswith("n = 2,000 trials") and f"= {lumped:.4f} over the 10" in outputs[0]["text"]


# ---- no exact rule accepts more ---------------------------------------------------------------------

def test_the_rejection_step_attains_the_coupling_bound_and_the_exact_match_test_never_exceeds_it():
    rng = np.random.default_rng(0)
    for _ in range(20):
        p, q = rng.dirichlet(np.ones(40) * 0.3), rng.dirichlet(np.ones(40) * 0.3)
        a = panels.acceptance(p, q)
        assert a.rejection == pytest.approx(a.bound, abs=1e-12) and a.exact_match <= a.bound + 1e-15
        assert a.exact_match < a.bound - 1e-3  # far below for two spread-out distributions
    point_mass = np.eye(40)[3]  # a deterministic draft: the two tests keep x̃ alike
    a = panels.acceptance(point_mass, q)
    assert a.exact_match == pytest.approx(a.bound) == pytest.approx(q[3])


def test_acceptance_curves_move_one_temperature_at_a_time():
    logits_p, logits_q = np.random.default_rng(1).standard_normal((2, 30)) * 2
    curves = panels.acceptance_curves(logits_p, logits_q, temperature_p=0.5, temperature_q=1.5)
    assert set(curves) == {"draft", "target"} and all(len(v) == len(panels.TEMPERATURES) for v in curves.values())
    i = list(panels.TEMPERATURES).index(0.5)
    j = list(panels.TEMPERATURES).index(1.5)
    assert curves["draft"][i] == curves["target"][j]  # both are the current setting
    greedy_target = curves["target"][0]  # q at temperature 0 is a point mass: exact match is as good
    assert greedy_target.exact_match == pytest.approx(greedy_target.bound)
    axes = figures.plot_acceptance(curves, 0.5, 1.5)
    assert all(ax.get_xlabel() and ax.get_ylabel() and ax.get_title() for ax in axes)
    assert len(axes[0].figure.legends) == 1
    plt.close(axes[0].figure)


def test_the_acceptance_explorer_is_wired_to_its_pure_update():
    tok = picogpt.tokenizer()
    draft, target = FixedLogitsModel(0, n_vocab=500), FixedLogitsModel(1, n_vocab=500)
    ids = tok.encode("And God said")
    box = widgets.acceptance_explorer(draft, target, ids, tok)
    assert draft.calls == target.calls == 1  # the logits, once
    temperature_p, temperature_q = find(box, "FloatSlider")
    (readout,), (figure_out,) = find(box, "HTML"), find(box, "Output")
    assert not temperature_p.continuous_update and "rejection step" in readout.value
    temperature_q.value = 0.0
    assert draft.calls == target.calls == 1  # the sliders run no forward pass
    logits_p, logits_q = model_runs.prompt_logits(draft, ids)[-1], model_runs.prompt_logits(target, ids)[-1]
    text, outputs, now = widgets.acceptance_update(logits_p, logits_q, 1.0, 0.0)
    assert readout.value == text and f"bound 1 − TV(p, q) = {now.bound:.4f}" in text
    assert base64.b64decode(figure_out.outputs[0]["data"]["image/png"]).startswith(b"\x89PNG")
