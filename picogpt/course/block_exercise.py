"""Notebook 08's exercise: write block verification's Steps 3-4 yourself, and the mistakes it is
graded against.

You write `block_step(drafted, p, q, rng) -> list[int]`, with the arguments and output of
notebook 03's `speculative_step` (speculative_sampling's `step=` runs either):
    drafted  the K drafted ids x̃_1 .. x̃_K
    p        [K, n_vocab]      the draft's distributions they were sampled from
    q        [K + 1, n_vocab]  the target's, one more row: q[K] is q_{K+1}
    rng      a numpy Generator: every random draw comes from it
and it returns what the loop emits: x̃_1 .. x̃_i for the largest i whose uniform passes its keep
probability h_i, then one token from the weighted residual (w_i q_{i+1} − p_{i+1})+, or from q[K]
when all K are kept (Sun et al. 2025, arXiv 2403.10444, their Algorithm 2; picogpt.speculative.block_step).

A `BlockRule` is one way to write it, as values: the running weight, the keep probabilities, how
the kept prefix is chosen from the uniforms, and what the last token is drawn from. `BLOCK` is the
paper's; `MISTAKES` are the realistic ways to get it wrong, each with its exact law for given
drafts (`output_distribution`) and a runnable `step`; `NAMED_IN_03` the slips of writing the code
that notebook 03's grader names too, by the same names. The grader is the course's one
(grading.check_sampler), given these rules and the chain step's contract (chain_step.py).
"""

import inspect
from dataclasses import dataclass

import numpy as np

from .. import rejection, speculative
from ..sampling import sample
from .chain_step import NO_BONUS, NO_DRAFTS, WRONG_ROW, StepCase, chain_exercise, shaped
from .grading import TRIALS, check_number, check_sampler, most_likely

# ---------------------------------------------------------------------------------------------
# How the kept prefix is chosen from the keep probabilities h_1 .. h_K
# ---------------------------------------------------------------------------------------------


def clipped(h):
    return np.clip(np.asarray(h, np.float64), 0.0, 1.0)


@dataclass(frozen=True)
class Choice:
    """How n_kept follows from uniforms eta [K] and keep probabilities h [K]: `pick` on one draw,
    `law` its exact distribution over n_kept = 0 .. K, `uniforms` how the eta are drawn."""
    name: str
    pick: object  # (eta, h) -> n_kept
    law: object  # h -> [K + 1]
    shared: bool = False  # one uniform for the whole block

    def uniforms(self, rng, K):
        return np.full(K, rng.random()) if self.shared and K else rng.random(K)


def largest_passing(eta, h):
    return max((i for i in range(1, len(h) + 1) if eta[i - 1] < h[i - 1]), default=0)


def largest_passing_law(h):
    """P(n_kept = i) = h_i (1 - h_{i+1}) .. (1 - h_K): i passes, no later one does (h_0 = 1)."""
    h, law, none_later = clipped(h), np.zeros(len(h) + 1), 1.0
    for i in range(len(h), -1, -1):
        h_i = 1.0 if i == 0 else h[i - 1]
        law[i], none_later = h_i * none_later, none_later * (1.0 - h_i)
    return law


def first_failing(eta, h):
    return next((i for i in range(len(h)) if not eta[i] < h[i]), len(h))


def first_failing_law(h):
    """P(n_kept = i) = h_1 .. h_i (1 - h_{i+1}): stop at the first position that fails."""
    h, law, reached = clipped(h), np.zeros(len(h) + 1), 1.0
    for i, h_i in enumerate(h):
        law[i], reached = reached * (1.0 - h_i), reached * h_i
    law[len(h)] = reached
    return law


def one_uniform_law(h):
    """One eta for every position: n_kept = i when h_i > eta >= max(h_{i+1} .. h_K)."""
    h, law, above = clipped(h), np.zeros(len(h) + 1), 0.0
    for i in range(len(h), 0, -1):
        law[i], above = max(0.0, h[i - 1] - above), max(above, h[i - 1])
    law[0] = 1.0 - above
    return law


def largest_failing(eta, h):
    return max((i for i in range(1, len(h) + 1) if not eta[i - 1] < h[i - 1]), default=0)


LARGEST_PASSING = Choice("the largest i that passes", largest_passing, largest_passing_law)
INVERTED = Choice("the largest i that fails", largest_failing, lambda h: largest_passing_law(1.0 - clipped(h)))
FIRST_FAILING = Choice("stop at the first failure", first_failing, first_failing_law)
ONE_UNIFORM = Choice("one uniform, the largest i that passes", largest_passing, one_uniform_law, shared=True)

# ---------------------------------------------------------------------------------------------
# The running weight, the keep probabilities, the last token: the paper's and the mistakes'
# ---------------------------------------------------------------------------------------------


def uncapped_weight(weight, p, q, x):
    """w_{i-1} q(x) / p(x) without min(1, ·): a plain cumulative product of the ratios."""
    return weight * float(q[x]) / float(p[x])


def paper_keep(weights, drafted, p, q):
    """h_i = Z_i / (Z_i + 1 - w_i) for i < K, h_K = w_K (rejection.block_keep_probability)."""
    K = len(drafted)
    return [rejection.block_keep_probability(weights[i], p[i], q[i]) for i in range(1, K)] + [weights[K]]


def last_like_the_others(weights, drafted, p, q):
    """h_K from the formula of the other positions, with p's last row standing in for the next one
    (there is none: no draft follows x̃_K)."""
    K = len(drafted)
    return paper_keep(weights, drafted, p, q)[:-1] + [rejection.block_keep_probability(weights[K], p[K - 1], q[K])]


def token_by_token(weights, drafted, p, q):
    """Theorem 1's min(1, q_i(x̃_i) / p_i(x̃_i)) at each position: with the first failure ending the
    block and (q − p)+ after it, this rule is Algorithm 2."""
    return [rejection.accept_probability(p[i], q[i], x) for i, x in enumerate(drafted)]


def every_like_the_last(weights, drafted, p, q):
    """h_i = w_i at every position: the running product compared with a uniform, token-wise style."""
    return list(weights[1:])


def weighted_residual(weights, p, q, n_kept, K):
    """The paper's last token: from q[K] when all K are kept, else (w_i q_{i+1} − p_{i+1})+."""
    if n_kept == K:
        return np.asarray(q[K], np.float64)
    return rejection.weighted_residual(weights[n_kept], p[n_kept], q[n_kept])


def unweighted_residual(weights, p, q, n_kept, K):
    """Theorem 1's (q_{i+1} − p_{i+1})+, the running weight left out."""
    return weighted_residual([1.0] * (K + 1), p, q, n_kept, K)


def q_row(weights, p, q, n_kept, K):
    return np.asarray(q[n_kept], np.float64)


def no_bonus(weights, p, q, n_kept, K):
    """Nothing after all K drafts are kept (None); K = 0 still gives its one token, from q[0]."""
    return None if n_kept == K and K else weighted_residual(weights, p, q, n_kept, K)


def bonus_from_q_before(weights, p, q, n_kept, K):
    """The extra token from q[K − 1], the row that judged the last draft, instead of q[K]."""
    return np.asarray(q[K - 1], np.float64) if n_kept == K else weighted_residual(weights, p, q, n_kept, K)


def residual_argmax(weights, p, q, n_kept, K):
    """The weighted residual's most likely token in place of a sample from it."""
    last = weighted_residual(weights, p, q, n_kept, K)
    return last if n_kept == K else most_likely(last)


@dataclass(frozen=True)
class BlockRule:
    """One way to write block verification's Steps 3-4 for p [K, V], q [K + 1, V]: running weights
    w_i = weight(w_{i-1}, p[i-1], q[i-1], x̃_i), keep probabilities keep(weights, p, q, K), the kept
    prefix chosen by `choice` from keep(weights, drafted, p, q) (h_1 .. h_K), then one token from
    last(weights, p, q, n_kept, K)."""
    name: str
    hint: str  # what to fix, said to the learner
    weight: object = rejection.running_weight
    keep: object = paper_keep
    choice: Choice = LARGEST_PASSING
    last: object = weighted_residual

    def weights_and_keep(self, drafted, p, q):
        K, weights = len(drafted), [1.0]
        for i, x in enumerate(drafted):
            weights.append(self.weight(weights[-1], p[i], q[i], x))
        return weights, (self.keep(weights, drafted, p, q) if K else [])

    def step(self, drafted, p, q, rng):
        """This rule as a runnable step(drafted, p, q, rng) -> list[int] (random draws in the
        library's order). The paper's is the library's speculative.block_step."""
        if self is BLOCK:
            return speculative.block_step(drafted, p, q, rng)
        K = len(drafted)
        eta = self.choice.uniforms(rng, K)
        weights, keep = self.weights_and_keep(drafted, p, q)
        n_kept = self.choice.pick(eta, keep)
        last = self.last(weights, p, q, n_kept, K)
        return [int(x) for x in drafted[:n_kept]] + ([] if last is None else [sample(last, rng)])

    def output_distribution(self, drafted, p, q):
        """The exact probability of every output for these drafts: {tuple: probability}."""
        K = len(drafted)
        weights, keep = self.weights_and_keep(drafted, p, q)
        out = {}
        for n_kept, chance in enumerate(self.choice.law(keep)):
            if chance > 0:
                last = self.last(weights, p, q, n_kept, K)
                if last is None:  # no token after the kept drafts
                    key = tuple(int(x) for x in drafted[:n_kept])
                    out[key] = out.get(key, 0.0) + chance
                    continue
                for y in np.flatnonzero(last):
                    key = tuple(int(x) for x in drafted[:n_kept]) + (int(y),)
                    out[key] = out.get(key, 0.0) + chance * float(last[y])
        return out


TOKEN_BY_TOKEN = BlockRule(
    "token by token (notebook 03's step)", "that is Algorithm 2: exact, but it judges each draft on its own ratio "
    "q/p and stops at the first rejection. Block verification carries a running weight w_i along the block, keeps "
    "position i with h_i, and keeps the longest prefix whose position passes", keep=token_by_token,
    choice=FIRST_FAILING, last=unweighted_residual)
LARGEST = ("keep x̃_1 .. x̃_i for the LARGEST i with eta_i < h_i: a position that fails does not end the block, "
           "since a later draft the target likes more than the draft did raises the running weight again")
BLOCK = BlockRule("block verification", "")
MISTAKES = {rule.name: rule for rule in (
    BlockRule("stopping at the first failing position", f"you stopped at the first i with eta_i ≥ h_i, as token by "
              f"token verification stops at its first rejection; {LARGEST}", choice=FIRST_FAILING),
    BlockRule("the residual from q", "after keeping i drafts you sampled the next token from q_{i+1}; sample it from "
              "the weighted residual (w_i q_{i+1} − p_{i+1})+: the mass the draft already gave out through the kept "
              "blocks must not be given again", last=q_row),
    BlockRule("the residual without the running weight", "after keeping i drafts you sampled from (q_{i+1} − p_{i+1})+, "
              "Theorem 1's residual; block verification's is weighted by the running weight, (w_i q_{i+1} − p_{i+1})+ "
              "(the two agree only at i = 0, where w_0 = 1)", last=unweighted_residual),
    BlockRule("the running weight not capped at 1", "the running weight is w_i = min(1, w_{i-1} q(x̃_i) / p(x̃_i)): a "
              "probability, capped at 1. A plain cumulative product of q/p banks credit beyond certainty and spends it "
              "on later drafts", weight=uncapped_weight),
    BlockRule("the last position's h computed like the others", "the last position's keep probability is h_K = w_K: "
              "no draft follows x̃_K, so there is no next row p_{K+1} to form a residual mass with (the formula of "
              "the other positions with a draft row of zeros gives w_K too)", keep=last_like_the_others),
    BlockRule("every position's h computed like the last", "for i < K the keep probability is h_i = Z_i / (Z_i + 1 − w_i), "
              "Z_i = Σ max(0, w_i q_{i+1} − p_{i+1}), not w_i: only the last position uses its running weight as is",
              keep=every_like_the_last),
    BlockRule("one uniform for the whole block", "draw one uniform eta_i per position (rng.random(K)); with one eta "
              "for the block the positions' verdicts are tied together", choice=ONE_UNIFORM),
)}


# The slips of writing the code that notebook 03's grader names too, by the same names: they are not
# ways to verify a block (section 6's table leaves them out), only ways to get the code wrong
NAMED_IN_03 = {rule.name: rule for rule in (
    BlockRule("no bonus token", NO_BONUS, last=no_bonus),
    BlockRule("the bonus token from the wrong row", WRONG_ROW, last=bonus_from_q_before),
    BlockRule("argmax of the residual", "after the kept drafts, sample the token from the weighted residual with rng "
              "(rng.choice(V, p=residual)); its most likely token, argmax, is greedy decoding: the tokens the residual "
              "gives less mass never come out, and the text is no longer distributed as q", last=residual_argmax),
    BlockRule("the comparison inverted, eta_i ≥ h_i", "keep x̃_1 .. x̃_i for the largest i with eta_i < h_i, not "
              "eta_i ≥ h_i: inverted, the test passes the positions it should fail", choice=INVERTED),
)}


# ---------------------------------------------------------------------------------------------
# The exercise: notebook 03's grader, given block verification's rule, mistakes and cases
# ---------------------------------------------------------------------------------------------


def grading_cases():
    """Small cases (K = 3, 3, 2 over three tokens) on which every mistake moves the law of (drafts,
    output) by a total-variation distance of 0.06 or more in some case, and every two mistakes differ
    (tests/test_block_course.py checks both); then rows as the loop makes them at temperature 0.7
    with top-p 0.9 (zeros in both), K = 4 (a slip that only shows from the fourth draft on), and
    K = 0, which the loop sends when a draft proposes nothing."""
    def rows(*r):
        return np.array(r, np.float64)
    return (
        StepCase(p=rows([0.4, 0.41, 0.19], [0.02, 0.81, 0.17], [0.68, 0.04, 0.28]),
                 q=rows([0.18, 0.21, 0.61], [0.31, 0.42, 0.27], [0.01, 0.58, 0.41], [0.7, 0.18, 0.12])),
        StepCase(p=rows([0.03, 0.91, 0.06], [0.38, 0.02, 0.6], [0.39, 0.37, 0.24]),
                 q=rows([0.1, 0.65, 0.25], [0.51, 0.46, 0.03], [0.18, 0.77, 0.05], [0.04, 0.09, 0.87])),
        StepCase(p=rows([0.3, 0.6, 0.1], [0.6, 0.3, 0.1]), q=rows([0.15, 0.45, 0.4], [0.1, 0.45, 0.45], [0.3, 0.3, 0.4])),
        StepCase(p=shaped([[2.0, 1.2, 0.9, -1.0], [0.2, 1.5, -0.5, 1.1]], temperature=0.7, top_p=0.9),
                 q=shaped([[1.0, 2.0, -1.0, 0.6], [1.5, 0.3, 1.0, -2.0], [0.0, 1.0, 1.8, 0.5]], temperature=0.7, top_p=0.9),
                 label="temperature 0.7 with top-p 0.9"),
        StepCase(p=rows([0.5, 0.3, 0.2], [0.2, 0.5, 0.3], [0.3, 0.3, 0.4], [0.4, 0.4, 0.2]),
                 q=rows([0.3, 0.5, 0.2], [0.4, 0.3, 0.3], [0.2, 0.4, 0.4], [0.5, 0.2, 0.3], [0.2, 0.2, 0.6])),
        StepCase(p=np.zeros((0, 3)), q=rows([0.2, 0.5, 0.3]), label=NO_DRAFTS),
    )


AFTER_THE_LAST_TOKEN = ("for drafts {drafts} it returned {output}: after the kept drafts x̃_1 .. x̃_i the loop emits "
                        "exactly one more token (from the weighted residual, or from q[K] when all K are kept) and stops")
BLOCK_EXERCISE = chain_exercise(
    "block verification", BLOCK, {**MISTAKES, TOKEN_BY_TOKEN.name: TOKEN_BY_TOKEN, **NAMED_IN_03}, grading_cases(),
    call="check_block_step(my_block_step)", next_token="the token drawn after keeping {i} draft(s), x̃_{t} not kept",
    walk_through="Walk through it: w_0 = 1, w_i = min(1, w_{i-1} q_i(x̃_i) / p_i(x̃_i)); h_i = Z_i / (Z_i + 1 − w_i) "
                 "with Z_i = Σ max(0, w_i q_{i+1} − p_{i+1}) for i < K, h_K = w_K; one uniform eta_i per position; keep "
                 "x̃_1 .. x̃_i for the largest i with eta_i < h_i; then one token from (w_i q_{i+1} − p_{i+1})+, or from "
                 "q[K] when all K are kept.",
    nan_hint=("A NaN comes from normalising max(0, w q − p) when its sum is 0. After keeping i drafts the token comes "
              "from (w_i q_{i+1} − p_{i+1})+, with the weight of the i drafts kept, w_i = weights[i] (w_0 = 1), and the "
              "rows q[i] and p[i]; its sum is 0 for i ≥ 1 only where h_i = 0 (or w_i = 1 and the next position keeps "
              "every draft), so the block never stops there. Either your residual is another (a weight from another "
              "position, w_{i+1} say, can leave nothing positive) or your block stopped where it cannot: check your "
              "h_i and how you choose the kept prefix (the largest i with eta_i < h_i)."),
    after_a_non_draft={"extra": AFTER_THE_LAST_TOKEN, "judged on": AFTER_THE_LAST_TOKEN})


def check_block_step(fn, trials=TRIALS, seed=0):
    """Grade a learner's block_step(drafted, p, q, rng) -> list[int] by its output distribution
    (grading.check_sampler, given BLOCK_EXERCISE); returns a Check."""
    return check_sampler(fn, BLOCK_EXERCISE, trials, seed)


def solution():
    """The library's own block verification: print it when you are stuck."""
    print(inspect.getsource(speculative.block_keep_probabilities))
    print(inspect.getsource(speculative.block_step))


def check_both_kept(answer, p=(0.6, 0.4), q=(0.3, 0.7)):
    """Over {a, b}, draft p and target q (the same at every position), K = 2, the drafts a then b:
    the probability that block verification keeps both."""
    rows_p, rows_q = np.array([p, p], np.float64), np.array([q, q, q], np.float64)
    weights, keep = speculative.block_keep_probabilities([0, 1], rows_p, rows_q)
    token_wise = rejection.accept_probability(p, q, 0) * rejection.accept_probability(p, q, 1)
    return check_number(
        answer, keep[1],
        how="both are kept exactly when position 2 passes, with h_2 = w_2 = min(1, w_1 q(b)/p(b)) and "
            "w_1 = min(1, q(a)/p(a))",
        solution=(f"w_1 = min(1, {q[0]}/{p[0]}) = {weights[1]:g}: 'a' is over-proposed. w_2 = min(1, {weights[1]:g} × "
                  f"{q[1]}/{p[1]}) = {weights[2]:g}: 'b', under-proposed, pays part of that back. The last position "
                  f"passes with h_2 = w_2, so both are kept with {keep[1]:g}; token by token keeps both with "
                  f"{token_wise:g}."),
        mistakes=[(token_wise, "that is token by token, min(1, q(a)/p(a)) × min(1, q(b)/p(b)): block verification "
                               "carries the running weight, w_2 = min(1, w_1 q(b)/p(b))")])
