"""Notebook 04 (Theorem 1): what only it uses, its questions: the acceptance probability, one token's
output probability, the residual written by hand and under temperature, and the capstone's
prediction, checked from the learner's own runs.

Every `check_...` is a pure function of the learner's answer returning a `Check` (grading.py):
"✔ right: ..." with the worked solution, or "✘ not yet: ..." with a hint (the method, or the known
mistake it matches) but not the number. The defaults of each checker are the numbers its
notebook's question asks about.
"""

import math

import numpy as np

from .. import rejection, theory
from ..sampling import distribution
from .grading import Check, as_number, check_number, not_answered

P_EXERCISE = (0.6, 0.3, 0.1)  # draft p over three tokens
Q_EXERCISE = (0.2, 0.5, 0.3)  # target q


def check_p_accept(answer, p=P_EXERCISE, q=Q_EXERCISE):
    """With p = (0.6, 0.3, 0.1) and q = (0.2, 0.5, 0.3), what is P(accept), the chance that a
    token drafted from p is kept?"""
    p, q = np.asarray(p), np.asarray(q)
    expected = float(np.minimum(p, q).sum())
    how = "P(accept) = Σ_x p(x) min(1, q(x)/p(x)); simplify each term first."
    solution = (f"p(x) min(1, q(x)/p(x)) = min(p(x), q(x)), so P(accept) = Σ min(p, q) = "
                f"{' + '.join(f'{v:g}' for v in np.minimum(p, q))} = {expected:g}.")
    mistakes = [(1 - expected, "that is P(reject) = Σ max(0, q − p)"),
                (float(np.minimum(1, q / p).mean()), "average min(1, q/p) weighted by p(x), how often x is drafted")]
    return check_number(answer, expected, how, solution, mistakes)


def check_output_probability(answer, token=2, p=P_EXERCISE, q=Q_EXERCISE):
    """With the same p and q, what is the probability that one accept/resample step emits
    token 2 (accepted or resampled)?"""
    p, q = np.asarray(p), np.asarray(q)
    overlap, excess = min(p[token], q[token]), max(0.0, q[token] - p[token])
    expected = float(rejection.output_distribution(p, q)[token])
    how = ("add two ways to emit the token: drafted and accepted (min(p, q)), or rejected and then "
           "resampled (P(reject) × (q − p)+ of the token).")
    solution = (f"accepted: min(p, q) = {overlap:g}; resampled: P(reject) × (q − p)+ = "
                f"{1 - np.minimum(p, q).sum():g} × {excess / np.maximum(0, q - p).sum():g} = {excess:g}. "
                f"Together {expected:g} = q({token}), as Theorem 1 says.")
    mistakes = [(overlap, "that counts only accepted drafts; rejected steps resample and can emit it too"),
                (excess / np.maximum(0, q - p).sum(), "that is (q − p)+ alone; multiply by P(reject) and add the accepted part"),
                (p[token], "that is p: the draft's distribution, before the accept/resample step corrects it")]
    return check_number(answer, expected, how, solution, mistakes)


def residual_trials(seed=0):
    """(p, q) pairs to try a student's residual on: random, one with zeros in p, one almost equal."""
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(10)), rng.dirichlet(np.ones(10))
    sparse_p = np.array([0.5, 0.5, 0.0, 0.0])
    near_q = np.array([0.3, 0.3, 0.2, 0.2])
    return [(np.array(P_EXERCISE), np.array(Q_EXERCISE)), (p, q), (sparse_p, near_q),
            (near_q, np.array([0.31, 0.29, 0.2, 0.2]))]


def check_residual(my_residual):
    """Does my_residual(p, q) return (q − p)+ = max(0, q − p) / Σ max(0, q − p)?"""
    if not_answered(my_residual):
        return Check(False, "write your function my_residual(p, q), then pass it in instead of None.")
    if not callable(my_residual):
        return Check(False, f"expected a function my_residual(p, q), got {type(my_residual).__name__}.")
    for i, (p, q) in enumerate(residual_trials()):
        expected = rejection.residual(p, q)
        case = f"on trial pair {i + 1} (p = {np.round(p, 3).tolist()}, q = {np.round(q, 3).tolist()})"
        try:
            got = np.asarray(my_residual(p.copy(), q.copy()), np.float64)
        except Exception as e:  # the student's code: report it, don't crash the notebook
            return Check(False, f"{case} my_residual raised {type(e).__name__}: {e}")
        if got.shape != expected.shape:
            return Check(False, f"{case} it returned shape {got.shape}, expected {expected.shape}.")
        if np.any(got < -1e-12):
            return Check(False, f"{case} some probabilities are negative: take max(0, q − p), not q − p.")
        if not math.isclose(got.sum(), 1.0, rel_tol=1e-9):
            return Check(False, f"{case} it sums to {got.sum():.6g}: divide by Σ max(0, q − p).")
        if np.allclose(got, rejection.residual(q, p), atol=1e-12):
            return Check(False, f"{case} that is max(0, p − q) renormalised: the residual keeps what the target "
                                "wants more than the draft, max(0, q − p).")
        if not np.allclose(got, expected, atol=1e-12):
            first = int(np.argmax(np.abs(got - expected)))
            return Check(False, f"{case} token {first} gets {got[first]:.4g}, (q − p)+ gives it {expected[first]:.4g}: "
                                "take max(0, q − p) token by token, then divide by its sum.")
    return Check(True, "max(0, q − p), renormalised: where the target wants more than the draft "
                       "offered, in proportion to the shortfall.")


CAPSTONE_K_MAX = 16
CAPSTONE_C_SPREAD = 0.25  # a c within 25% of the runs' in-loop median ratio is the same measurement, estimated otherwise


def in_loop_c(run, autoregressive, per_token=True, steady=True, statistic=np.median):
    """c = t_draft / t_target from a speculative run and an autoregressive one, as the capstone's
    step 1 says (per_token, steady and the median: one drafted token's time, the first loop and the
    first token left out since they also read the prompt) or with one of the slips the answer key
    marks down (a loop's whole t_draft_s; the first loop and token kept; a mean)."""
    loops = run.loops[1:] if steady else run.loops
    times = autoregressive.token_times_s[1:] if steady else autoregressive.token_times_s
    drafted = [loop.t_draft_s / loop.K if per_token else loop.t_draft_s for loop in loops if loop.K]
    return float(statistic(drafted) / statistic(times))


PER_LOOP = ("a loop's t_draft_s is the time of all its K drafts: one drafted token's time is loop.t_draft_s / loop.K, "
            "and c compares one drafted token with one target token")
WITH_PROMPT = ("the first loop's draft calls and the first autoregressive token also read the whole prompt: leave out "
               "run.loops[0] and token_times_s[0], and take medians (one slow call moves a mean, not a median)")


def capstone_slips(run, autoregressive):
    """[(c, what went wrong)] for the ways of computing c from these runs that the answer key marks down."""
    slips = []
    for per_token in (True, False):
        for steady in (True, False):
            for statistic in (np.median, np.mean):
                wrong = ([] if per_token else [PER_LOOP]) + ([] if steady else [WITH_PROMPT])  # a mean is fair
                if wrong:
                    slips.append((in_loop_c(run, autoregressive, per_token, steady, statistic), "; and ".join(wrong)))
    first = run.loops[0]
    if first.K:
        slips += [(first.t_draft_s / first.K / autoregressive.token_times_s[0], WITH_PROMPT),
                  (first.t_draft_s / autoregressive.token_times_s[0], f"{PER_LOOP}; and {WITH_PROMPT}")]
    return slips


def capstone_runs_problem(run, autoregressive):
    """Why the runs handed to the capstone's check cannot be read (a sentence), or None."""
    try:
        loops, times = list(run.loops), list(autoregressive.token_times_s)
        steady = [loop.t_draft_s / loop.K for loop in loops[1:] if loop.K]
    except (AttributeError, TypeError):
        return ("pass the runs themselves: run = speculative_sampling(my_draft, target, ids, N=64, K=4, seed=0) and "
                "autoregressive = autoregressive_sampling(target, ids, 64, seed=0)")
    if not steady or len(times) < 2:
        return ("the runs are too short to leave out their first loop and first token (they also read the prompt): "
                "generate N = 64 tokens with each")
    return None


def capstone_c_slip(c, run, autoregressive):
    """A slip the answer key names in the learner's c, given the runs it was measured from (a
    sentence), or None: c is a slip's own value, or about K times the runs' (a loop's draft time)."""
    right = in_loop_c(run, autoregressive)
    for wrong, why in capstone_slips(run, autoregressive):
        if math.isclose(c, wrong, rel_tol=1e-6) and not math.isclose(wrong, right, rel_tol=0.01):
            return f"c = {c:.3g}: {why}."
    K = float(np.median([loop.K for loop in run.loops]))
    if abs(c / right - 1) > CAPSTONE_C_SPREAD and abs(c / (right * K) - 1) <= CAPSTONE_C_SPREAD:
        return f"c = {c:.3g}, about K = {K:g} times what your runs give: {PER_LOOP}."
    return None


def capstone_c_problem(c, run, autoregressive):
    """What is wrong with the learner's c, given the runs it was measured from (a sentence), or None."""
    right = in_loop_c(run, autoregressive)
    if abs(c / right - 1) <= CAPSTONE_C_SPREAD:
        return None
    return (f"c = {c:.3g} is not what the runs you passed give: timed inside their loops, c = {right:.3g} (the median "
            "of loop.t_draft_s / loop.K over the loops after the first, over the median of token_times_s after the "
            "first). Time the calls where the loops make them: the runs' own t_draft_s and token_times_s.")


def check_capstone_prediction(alpha, c, best_K, predicted_speedup, run=None, autoregressive=None, K_max=CAPSTONE_K_MAX):
    """The capstone (notebook 04): the alpha and c you measured for your draft, from the two runs you
    measured them with (`run`, speculative_sampling's result; `autoregressive`, autoregressive_sampling's),
    then the K in 1..K_max with the highest speedup by Leviathan et al.'s Theorem 3.8,
    (1 - alpha^(K+1)) / ((1 - alpha)(K c + 1)), and the speedup it predicts there. The runs let the
    check see how alpha and c were measured: the slips the answer key marks down (a loop's draft
    time taken for a token's, the first loop or token, which also read the prompt, kept in) are
    named; a c within 25% of the runs' in-loop ratio (a mean of the steady loops, say) is accepted."""
    if any(not_answered(x) for x in (alpha, c, best_K, predicted_speedup, run, autoregressive)):
        return Check(False, "fill in run, autoregressive, alpha, c, best_K and predicted_speedup (None marks what is left), "
                            "then run the cell again.")
    problem = capstone_runs_problem(run, autoregressive)
    if problem:
        return Check(False, problem + ".")
    alpha, c = as_number(alpha), as_number(c)
    if alpha is None or not 0 < alpha <= 1:
        return Check(False, f"alpha = {alpha!r}: the acceptance rate is a probability between 0 and 1 (accepted drafts / "
                            "drafts judged: result.alpha_hat of a run with your draft).")
    if not math.isclose(alpha, run.alpha_hat, rel_tol=1e-6):
        drafted = sum(loop.n_accepted for loop in run.loops) / max(1, sum(loop.K for loop in run.loops))
        why = ("that is accepted / drafted, which counts the drafts after a rejection, never judged; alpha_hat divides "
               "by the decisions made" if math.isclose(alpha, drafted, rel_tol=1e-6) else
               "alpha is the run's alpha_hat, accepted drafts / drafts judged")
        return Check(False, f"alpha = {alpha:.4g}, your run's alpha_hat is {run.alpha_hat:.4g}: {why}.")
    if c is None or not c > 0:
        return Check(False, f"c = {c!r}: the cost coefficient is a positive ratio, t_draft / t_target.")
    slip = capstone_c_slip(c, run, autoregressive)  # before c >= 1: a loop's draft time can be that large
    if slip:
        return Check(False, slip)
    if c >= 1:
        return Check(False, f"c = {c:.3g}: a draft step would cost as much as a target step or more. c is t_draft / "
                            "t_target (a drafted token's time over an autoregressive token's), not its inverse; a "
                            "draft that slow never pays (Leviathan et al.'s Corollary 3.9 asks alpha > c).")
    problem = capstone_c_problem(c, run, autoregressive)
    if problem:
        return Check(False, problem)
    expected_K = int(theory.best_K(alpha, c, K_max))
    if as_number(best_K) != expected_K:
        return Check(False, f"best_K = {best_K!r} is not where the formula peaks for alpha = {alpha:.3g}, c = {c:.3g}: "
                            f"compute theory.predicted_speedup_leviathan(alpha, K, c) for K = 1 .. {K_max} and take the "
                            "K with the largest value.")
    tokens = float(theory.expected_tokens_per_loop(alpha, expected_K))
    expected = float(theory.predicted_speedup_leviathan(alpha, expected_K, c))
    how = ("tokens per loop (1 − alpha^(K+1)) / (1 − alpha), divided by what a loop costs in target steps, "
           "K c + 1.")
    solution = (f"alpha and c measured inside the loops; at K = {expected_K} a loop yields {tokens:.2f} tokens for "
                f"{expected_K} × {c:.3g} + 1 = {expected_K * c + 1:.2f} target steps: {expected:.2f}x. Now run it and "
                "compare: the formula prices the scoring call as one target step and leaves out the loop's own work.")
    mistakes = [(tokens, "that is tokens per loop; a loop also costs K drafts: divide by K c + 1"),
                (tokens / expected_K / c, "the loop costs K c + 1 target steps (K drafts, then one scoring call), not K c")]
    return check_number(answer=predicted_speedup, expected=expected, how=how, solution=solution, mistakes=mistakes)


def check_residual_at_temperature(residual_at, temperatures=(0.5, 1.0, 2.0), seed=0):
    """Does residual_at(logits_p, logits_q, temperature) return the residual the library's loop
    uses at that temperature, (q - p)+ of both models' distributions at it? The loop samples its
    drafts with the same controls as the target, so the p its drafts came from is at the
    temperature too. (What exactness needs is only that the residual uses the p the drafts were
    sampled from; the target's controls define the output.)"""
    if not_answered(residual_at) or not callable(residual_at):
        return Check(False, "write residual_at(logits_p, logits_q, temperature), then pass the function itself.")
    rng = np.random.default_rng(seed)
    logits_p, logits_q = rng.standard_normal(12) * 2, rng.standard_normal(12) * 2
    for temperature in temperatures:
        expected = rejection.residual(distribution(logits_p, temperature), distribution(logits_q, temperature))
        try:
            got = np.asarray(residual_at(logits_p.copy(), logits_q.copy(), temperature), np.float64)
        except Exception as e:  # the student's code: report it, don't crash the notebook
            return Check(False, f"at temperature {temperature} residual_at raised {type(e).__name__}: {e}")
        if got.shape == expected.shape and np.allclose(got, expected, atol=1e-9):
            continue
        mistakes = {
            "the temperature applied to q only": (distribution(logits_p), distribution(logits_q, temperature),
                "that is the residual of a draft sampled at temperature 1 against q at the temperature. A loop that "
                "drafted at temperature 1 would use exactly that, and still be exact (what exactness needs is a "
                "residual with the p the drafts were sampled from), only accepted less often; but the library's "
                "loop drafts at the target's temperature, so its p is at the temperature too"),
            "the temperature applied to p only": (distribution(logits_p, temperature), distribution(logits_q),
                "that residual is against q at temperature 1: the target's controls define what the text is "
                "distributed as, so with q left at temperature 1 the loop would sample from q at temperature 1, "
                "not at the temperature asked"),
            "the temperature ignored": (distribution(logits_p), distribution(logits_q),
                "that is the residual at temperature 1 for both: the loop would sample from q at temperature 1, "
                "not at the temperature asked")}
        for name, (p, q, why) in mistakes.items():
            wrong = rejection.residual(p, q)
            if got.shape == wrong.shape and np.allclose(got, wrong, atol=1e-9):
                return Check(False, f"at temperature {temperature}, {name}: {why}. Divide both models' logits by the "
                                    "temperature, softmax each, then take (q − p)+.")
        return Check(False, f"at temperature {temperature} the values differ from (q − p)+ of softmax(logits / temperature) "
                            "of each model.")
    return Check(True, "the controls reshape p and q first; the rejection step then works on the reshaped pair, "
                       "so the loop returns q at that temperature.")
