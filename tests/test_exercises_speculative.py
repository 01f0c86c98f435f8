"""The exercise checkers of notebooks 03-06: right answers pass with the worked solution, known
mistakes get their hint, other wrong answers the method."""

import numpy as np
import pytest

from picogpt import rejection
from picogpt.course import nb03_speculative_sampling as nb03
from picogpt.course import nb04_theorem_1 as nb04
from picogpt.course import nb05_speedup as nb05
from picogpt.course import nb06_beyond_one_draft_model as nb06

NUMBER_CHECKS = [  # (checker, right answer, a known mistake and a word of its hint)
    (nb03.check_tokens_emitted, 3, (2, "resampled")),
    (nb03.check_accept_probability, 0.4, (2.5, "p/q")),
    (nb03.check_expected_tokens_per_loop, 3.3616, (3.2, "one more token")),
    (nb04.check_p_accept, 0.6, (0.4, "P(reject)")),
    (nb04.check_output_probability, 0.3, (0.1, "only accepted")),
    (nb05.check_predicted_speedup, 1.8357, (2.3169, "not the share β")),
    (nb05.check_best_K, 8, (4, "paper's choice")),
    (nb06.check_point_mass_residual, 0.2 / 0.7, (0.2, "leaves x̃ out")),
    (nb06.check_first_layers_cost, 0.2888, (0.25, "embedding and LM head")),
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
    assert nb04.check_output_probability(0.5, token=1)  # = q(1): Theorem 1 for any token
    assert nb03.check_accept_probability(1.0, p_x=0.2, q_x=0.5)
    assert nb03.check_expected_tokens_per_loop(5, alpha=1.0, K=4)


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
    result = nb04.check_residual(attempt)
    assert not result and hint in str(result), str(result)


def test_residual_checker_blames_p_minus_q_only_when_it_is_p_minus_q():
    squared = nb04.check_residual(lambda p, q: np.maximum(0, q - p) ** 2 / (np.maximum(0, q - p) ** 2).sum())
    assert not squared and "p − q" not in str(squared) and "token" in str(squared), str(squared)


def test_residual_checker_accepts_a_right_residual():
    assert nb04.check_residual(good_residual)
    assert nb04.check_residual(rejection.residual)


def test_tokens_per_loop_simulation_checker():
    def right(alpha, K, n, rng):
        accepted = rng.random((n, K)) < alpha
        first_rejection = np.where(accepted.all(axis=1), K, np.argmin(accepted, axis=1))
        return first_rejection + 1

    def no_extra_token(alpha, K, n, rng):
        return np.maximum(right(alpha, K, n, rng) - 1, 1)

    def counts_every_acceptance(alpha, K, n, rng):
        return (rng.random((n, K)) < alpha).sum(axis=1) + 1

    assert nb03.check_tokens_per_loop_simulation(right)
    assert not nb03.check_tokens_per_loop_simulation(no_extra_token)
    assert not nb03.check_tokens_per_loop_simulation(counts_every_acceptance)
    assert "pass the function" in str(nb03.check_tokens_per_loop_simulation(None))


def test_residual_at_temperature_checker():
    from picogpt.rejection import residual
    from picogpt.sampling import distribution

    assert nb04.check_residual_at_temperature(lambda lp, lq, t: residual(distribution(lp, t), distribution(lq, t)))
    check = nb04.check_residual_at_temperature(lambda lp, lq, t: residual(distribution(lp), distribution(lq, t)))
    assert not check and "applied to q only" in str(check)
    check = nb04.check_residual_at_temperature(lambda lp, lq, t: residual(distribution(lp), distribution(lq)))
    assert not check and "temperature ignored" in str(check)


def test_the_capstone_checker_checks_the_arithmetic_from_the_learners_own_measurements():
    from picogpt import theory
    run, autoregressive = capstone_runs(t_draft_per_token=0.002, t_target=0.01)
    alpha, c = run.alpha_hat, nb04.in_loop_c(run, autoregressive)
    K = int(theory.best_K(alpha, c, 16))
    right = float(theory.predicted_speedup_leviathan(alpha, K, c))
    ok = nb04.check_capstone_prediction(alpha, c, K, right, run, autoregressive)
    assert ok and f"K = {K}" in str(ok)
    assert "None marks" in str(nb04.check_capstone_prediction(alpha, c, None, None, run, autoregressive))
    assert "not its inverse" in str(nb04.check_capstone_prediction(alpha, 1 / c, K, right, run, autoregressive))
    assert "between 0 and 1" in str(nb04.check_capstone_prediction(85, c, K, right, run, autoregressive))
    assert "peaks" in str(nb04.check_capstone_prediction(alpha, c, K + 1, right, run, autoregressive))
    tokens_only = nb04.check_capstone_prediction(alpha, c, K, float(theory.expected_tokens_per_loop(alpha, K)), run,
                                               autoregressive)
    assert not tokens_only and "K c + 1" in str(tokens_only)


# ---- the capstone: the slips the answer key marks down, seen in the learner's own runs ----------


def capstone_runs(t_draft_per_token=0.002, t_target=0.01, K=4, n=16, prompt_factor=6.0):
    """A speculative run and an autoregressive one as the capstone's step 1 reads them: loops with
    t_draft_s and K, token_times_s; the first loop and token cost prompt_factor times more (they
    read the prompt). Times vary a little from loop to loop, as measured ones do."""
    from types import SimpleNamespace
    wobble = np.linspace(0.9, 1.1, n)
    loops = [SimpleNamespace(t_draft_s=K * t_draft_per_token * w * (prompt_factor if i == 0 else 1), K=K,
                             n_accepted=[4, 2, 3, 0][i % 4], decisions=[4, 3, 4, 1][i % 4])
             for i, w in enumerate(wobble)]
    accepted, decisions = sum(loop.n_accepted for loop in loops), sum(loop.decisions for loop in loops)
    run = SimpleNamespace(loops=loops, alpha_hat=accepted / decisions)
    autoregressive = SimpleNamespace(token_times_s=[t_target * w * (prompt_factor if i == 0 else 1)
                                                    for i, w in enumerate(wobble[::-1])])
    return run, autoregressive


def capstone_answer(run, autoregressive, c):
    from picogpt import theory
    K = int(theory.best_K(run.alpha_hat, c, 16))
    return run.alpha_hat, c, K, float(theory.predicted_speedup_leviathan(run.alpha_hat, K, c))


def test_the_capstone_checker_accepts_c_measured_as_step_1_says_or_by_a_mean_of_the_steady_loops():
    run, autoregressive = capstone_runs()
    for statistic in (np.median, np.mean):
        c = nb04.in_loop_c(run, autoregressive, statistic=statistic)
        alpha, c, K, speedup = capstone_answer(run, autoregressive, c)
        check = nb04.check_capstone_prediction(alpha, c, K, speedup, run, autoregressive)
        assert check and "measured inside the loops" in str(check), check


@pytest.mark.parametrize("slip, says", [
    (dict(per_token=False), "loop.t_draft_s / loop.K"),
    (dict(steady=False, statistic=np.mean), "also read the whole prompt"),
    (dict(per_token=False, steady=False, statistic=np.mean), "loop.t_draft_s / loop.K"),
])
def test_the_capstone_checker_names_the_timing_slips_the_answer_key_marks_down(slip, says):
    run, autoregressive = capstone_runs()
    c = nb04.in_loop_c(run, autoregressive, **slip)
    alpha, c, K, speedup = capstone_answer(run, autoregressive, c)  # the arithmetic after the slip is right
    check = nb04.check_capstone_prediction(alpha, c, K, speedup, run, autoregressive)
    assert not check and says in str(check), check


def test_the_capstone_checker_names_the_first_calls_alone_and_a_c_timed_elsewhere():
    run, autoregressive = capstone_runs()
    first = run.loops[0].t_draft_s / run.loops[0].K / autoregressive.token_times_s[0]
    right = nb04.in_loop_c(run, autoregressive)
    assert not np.isclose(first, right)
    assert "also read the whole prompt" in str(nb04.check_capstone_prediction(*capstone_answer(run, autoregressive, first)[:1],
                                                                            first, 1, 1.0, run, autoregressive))
    elsewhere = nb04.check_capstone_prediction(run.alpha_hat, right * 2, 1, 1.0, run, autoregressive)  # a c from another timing
    assert not elsewhere and "is not what the runs you passed give" in str(elsewhere), elsewhere
    per_loop = nb04.check_capstone_prediction(run.alpha_hat, right * 4 * 1.1, 1, 1.0, run, autoregressive)  # ~K times, a mean
    assert not per_loop and "about K = 4 times" in str(per_loop), per_loop


def test_the_capstone_checker_reads_alpha_from_the_run_and_asks_for_the_runs():
    run, autoregressive = capstone_runs()
    alpha, c, K, speedup = capstone_answer(run, autoregressive, nb04.in_loop_c(run, autoregressive))
    drafted = sum(loop.n_accepted for loop in run.loops) / sum(loop.K for loop in run.loops)
    wrong_alpha = nb04.check_capstone_prediction(drafted, c, K, speedup, run, autoregressive)
    assert not wrong_alpha and "accepted / drafted" in str(wrong_alpha), wrong_alpha
    assert "None marks" in str(nb04.check_capstone_prediction(alpha, c, K, speedup))
    assert "pass the runs themselves" in str(nb04.check_capstone_prediction(alpha, c, K, speedup, [1, 2], 3.0))
