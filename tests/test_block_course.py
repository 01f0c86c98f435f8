"""Notebook 08's helpers: the block-verification exercise grades by output distribution and names
each realistic mistake; one loop laid out; the drafts-kept explorer; the exact table of mistakes."""

import base64
from itertools import combinations

import matplotlib

matplotlib.use("Agg")

import re

import matplotlib.pyplot as plt
import numpy as np
import pytest

from picogpt import rejection, speculative, theory
from picogpt.course import nb08_verify_the_block as nb08
from picogpt.course.chain_step import exact_joint
from picogpt.course.nb08_verify_the_block import BLOCK, BLOCK_EXERCISE, MISTAKES, TOKEN_BY_TOKEN, check_block_step
from picogpt.course.panels import tv_distance
from picogpt.course.toy_models import toy_pair
from picogpt.errors import PicoGPTError
from picogpt.speculative import block_output_distribution, block_step, speculative_step

# ---- a learner's block step, written independently of the library ----------------------------


def learner_block_step(drafted, p, q, rng, *, numpy_ints=False, slip=None):
    """Block verification as a learner writes it from the paper: rng.choice, the uniforms first.
    `slip` makes one mistake of writing it (notebook 03's grader names most of them too)."""
    K = len(drafted)
    eta = rng.uniform(size=K)
    w, weights = 1.0, [1.0]
    for i, x in enumerate(drafted):
        w = min(1.0, w * q[i][x] / p[i][x])
        weights.append(w)
    kept = 0
    for i in range(1, K + 1):
        if i == K:
            h = weights[K]
        else:
            z = np.maximum(weights[i] * q[i] - p[i], 0).sum()
            h = z / (z + 1 - weights[i]) if z + 1 - weights[i] > 0 else 1.0
        if slip == "three positions at most" and i > 3:
            break  # only a block of four drafts or more can show it
        if (eta[i - 1] >= h) if slip == "inverted" else (eta[i - 1] < h):
            kept = i
    if kept == K and K and slip == "no extra token":
        return list(drafted)
    if kept == K:
        last = q[K - 1] if slip == "extra from q[K - 1]" else q[K]
    else:
        weight = weights[kept + 1] if slip == "next weight" else weights[kept]
        last = np.maximum(weight * q[kept] - p[kept], 0)
        last = last / last.sum()
        if slip == "argmax":
            return list(drafted[:kept]) + [int(np.argmax(last))]
    out = list(drafted[:kept]) + [int(rng.choice(len(last), p=last))]
    return [np.int64(x) for x in out] if numpy_ints else out


def test_a_block_step_written_differently_is_accepted():
    check = check_block_step(learner_block_step)
    assert check and "fit block verification's exact distribution" in str(check), check
    assert check_block_step(lambda d, p, q, rng: learner_block_step(d, p, q, rng, numpy_ints=True))


def test_the_librarys_block_step_is_accepted():
    check = check_block_step(block_step)
    assert check and "verify=block_step" in str(check), check


@pytest.mark.parametrize("name", BLOCK_EXERCISE.mistakes)
def test_each_mistake_is_refused_by_name_and_located(name):
    check = check_block_step(BLOCK_EXERCISE.mistakes[name].step)
    out = str(check)
    assert not check and f"a classic mistake, {name} (" in out, out
    assert "Where they differ: " in out and "block verification gives the frequencies (" in out, out
    assert not re.search(r"\binf\b", out), out


@pytest.mark.parametrize("slip, name", [
    ("no extra token", "no bonus token"),
    ("extra from q[K - 1]", "the bonus token from the wrong row"),
    ("argmax", "argmax of the residual"),
    ("inverted", "the comparison inverted, eta_i ≥ h_i"),
])
def test_the_slips_notebook_03_names_are_named_here_too(slip, name):
    with np.errstate(invalid="ignore", divide="ignore"):
        check = check_block_step(lambda d, p, q, rng: learner_block_step(d, p, q, rng, slip=slip))
    assert not check and f"a classic mistake, {name} (" in str(check), check


def test_a_slip_that_shows_from_the_fourth_draft_on_is_refused():
    check = check_block_step(lambda d, p, q, rng: learner_block_step(d, p, q, rng, slip="three positions at most"))
    assert not check and "K = 4" in str(check), check


def test_a_residual_with_the_next_positions_weight_is_told_which_weight():
    with np.errstate(invalid="ignore"):
        message = str(check_block_step(lambda d, p, q, rng: learner_block_step(d, p, q, rng, slip="next weight")))
    assert "(w_i q_{i+1} − p_{i+1})+" in message and "w_i = weights[i]" in message, message


def test_notebook_03s_step_is_named_token_by_token():
    check = check_block_step(speculative_step)
    assert not check and TOKEN_BY_TOKEN.name in str(check), check


def test_a_token_after_the_last_one_is_named_at_once():
    def goes_on(drafted, p, q, rng):
        out = block_step(drafted, p, q, rng)
        return out + [0] if len(out) <= len(drafted) else out  # one more token after a non-draft

    check = check_block_step(goes_on)
    assert not check and "exactly one more token" in str(check), check


def weighted_residual_mistake(kind):
    """A learner's block step, right but for the token after the kept drafts."""
    def step(drafted, p, q, rng):
        out = learner_block_step(drafted, p, q, rng)
        n_kept = len(out) - 1
        if n_kept == len(drafted):
            return out
        if kind == "softmax":
            gap = np.maximum(q[n_kept] - p[n_kept], 0)
            last = np.exp(gap) / np.exp(gap).sum()
        else:  # "next row": the residual of the position after the one that was not kept
            row = min(n_kept + 1, len(drafted) - 1)
            last = np.maximum(q[n_kept + 1] - p[row], 0)
            last = last / last.sum() if last.sum() > 0 else q[n_kept + 1]
        return out[:-1] + [int(rng.choice(len(last), p=last))]
    return step


@pytest.mark.parametrize("kind", ["softmax", "next row"])
def test_a_block_mistake_without_a_name_is_located_in_the_token_after_the_kept_drafts(kind):
    message = str(check_block_step(weighted_residual_mistake(kind)))
    assert message.startswith("✘ not yet") and "The token drawn after keeping" in message, message
    assert "yours came out (" in message and not re.search(r"\binf\b", message), message


def test_a_block_step_with_no_drafts_is_told_about_k_0():
    def my_block_step(drafted, p, q, rng):
        q[:, len(p[0]) - 1]  # reads a row of p that K = 0 does not have
        return learner_block_step(drafted, p, q, rng)

    message = str(check_block_step(my_block_step))
    assert "my_block_step raised IndexError inside check_block_step, for the drafts []" in message, message


def test_every_mistake_is_far_from_block_verification_and_from_every_other_on_some_case():
    cases = BLOCK_EXERCISE.cases
    rules = {BLOCK.name: BLOCK, **BLOCK_EXERCISE.mistakes}
    joints = {name: [exact_joint(rule, case) for case in cases] for name, rule in rules.items()}

    def tv(a, b):
        return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))

    for first, second in combinations(rules, 2):
        distance = max(tv(a, b) for a, b in zip(joints[first], joints[second]))
        assert distance >= 0.06, (first, second, distance)


def test_the_rule_values_are_the_librarys_law():
    rng = np.random.default_rng(0)
    for case in BLOCK_EXERCISE.cases:
        for _ in range(20):
            drafted = [int(rng.choice(case.n_vocab, p=row)) for row in case.p]
            law = block_output_distribution(drafted, case.p, case.q)
            rule = BLOCK.output_distribution(drafted, case.p, case.q)
            assert max(abs(law.get(k, 0) - rule.get(k, 0)) for k in set(law) | set(rule)) <= 1e-15


def test_the_solution_prints_the_librarys_code(capsys):
    nb08.solution()
    out = capsys.readouterr().out
    assert "def block_verification" in out and "def block_keep_probabilities" in out


# ---- one loop laid out ------------------------------------------------------------------------


def random_loop(seed, K=4, V=4):
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(V), size=K), rng.dirichlet(np.ones(V), size=K + 1)
    drafted = [int(rng.choice(V, p=row)) for row in p]
    return drafted, p, q


def test_the_laid_out_loop_keeps_what_block_step_keeps_with_the_same_uniforms():
    for seed in range(200):
        drafted, p, q = random_loop(seed)
        emitted = block_step(drafted, p, q, np.random.default_rng(seed))
        loop = nb08.block_loop(drafted, p, q, np.random.default_rng(seed).random(len(drafted)))
        assert len(emitted) - 1 == loop.n_kept
        assert loop.first_failure <= loop.n_kept or loop.n_kept == 0
        assert np.allclose(loop.token_wise, np.cumprod([min(1, q[i][x] / p[i][x]) for i, x in enumerate(drafted)]))
        assert np.all(loop.weights >= loop.token_wise - 1e-15)  # the running weight is never below token by token
        assert loop.residual.sum() == pytest.approx(1.0)


def test_an_instructive_loop_has_a_later_pass_and_a_weighted_residual():
    loops = [nb08.block_loop(*random_loop(seed), np.random.default_rng(seed + 1000).random(4)) for seed in range(300)]
    chosen = [loop for loop in loops if nb08.instructive(loop)]
    assert chosen and all(loop.first_failure < loop.n_kept < 4 for loop in chosen)
    assert all(tv_distance(loop.residual, loop.unweighted) > 0.05 for loop in chosen)
    lines = nb08.loop_lines(chosen[0], [str(x) for x in chosen[0].drafted])
    assert len(lines) == 5 and "fails" in "".join(lines) and "passes" in "".join(lines)


def test_the_loop_figures_are_labelled():
    drafted, p, q = random_loop(3)
    loop = nb08.block_loop(drafted, p, q, np.array([0.9, 0.05, 0.9, 0.9]))
    fig, axes = plt.subplots(1, 2)
    nb08.plot_block_loop(loop, ["a", "b", "c", "d"], ax=axes[0])
    nb08.plot_last_token(loop, str, ax=axes[1])
    assert axes[0].get_ylabel() == "probability" and "x̃" in axes[0].get_xlabel()
    assert "kept" in axes[0].get_title() and axes[1].get_legend() is not None
    plt.close(fig)


# ---- the drafts-kept explorer ------------------------------------------------------------------


def test_the_explorer_starts_at_the_papers_example_and_its_numbers_are_the_theorys():
    text, outputs, panel = nb08.kept_update(2 / 3, 1 / 3, 2)
    assert "1.111" in text and "1.222" in text and "1.333" in text
    assert base64.b64decode(outputs[0]["data"]["image/png"]).startswith(b"\x89PNG")
    rng = np.random.default_rng(0)
    for _ in range(20):
        p_a, q_a, K = float(rng.random()), float(rng.random()), int(rng.integers(1, 9))
        panel = nb08.kept_panel(p_a, q_a, K)
        for verify in ("token", "block", "bound"):
            assert panel.expected(verify) == pytest.approx(
                theory.expected_accepted_drafts([p_a, 1 - p_a], [q_a, 1 - q_a], K, verify))
        assert panel.expected("token") <= panel.expected("block") + 1e-12 <= panel.expected("bound") + 2e-12


def test_the_readout_is_true_at_the_edges():
    assert "n/a" in nb08.kept_readout(nb08.kept_panel(1.0, 0.0, 3))  # disjoint: nothing kept by anyone
    assert "+0.0%" in nb08.kept_readout(nb08.kept_panel(0.4, 0.4, 5))  # p = q: all keep every draft


@pytest.mark.parametrize("bad", [(1.2, 0.5, 2), (0.5, -0.1, 2), (0.5, 0.5, 0), (0.5, 0.5, 2.5), (0.5, 0.5, 13)])
def test_the_explorer_refuses_what_is_not_a_setting(bad):
    with pytest.raises(PicoGPTError, match="expected probabilities"):
        nb08.kept_panel(*bad)


def test_the_explorer_widget_redraws_when_a_slider_moves():
    pytest.importorskip("ipywidgets")
    box = nb08.kept_explorer()
    sliders = box.children[0].children
    readout = box.children[1]
    before = readout.value
    sliders[2].value = 4  # K
    assert readout.value != before and "K = 4" in readout.value
    assert box.children[2].outputs[0]["data"]["image/png"]


# ---- exactness on a toy pair, rule by rule -----------------------------------------------------


def test_the_table_of_mistakes_says_which_rules_are_exact():
    draft, target = toy_pair(n_vocab=3, seed=0)
    lines = nb08.mistakes_lines(draft, target, [1, 0], 3)
    rows = {line[:48].strip(): [float(x) for x in line[48:].split()] for line in lines[1:]}
    assert max(rows[BLOCK.name]) < 1e-12 and max(rows[TOKEN_BY_TOKEN.name]) < 1e-12
    assert all(max(rows[name]) > 1e-3 for name in MISTAKES)
    assert rows["the residual without the running weight"][:2] == pytest.approx([0, 0], abs=1e-12)


def test_the_numeric_exercise_names_token_by_token_and_accepts_the_block_answer():
    assert nb08.check_both_kept(0.875)
    wrong = nb08.check_both_kept(0.5)
    assert not wrong and "token by token" in str(wrong)


def test_the_running_weight_gap_is_zero_for_the_paper_and_not_for_a_mistake():
    draft, target = toy_pair(n_vocab=3, seed=10)
    assert nb08.running_weight_gap(draft, target, [1, 0], 3) < 1e-12
    stopping = MISTAKES["stopping at the first failing position"]
    assert nb08.running_weight_gap(draft, target, [1, 0], 3, stopping.output_distribution) > 0.01


def test_the_placeholder_is_told_how_to_call_this_grader():
    check = check_block_step(None)
    assert not check and "check_block_step(my_block_step)" in str(check)


def test_a_keep_probability_rounded_above_1_is_told_to_clip_where_it_sampled_not_blamed_on_the_residual():
    """A right step that samples how many drafts are kept from its exact law, with a last keep
    probability h_K = w_K = 1 that came out as 1 + 2e-16 in floating point: 1 − h_K < 0, and
    rng.choice refuses that law. The grader names that law and the clip, not the residual."""
    def from_the_law(drafted, p, q, rng):
        K = len(drafted)
        weights, h = speculative.block_keep_probabilities(drafted, p, q)
        h = [x + 2e-16 if x == 1.0 else x for x in h]
        law, none_later = np.zeros(K + 1), 1.0  # P(n_kept = i) = h_i Π_{j > i} (1 − h_j), h_0 = 1
        for i in range(K, -1, -1):
            h_i = 1.0 if i == 0 else h[i - 1]
            law[i], none_later = h_i * none_later, none_later * (1.0 - h_i)
        kept = int(rng.choice(K + 1, p=law))
        last = q[K] if kept == K else rejection.weighted_residual(weights[kept], p[kept], q[kept])
        return [int(x) for x in drafted[:kept]] + [int(rng.choice(len(last), p=last))]

    message = str(check_block_step(from_the_law))
    assert "np.clip" in message and "1 + 2e-16" in message and "max(0, q − p)" not in message, message
    assert "residual is not where it failed" in message, message


def test_a_too_long_block_output_is_judged_by_its_length_first():
    message = str(check_block_step(lambda d, p, q, rng: [0] * (len(d) + 1) + [99]))
    assert "tokens for K = " in message and "not normalised" not in message, message
