"""Notebook 07's grader: it passes right multi-candidate steps written in different styles, names
each classic mistake and locates every wrong step in the part of its output that differs (which
candidate was kept, the token drawn when none was), on implementations written here,
independently of its own rules."""

import re

import numpy as np
import pytest

from picogpt import rejection, tree_sampling
from picogpt.course import nb07_token_trees as nb07
from picogpt.course.grading import Check
from picogpt.course.nb07_token_trees import MISTAKES, MULTI_STEP, check_multi_candidate_step, grading_cases


def shortfall(q, p):
    positive = np.clip(np.asarray(q, float) - np.asarray(p, float), 0, None)
    return positive / positive.sum() if positive.sum() > 0 else np.asarray(q, float)


# ---- right, in different styles ----

def right_loop(candidates, p, q, rng):
    target = np.array(q, dtype=float)
    for i, token in enumerate(candidates):
        if rng.random() < min(1.0, target[token] / p[i][token]):
            return token
        target = shortfall(target, p[i])
    return int(rng.choice(len(target), p=target))


def right_recursive(candidates, p, q, rng):
    if len(candidates) == 0:
        return np.int64(rng.choice(len(q), p=q / q.sum()))
    x, rest = candidates[0], candidates[1:]
    return x if rng.uniform() * p[0][x] < q[x] else right_recursive(rest, p[1:], shortfall(q, p[0]), rng)


# ---- the classic mistakes, written out ----

def never_updated(candidates, p, q, rng):
    for i, token in enumerate(candidates):
        if rng.random() < min(1.0, q[token] / p[i][token]):
            return token
    return int(rng.choice(len(q), p=shortfall(q, p[-1]) if len(p) else q))


def fallback_q(candidates, p, q, rng):
    target = np.array(q, dtype=float)
    for i, token in enumerate(candidates):
        if rng.random() < min(1.0, target[token] / p[i][token]):
            return token
        target = shortfall(target, p[i])
    return int(rng.choice(len(q), p=q))


def first_only(candidates, p, q, rng):
    if len(candidates) and rng.random() < min(1.0, q[candidates[0]] / p[0][candidates[0]]):
        return candidates[0]
    return int(rng.choice(len(q), p=shortfall(q, p[0]) if len(p) else q))


def first_row(candidates, p, q, rng):
    target = np.array(q, dtype=float)
    for token in candidates:
        if rng.random() < min(1.0, target[token] / p[0][token]):
            return token
        target = shortfall(target, p[0])
    return int(rng.choice(len(q), p=target))


def drop_rejected(candidates, p, q, rng):
    target = np.array(q, dtype=float)
    for i, token in enumerate(candidates):
        if rng.random() < min(1.0, target[token] / p[i][token]):
            return token
        target[token] = 0
        target /= target.sum()
    return int(rng.choice(len(q), p=target))


def residual_in_q_itself(candidates, p, q, rng):
    """Right, the running residual computed in q's own memory: the walk hands copies, so does the grader."""
    for i, token in enumerate(candidates):
        if rng.random() < min(1.0, q[token] / p[i][token]):
            return token
        q -= p[i]
        np.clip(q, 0, None, out=q)
        q /= q.sum()
    return int(rng.choice(len(q), p=q))


# ---- broken in one call ----

def fails_at_a_leaf(candidates, p, q, rng):
    return right_loop(candidates, p, q, rng) if len(p[0]) else 0


def unseeded(candidates, p, q, rng):
    return right_loop(candidates, p, q, np.random.default_rng())


# ---- more wrong steps, some the grader knows by name, some not ----

def residual_from_q_each_time(candidates, p, q, rng):
    target = np.array(q, dtype=float)
    for i, token in enumerate(candidates):
        if rng.random() < min(1.0, target[token] / p[i][token]):
            return token
        target = shortfall(q, p[i])  # from q, not from the running residual
    return int(rng.choice(len(q), p=target))


def fallback_from_p(candidates, p, q, rng):
    target = np.array(q, dtype=float)
    for i, token in enumerate(candidates):
        if rng.random() < min(1.0, target[token] / p[i][token]):
            return token
        target = shortfall(target, p[i])
    return int(rng.choice(len(q), p=p[-1] if len(p) else q))


def argmax_at_a_leaf(candidates, p, q, rng):
    return right_loop(candidates, p, q, rng) if len(candidates) else int(np.argmax(q))


def fallback_argmax(candidates, p, q, rng):
    target = np.array(q, dtype=float)
    for i, token in enumerate(candidates):
        if rng.random() < min(1.0, target[token] / p[i][token]):
            return token
        target = shortfall(target, p[i])
    return int(np.argmax(target))


def softmax_residual(candidates, p, q, rng):
    target = np.array(q, dtype=float)
    for i, token in enumerate(candidates):
        if rng.random() < min(1.0, target[token] / p[i][token]):
            return token
        gap = np.maximum(target - p[i], 0)
        target = np.exp(gap) / np.exp(gap).sum()
    return int(rng.choice(len(q), p=target))


def last_candidate_first(candidates, p, q, rng):
    target = np.array(q, dtype=float)
    for i in reversed(range(len(candidates))):
        if rng.random() < min(1.0, target[candidates[i]] / p[i][candidates[i]]):
            return candidates[i]
        target = shortfall(target, p[i])
    return int(rng.choice(len(q), p=target))


def ratio_upside_down(candidates, p, q, rng):
    target = np.array(q, dtype=float)
    for i, token in enumerate(candidates):
        if rng.random() < min(1.0, p[i][token] / max(target[token], 1e-12)):
            return token
        target = shortfall(target, p[i])
    return int(rng.choice(len(q), p=target))


def judged(keep, one_r=False):
    """The right step but for the test: keep(p_i(c), q_i(c), r) says whether c is kept; one_r: one
    uniform for the whole step."""
    def step(candidates, p, q, rng):
        target, r = np.array(q, dtype=float), rng.random()
        for i, token in enumerate(candidates):
            if keep(p[i][token], target[token], r):
                return token
            target = shortfall(target, p[i])
            r = r if one_r else rng.random()
        return int(rng.choice(len(q), p=target))
    return step


def never_updated_fallback_q(candidates, p, q, rng):
    for i, token in enumerate(candidates):
        if rng.random() < min(1.0, q[token] / p[i][token]):
            return token
    return int(rng.choice(len(q), p=q))


def residual_never_normalised(candidates, p, q, rng):
    target = np.array(q, dtype=float)
    for i, token in enumerate(candidates):
        if rng.random() < min(1.0, target[token] / p[i][token]):
            return token
        target = np.maximum(target - p[i], 0)  # its sum shrinks with every rejection
    with np.errstate(invalid="ignore"):  # 0 / 0 once nothing is left: rng.choice refuses the NaN
        return int(rng.choice(len(q), p=target / target.sum()))


@pytest.mark.parametrize("step", [right_loop, right_recursive, rejection.accept_among, residual_in_q_itself])
def test_right_steps_pass(step):
    check = check_multi_candidate_step(step)
    assert isinstance(check, Check) and check.ok and str(check).startswith("✔ right"), check


@pytest.mark.parametrize("step, name", [
    (never_updated, "the residual not updated between candidates"),
    (fallback_q, "the fallback sampled from q"),
    (first_only, "stopping at the first rejection"),
    (first_row, "every candidate judged with p's first row"),
    (drop_rejected, "the residual as q without the rejected candidate"),
    (residual_from_q_each_time, "the residual formed from q each time"),
    (fallback_from_p, "the fallback sampled from p"),
    (argmax_at_a_leaf, "the token at a leaf taken as q's most likely"),
    (fallback_argmax, "argmax for the fallback"),
    (ratio_upside_down, "accepting with probability min(1, p/q)"),
    (judged(lambda p, q, r: r < q), "accepting with probability q(c)"),
    (judged(lambda p, q, r: q >= p), "a deterministic test, keep c if q(c) ≥ p(c)"),
    (judged(lambda p, q, r: r > min(1.0, q / p)), "the comparison inverted, r > min(1, q/p)"),
    (judged(lambda p, q, r: r < min(1.0, q / p), one_r=True), "one r for the whole step"),
    (never_updated_fallback_q, "the residual not updated between candidates (fallback from q)"),
])
def test_each_classic_mistake_is_named(step, name):
    check = check_multi_candidate_step(step)
    assert not check and f"classic mistake, {name} (" in str(check), check
    assert "Where they differ: " in str(check) and not re.search(r"\binf\b", str(check)), check


@pytest.mark.parametrize("step, part", [
    (softmax_residual, "Which candidate was kept"),
    (last_candidate_first, "Which candidate was kept"),
])
def test_a_mistake_without_a_name_is_located_with_the_frequencies_of_the_part_that_differs(step, part):
    message = str(check_multi_candidate_step(step))
    assert message.startswith("✘ not yet") and "Where they differ: " in message and part in message, message
    assert "gives the frequencies (" in message and "yours came out (" in message and not re.search(r"\binf\b", message), message


@pytest.mark.parametrize("step, says", [
    (residual_never_normalised, "Normalise each residual as you form it"),
    (lambda c, p, q, rng: right_loop(c, p, q, np.random.default_rng(0)), "the same random numbers in every call"),
    (fails_at_a_leaf, "fails_at_a_leaf raised IndexError inside check_multi_candidate_step, for the candidates []"),
    (unseeded, "Generators of the same seed gave different outputs"),
    (lambda c, p, q, rng: [0], "return one token id"),
    (lambda c, p, q, rng: 9, "return one token id"),
    (None, "pass the function itself"),
])
def test_mistakes_that_show_in_one_call_are_named_at_once(step, says):
    check = check_multi_candidate_step(step)
    assert not check and says in str(check), check


def test_every_classic_mistake_moves_some_case_far_beyond_the_noise():
    for rule in MISTAKES.values():
        tv = max(0.5 * np.abs(rule.output_distribution(c.candidates, c.p, c.q)
                              - MULTI_STEP.output_distribution(c.candidates, c.p, c.q)).sum() for c in grading_cases())
        assert tv >= 0.05, rule.name


def test_the_rules_runnable_steps_sample_their_exact_distributions():
    from picogpt.course.chi_square import chi_square_test
    for rule in [MULTI_STEP, *MISTAKES.values()]:
        for c in grading_cases():
            rng = np.random.default_rng(0)
            counts = np.bincount([rule.step(list(c.candidates), c.p, c.q, rng) for _ in range(3000)], minlength=len(c.q))
            assert chi_square_test(counts, rule.output_distribution(c.candidates, c.p, c.q))[2] > 1e-4, rule.name


def test_the_learners_step_runs_in_the_tree_loop():
    from helpers import random_gpt2
    draft, target = random_gpt2(1), random_gpt2(2)
    assert (tree_sampling(draft, target, [1, 2], 12, shape=(2, 2), seed=4, verify=right_loop).tokens
            == tree_sampling(draft, target, [1, 2], 12, shape=(2, 2), seed=4, verify=right_loop).tokens)


def test_solution_prints_the_library_step(capsys):
    nb07.solution()
    assert "def accept_among" in capsys.readouterr().out


@pytest.mark.parametrize("answer, right", [(2 / 3, True), (0.6667, True), (5 / 6, False), (0.8, False), (0.5, False),
                                           (None, False)])
def test_the_second_candidate_question(answer, right):
    assert nb07.check_second_candidate(answer).ok is right


def test_one_r_for_the_whole_step_shows_only_where_a_later_candidate_is_kept_sometimes():
    """With one uniform, c_2 (tried after r ≥ a_1) is kept with max(0, a_2 − a_1) / (1 − a_1), not
    a_2: the same law whenever a_2 is 0 or 1. A case where it is neither is what shows it."""
    shared = MISTAKES["one r for the whole step"]
    for c in grading_cases():
        moved = 0.5 * np.abs(shared.output_distribution(c.candidates, c.p, c.q)
                             - MULTI_STEP.output_distribution(c.candidates, c.p, c.q)).sum()
        a_1 = rejection.accept_probability(c.p[0], c.q, c.candidates[0]) if len(c.candidates) > 1 else 1.0
        q_2 = rejection.residual(c.p[0], c.q) if len(c.candidates) > 1 else None
        a_2 = rejection.accept_probability(c.p[1], q_2, c.candidates[1]) if q_2 is not None else 0.0
        assert (moved > 0.05) == (0 < a_2 < 1 and a_1 < 1), (c.candidates, moved)
