"""Every sentence a readout or a verdict prints is true for the numbers it was given, over the
whole of its input domain, not only for the numbers a notebook ran on: property tests (Hypothesis)
of the Theorem 1 explorer's readouts (notebook 04), the candidates explorer's and the bound it
prints (07), the verdicts on the fastest tree and strategy (06, 07), the draft-time comparison of
trees and chains (07) and the rounding verdict on greedy choices (03). (The resolution statements
themselves, speed_panels.resolution_line and best_K_lines, are tests/test_verdicts.py's.)

Each test draws inputs from the whole domain (distributions with zeros, point masses, equal and
disjoint pairs; spreads that overlap or not) and asserts that each claim the text makes holds."""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from picogpt import theory
from picogpt.course import nb06_beyond_one_draft_model as nb06
from picogpt.course import nb07_token_trees as nb07
from picogpt.course import panels, speed_panels
from picogpt.course.nb07_token_trees import RULES
from picogpt.measure.timing import Spread
from picogpt.rejection import RESIDUAL_MASS_EPS

EXACT = 10 * panels.ROUNDING_TV  # what "exact" may be off by: the rounding of a few sums of products
PROPERTY = settings(max_examples=300, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])  # no .hypothesis/ folder left behind

# ---------------------------------------------------------------------------------------------
# The domain: pairs of distributions, with the cases that make a wrong rule exact drawn on purpose
# ---------------------------------------------------------------------------------------------

RELATIONS = ("any", "equal", "q a point mass", "p a point mass", "disjoint", "p a fraction of q on q's tokens",
             "nearly equal")


def normalised(weights):
    weights = np.asarray(weights, np.float64)
    return weights / weights.sum()


@st.composite
def weights(draw, n, zeros=True):
    """n non-negative weights, not all zero (some exactly zero when `zeros`)."""
    one = st.floats(1e-6, 1.0)
    values = draw(st.lists(st.one_of(st.just(0.0), one) if zeros else one, min_size=n, max_size=n))
    assume(sum(values) > 0)
    return np.array(values)


@st.composite
def pairs(draw, max_vocab=8):
    """(p, q) over 2..max_vocab tokens, related as one of RELATIONS."""
    n = draw(st.integers(2, max_vocab))
    relation = draw(st.sampled_from(RELATIONS))
    p, q = normalised(draw(weights(n))), normalised(draw(weights(n)))
    if relation == "equal":
        q = p.copy()
    elif relation == "q a point mass":
        q = np.eye(n)[draw(st.integers(0, n - 1))]
    elif relation == "p a point mass":
        p = np.eye(n)[draw(st.integers(0, n - 1))]
    elif relation == "disjoint":
        split = draw(st.integers(1, n - 1))
        p, q = normalised(np.r_[draw(weights(split, zeros=False)), np.zeros(n - split)]), \
            normalised(np.r_[np.zeros(split), draw(weights(n - split, zeros=False))])
    elif relation == "p a fraction of q on q's tokens":
        fraction = draw(st.floats(0.05, 0.95))
        outside = q == 0
        assume(outside.any())
        p = fraction * q + (1 - fraction) * normalised(np.where(outside, draw(weights(n, zeros=False)), 0.0))
    elif relation == "nearly equal":
        q = normalised(p + draw(st.floats(1e-9, 1e-3)) * normalised(draw(weights(n, zeros=False))))
    return p, q


# ---------------------------------------------------------------------------------------------
# Notebook 04: the Theorem 1 explorer's readout and its Monte-Carlo summary
# ---------------------------------------------------------------------------------------------

def claims_of_a_wrong_choice(panel, text):
    """Assert every claim `text` (wrong_choice_text or the Monte-Carlo summary) makes about `panel`."""
    tv = panel.output_tv
    assert "sliders apart" not in text
    if "gives exactly q for this pair" in text:
        assert tv <= EXACT, text
        assert "not q" not in text and "too small" not in text
        if "p = q here" in text:
            assert panel.excess.sum() <= RESIDUAL_MASS_EPS
        if "q is a point mass" in text:
            assert panel.choice == "q" and np.count_nonzero(panel.q) == 1
            assert np.allclose(panel.residual, panel.q)  # (q − p)+ = q: no p can change it
        if "share no token" in text:
            assert panel.choice == "q" and panel.p_accept <= RESIDUAL_MASS_EPS
        if "same fraction of q" in text:
            on_q = panel.q > 0
            ratio = panel.p[on_q] / panel.q[on_q]
            assert np.allclose(ratio, ratio[0], atol=1e-6)
        return
    assert "not q" in text, text
    rejected, apart = panels.error_factors(panel)
    assert rejected > RESIDUAL_MASS_EPS and apart > 0  # mathematically not q: a rejection happens, and draws wrongly
    assert rejected * apart == pytest.approx(tv, abs=1e-12)  # TV(output, q) = P(reject) × TV(fallback, (q − p)+)
    if "too small to show" in text:
        assert tv < panels.VISIBLE_TV
    else:
        shown = re.search(r"TV\(output, q\) = ([0-9.]+)", text).group(1)
        assert float(shown) > 0 and tv >= panels.VISIBLE_TV, text


@PROPERTY
@given(pairs(), st.sampled_from(list(panels.RESIDUALS)))
def test_the_theorem1_readout_is_true_for_every_pair_and_residual(pair, choice):
    panel = panels.theorem1_panel(*pair, choice)
    text = panels.readout(panel)
    assert f"P(accept) = Σ min(p, q) = {theory.acceptance_rate(*pair):.3f}" in text
    if choice == "(q − p)+":
        assert panel.output_tv <= EXACT  # Theorem 1
        assert ("p = q: (q − p)+ is" in text) == panel.never_rejects
        return
    claims_of_a_wrong_choice(panel, panels.wrong_choice_text(panel))
    assert panels.wrong_choice_text(panel) in text
    title = panels.identity_title(panel)  # over the figure's accepted + resampled bars
    assert ("yet output = q" in title) == ("gives exactly q" in text) and ("≠ q" in title) == ("not q" in text)
    if "≠ q" in title:
        assert float(re.search(r"TV = ([0-9.e-]+)", title).group(1)) > 0


@PROPERTY
@given(pairs(), st.sampled_from(list(panels.RESIDUALS)), st.integers(1, 300), st.integers(0, 2**32 - 1))
def test_the_monte_carlo_summary_is_true_for_every_pair_residual_and_run(pair, choice, n, seed):
    panel = panels.theorem1_panel(*pair, choice)
    mc = panels.monte_carlo(*pair, n, seed, choice)
    text = panels.monte_carlo_text(panel, mc)
    assert f"{mc.n_accepted / mc.n:.1%} accepted" in text
    assert ("none was rejected" in text) == (mc.n_accepted == mc.n)
    if choice != "(q − p)+":
        claims_of_a_wrong_choice(panel, text)
        assert ("however large n is" in text) == ("not q" in text)


@PROPERTY
@given(st.integers(2, 50), st.integers(0, 2**32 - 1), st.one_of(st.just(0.0), st.floats(0.05, 2.0)))  # the slider's range
def test_a_greedy_target_is_a_point_mass_and_resampling_from_it_is_said_exact(n_vocab, seed, temperature_p):
    """Notebook 04 §6's explorer at target temperature 0: q is one-hot, so (q − p)+ = q exactly."""
    rng = np.random.default_rng(seed)
    logits_p, logits_q = rng.standard_normal((2, 1, n_vocab)) * 3
    p, q = panels.distributions_at(logits_p, logits_q, 0, temperature_p, 0.0)
    text = panels.readout(panels.theorem1_panel(p, q, "q"))
    assert "gives exactly q for this pair" in text and "too small" not in text, text
    assert "q is a point mass" in text or "p = q here" in text


# ---------------------------------------------------------------------------------------------
# Notebook 07: the candidates explorer
# ---------------------------------------------------------------------------------------------

@PROPERTY
@given(pairs(max_vocab=6), st.integers(1, 4), st.sampled_from(list(RULES)), st.booleans())
def test_the_candidates_readout_is_true_for_every_pair_m_rule_and_drawing(pair, m, rule, independent):
    p, q = pair
    panel = nb07.candidates_panel(p, q, m, rule, independent)
    right = nb07.candidates_panel(p, q, m, independent=independent)
    text = nb07.candidates_readout(panel)
    drawn = m if independent else min(m, np.count_nonzero(p))
    assert text.startswith(f"{drawn} candidate"), text
    assert ("no more can be drawn" in text) == (drawn < m)
    assert f"Σ min(p, q) = {theory.acceptance_rate(p, q):.3f}" in text
    title = nb07.candidates_title(panel)  # over the explorer's figure
    assert title.startswith(f"{drawn} candidate")
    printed_tv = float(re.search(r"TV\(output, q\) = ([0-9.e-]+)", title).group(1))
    assert (printed_tv > 0) == (panel.tv > panels.ROUNDING_TV) or panel.tv >= panels.VISIBLE_TV
    if rule == nb07.MULTI_STEP.name:
        assert "the output is q" in text and panel.tv <= EXACT
        return
    if "exact for this pair" in text:
        assert panel.tv <= panels.ROUNDING_TV and "not q" not in text
        if "keeps fewer" in text:
            ours, theirs = re.search(r"P\(one is kept\) = ([0-9.]+) against ([0-9.]+)", text).groups()
            assert panel.kept < right.kept - panels.ROUNDING_TV and float(ours) < float(theirs), text
        elif "keeps more" in text:
            assert panel.kept > right.kept + panels.ROUNDING_TV
        else:
            assert "as many" in text and panel.kept == pytest.approx(right.kept, abs=panels.ROUNDING_TV)
            if "one candidate there is no second" in text:
                assert drawn == 1
            if "p = q here" in text:
                assert theory.acceptance_rate(p, q) >= 1 - RESIDUAL_MASS_EPS
            if "share no token" in text:
                assert theory.acceptance_rate(p, q) <= RESIDUAL_MASS_EPS
    else:
        assert "the output is not q" in text and panel.tv > panels.ROUNDING_TV, text
        if "too little to show" in text:
            assert panel.tv < panels.VISIBLE_TV
        else:
            assert panel.tv >= panels.VISIBLE_TV


@PROPERTY
@given(pairs(max_vocab=5), st.integers(1, 3), st.sampled_from(list(RULES)))
def test_no_exact_rule_keeps_a_candidate_more_often_than_the_bound_07_prints(pair, m, rule):
    """Notebook 07 prints Σ min(q, 1 − (1 − p)^m) as the most an exact rule can keep one of m
    independent candidates; Algorithm 2's bound Σ min(p, q) when m = 1, which its step reaches."""
    panel = nb07.candidates_panel(*pair, m, rule, independent=True)
    bound = nb07.candidates_bound(*pair, m)
    assert panel.kept <= bound + panel.tv + 1e-12  # an inexact rule exceeds it by at most its distance from q
    if m == 1:
        assert bound == pytest.approx(theory.acceptance_rate(*pair), abs=1e-12)
        if rule == nb07.MULTI_STEP.name:
            assert panel.kept == pytest.approx(bound, abs=1e-12)


def test_the_cases_the_old_candidates_readout_got_wrong():
    """'exact, but it keeps fewer candidates' was printed for every exact wrong rule: false at m = 1,
    at p = q, for disjoint supports, and for a narrow p at m = 2 (equal to three decimals)."""
    p, q = panels.toy_distributions()
    stop = "stopping at the first rejection"
    assert "no second one" in nb07.candidates_readout(nb07.candidates_panel(p, q, 1, stop))
    assert "always kept" in nb07.candidates_readout(nb07.candidates_panel(q, q, 2, stop))
    disjoint = nb07.candidates_panel(np.array([0.5, 0.5, 0, 0]), np.array([0, 0, 0.5, 0.5]), 2, stop)
    assert "no candidate is ever kept" in nb07.candidates_readout(disjoint)
    narrow_p, q = panels.toy_distributions(centre_p=0, width_p=0.3)
    narrow = nb07.candidates_readout(nb07.candidates_panel(narrow_p, q, 2, stop))
    ours, theirs = re.search(r"P\(one is kept\) = ([0-9.]+) against ([0-9.]+)", narrow).groups()
    assert ours != theirs, narrow  # printed with the digits that tell them apart


# ---------------------------------------------------------------------------------------------
# Notebooks 06-07: the fastest tree and strategy, and what the loops resolve
# ---------------------------------------------------------------------------------------------

@st.composite
def spread(draw):
    """A Spread of positive numbers: q1 <= median <= q3."""
    q1, median, q3 = sorted(draw(st.lists(st.floats(0.1, 4.0), min_size=3, max_size=3)))
    return Spread(median, q1, q3)


@PROPERTY
@given(st.dictionaries(st.sampled_from(["chain K = 2", "chain K = 6", "tree (2, 2)", "tree (2, 1, 1)"]),
                       st.tuples(st.lists(st.floats(0.1, 4.0), min_size=6, max_size=6), st.floats(1.0, 6.0)), min_size=1))
def test_the_tree_verdict_names_the_most_tokens_and_the_fastest(variants):
    m = SimpleNamespace(repeats=6, N=64, variants={
        name: SimpleNamespace(name=name, speedup=float(np.median(runs)), tokens_per_call=tokens)
        for name, (runs, tokens) in variants.items()})
    first, = nb07.verdict_lines(m)
    most = max(variants, key=lambda name: variants[name][1])
    fastest = max(variants, key=lambda name: float(np.median(variants[name][0])))
    assert first.startswith(f"most tokens per target call: {most} (") and f"fastest: {fastest} (" in first


@PROPERTY
@given(spread(), spread(), st.booleans())
def test_the_draft_time_line_describes_the_loops_and_draws_no_verdict_from_them(tree_time, chain_time, recorded):
    tree = SimpleNamespace(name="tree (2, 2)", shape=(2, 2), t_draft=tree_time if recorded else None,
                           t_draft_s=tree_time.median)
    chain = SimpleNamespace(name="chain K = 6", shape=(1,) * 6, t_draft=chain_time, t_draft_s=chain_time.median)
    line = nb07.draft_time_line(tree, chain)
    assert line.startswith("tree (2, 2): 2 draft calls a loop, chain K = 6: 6;")
    assert "resolved" not in line and "not a paired comparison" in line
    assert f"({tree_time.median / chain_time.median:.2f} of the chain's" in line


@PROPERTY
@given(st.lists(st.tuples(st.text("abcdef ", min_size=1, max_size=12), st.lists(st.floats(0.1, 4.0), min_size=6,
                                                                                  max_size=6)),
                min_size=1, max_size=6, unique_by=lambda item: item[0]))
def test_the_best_strategy_is_the_one_with_the_highest_median(found):
    def result(runs):
        m = SimpleNamespace(repeats=6, N=64, autoregressive_runs_s=(1.0,) * 6,
                            by_K={4: SimpleNamespace(runs_s=tuple(1 / np.array(runs)))})
        return SimpleNamespace(measured=float(np.median(runs)), measurement=m, K=4)
    rows = {name: result(runs) for name, runs in found}
    first, second = nb06.best_strategy_lines(rows)
    best = max(rows, key=lambda name: rows[name].measured)
    assert first.startswith(f"best strategy measured: {best} ({rows[best].measured:.2f}x")
    assert second == speed_panels.resolution_line(
        {name: tuple(1 / (1 / np.array(runs))) for name, runs in found}, "strategy", 6, 64)


# ---------------------------------------------------------------------------------------------
# Notebook 05: what a scoring call pays once, and what each position adds
# ---------------------------------------------------------------------------------------------

@PROPERTY
@given(st.lists(st.integers(1, 16), min_size=2, max_size=8, unique=True).map(sorted), st.data())
def test_the_scoring_cost_line_is_true_of_the_line_it_fits(Ks, data):
    ratios = data.draw(st.lists(st.floats(0.2, 4.0), min_size=len(Ks), max_size=len(Ks)))
    line = panels.scoring_cost_line(Ks, ratios)
    per_position, per_call = np.polyfit(np.array(Ks) + 1, ratios, 1)
    a, sign, b = re.search(r"t_score ≈ (-?[0-9.]+) ([+−]) ([0-9.]+) ×", line).groups()
    assert float(a) == round(per_call, 2) and float(b) * (1 if sign == "+" else -1) == pytest.approx(round(per_position, 2))
    if "too noisy" in line:
        assert float(a) <= 0 or sign == "−" or float(b) == 0
        return
    assert float(a) > 0 and sign == "+" and float(b) > 0
    share = int(re.search(r"\((\d+)%\) is paid once per call", line).group(1))
    assert share == round(100 * per_call / (per_call + per_position))
    assert line.count("most of") == (share > 50) and ("less than half" in line) == (share < 50)


# ---------------------------------------------------------------------------------------------
# Notebook 03: can rounding change a greedy choice?
# ---------------------------------------------------------------------------------------------

@PROPERTY
@given(st.integers(1, 6), st.integers(2, 40), st.integers(0, 2**32 - 1), st.floats(0, 1e-2), st.floats(0.0, 5.0))
def test_rounding_that_is_said_unable_to_flip_a_greedy_choice_never_does(n_positions, n_vocab, seed, noise, tie):
    rng = np.random.default_rng(seed)
    one_row = rng.standard_normal((n_positions, n_vocab))
    one_row[:, 1] = one_row[:, 0] + tie * rng.standard_normal(n_positions) * noise * 10  # near-ties, sometimes
    scored = one_row + rng.uniform(-noise, noise, one_row.shape)
    found = panels.rounding(scored, one_row)
    if not found.could_flip_greedy:
        assert (np.argmax(scored, axis=-1) == np.argmax(one_row, axis=-1)).all()



@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=2, max_value=6), st.integers(min_value=0, max_value=2**32 - 1),
       st.one_of(st.just(0.0), st.floats(min_value=0.01, max_value=0.95)))
def test_resampling_from_q_is_exact_when_p_is_the_same_fraction_of_q_with_extra_mass_elsewhere(n_support, seed, c):
    """(q − p)+ = q exactly when p = c q on q's support (c < 1), its other 1 − c off it: the readout
    says resampling from q is right for every such pair, and notebook 04's section 5 lists that case
    beside the point mass and the disjoint pair (its special cases)."""
    rng = np.random.default_rng(seed)
    n_vocab = n_support + 2
    q = np.zeros(n_vocab)
    q[:n_support] = rng.dirichlet(np.ones(n_support))
    elsewhere = np.zeros(n_vocab)
    elsewhere[n_support:] = rng.dirichlet(np.ones(2))
    p = c * q + (1 - c) * elsewhere
    panel = panels.theorem1_panel(p, q, choice="q")
    assert panels.residual_is_q(panel) and panels.why_exact(panel), (p, q)


def test_notebook_04_lists_every_pair_where_resampling_from_q_is_exact():
    cells = json.loads((Path(__file__).parents[1] / "notebooks/04-theorem-1.ipynb").read_text())["cells"]
    text = " ".join("".join(cell["source"]).replace("\n", " ") for cell in cells if cell.get("id") == "56ab5afc")
    assert "same fraction $c < 1$ of $q$" in text and "point mass" in text and "share no token" in text, text
