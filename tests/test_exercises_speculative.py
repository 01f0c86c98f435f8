"""The exercise checkers of notebooks 03-06: right answers pass with the worked solution, known
mistakes get their hint, other wrong answers the method."""

import numpy as np
import pytest

from picogpt import rejection
from picogpt.course import exercises as ex

NUMBER_CHECKS = [  # (checker, right answer, a known mistake and a word of its hint)
    (ex.check_tokens_emitted, 3, (2, "resampled")),
    (ex.check_accept_probability, 0.4, (2.5, "p/q")),
    (ex.check_expected_tokens_per_loop, 3.3616, (3.2, "one more token")),
    (ex.check_p_accept, 0.6, (0.4, "P(reject)")),
    (ex.check_output_probability, 0.3, (0.1, "only accepted")),
    (ex.check_predicted_speedup, 1.8357, (2.3169, "not the share β")),
    (ex.check_best_K, 8, (4, "paper's choice")),
    (ex.check_point_mass_residual, 0.2 / 0.7, (0.2, "leaves x̃ out")),
    (ex.check_first_layers_cost, 0.2888, (0.25, "embedding and LM head")),
]


@pytest.mark.parametrize("check, right, mistake", NUMBER_CHECKS)
def test_right_answers_pass_and_known_mistakes_get_their_hint(check, right, mistake):
    ok = check(right)
    assert ok and str(ok).startswith("✔ right")
    wrong, hint = mistake
    result = check(wrong)
    assert not result and hint in str(result)
    assert not check(None) and "placeholder" in str(check(None))
    other = check(right * 1.5 + 7)
    assert not other and "Hint" in str(other)


def test_numbers_in_the_questions_are_the_defaults():
    assert ex.check_output_probability(0.5, token=1)  # = q(1): Theorem 1 for any token
    assert ex.check_accept_probability(1.0, p_x=0.2, q_x=0.5)
    assert ex.check_expected_tokens_per_loop(5, alpha=1.0, K=4)


def good_residual(p, q):
    excess = np.maximum(0, q - p)
    return excess / excess.sum()


@pytest.mark.parametrize("attempt, hint", [
    (lambda p, q: q - p, "negative"),
    (lambda p, q: np.maximum(0, q - p), "divide"),
    (lambda p, q: np.maximum(0, p - q) / np.maximum(0, p - q).sum(), "p − q"),
    (lambda p, q: good_residual(p, q)[:-1], "shape"),
    (lambda p, q: 1 / 0, "ZeroDivisionError"),
    (42, "expected a function"),
])
def test_residual_checker_explains_what_is_wrong(attempt, hint):
    result = ex.check_residual(attempt)
    assert not result and hint in str(result), str(result)


def test_residual_checker_blames_p_minus_q_only_when_it_is_p_minus_q():
    squared = ex.check_residual(lambda p, q: np.maximum(0, q - p) ** 2 / (np.maximum(0, q - p) ** 2).sum())
    assert not squared and "p − q" not in str(squared) and "token" in str(squared), str(squared)


def test_residual_checker_accepts_a_right_residual():
    assert ex.check_residual(good_residual)
    assert ex.check_residual(rejection.residual)


def test_tokens_per_loop_simulation_checker():
    def right(alpha, K, n, rng):
        accepted = rng.random((n, K)) < alpha
        first_rejection = np.where(accepted.all(axis=1), K, np.argmin(accepted, axis=1))
        return first_rejection + 1

    def no_extra_token(alpha, K, n, rng):
        return np.maximum(right(alpha, K, n, rng) - 1, 1)

    def counts_every_acceptance(alpha, K, n, rng):
        return (rng.random((n, K)) < alpha).sum(axis=1) + 1

    assert ex.check_tokens_per_loop_simulation(right)
    assert not ex.check_tokens_per_loop_simulation(no_extra_token)
    assert not ex.check_tokens_per_loop_simulation(counts_every_acceptance)
    assert "pass the function" in str(ex.check_tokens_per_loop_simulation(None))


def test_residual_at_temperature_checker():
    from picogpt.rejection import residual
    from picogpt.sampling import distribution

    assert ex.check_residual_at_temperature(lambda lp, lq, t: residual(distribution(lp, t), distribution(lq, t)))
    check = ex.check_residual_at_temperature(lambda lp, lq, t: residual(distribution(lp), distribution(lq, t)))
    assert not check and "applied to q only" in str(check)
    check = ex.check_residual_at_temperature(lambda lp, lq, t: residual(distribution(lp), distribution(lq)))
    assert not check and "temperature ignored" in str(check)


def test_the_capstone_checker_checks_the_arithmetic_from_the_learners_own_measurements():
    from picogpt import theory
    alpha, c = 0.85, 0.2
    K = int(theory.best_K(alpha, c, 16))
    right = float(theory.predicted_speedup_leviathan(alpha, K, c))
    ok = ex.check_capstone_prediction(alpha, c, K, right)
    assert ok and f"K = {K}" in str(ok)
    assert "None marks" in str(ex.check_capstone_prediction(alpha, c, None, None))
    assert "not its inverse" in str(ex.check_capstone_prediction(alpha, 1 / c, K, right))
    assert "between 0 and 1" in str(ex.check_capstone_prediction(85, c, K, right))
    assert "peaks" in str(ex.check_capstone_prediction(alpha, c, K + 1, right))
    tokens_only = ex.check_capstone_prediction(alpha, c, K, float(theory.expected_tokens_per_loop(alpha, K)))
    assert not tokens_only and "K c + 1" in str(tokens_only)
