"""Notebook 03's main exercise: write Steps 3-4 of Algorithm 2 yourself; the rule and its classic
mistakes as values.

You write `speculative_step(drafted, p, q, rng) -> list[int]`, the function
`picogpt.speculative.speculative_sampling` calls once per loop (its `step=` argument runs yours;
the contract is chain_step.py's) and it returns what the loop emits: the accepted drafts, then one
token resampled from (q - p)+ at the first rejection, or the extra ("bonus") token from q[K] when
all K pass.

A `StepVariant` is one way to write it: its test, what a rejection resamples from, where the extra
token comes from, each with its exact law (`output_distribution`) and a runnable `step` (notebook
04's demo runs them). `ALGORITHM_2` is the paper's, `MISTAKES` the classic ways to get it wrong.
`check_speculative_step(fn)` is the course's one grader (grading.check_sampler) given them and the
cases (`grading_cases`: K = 0 to 4, rows shaped by a temperature, top-p and a greedy target among
them). Notebook 03's second exercise, the loop around the step, is loop_exercise.py.
"""

import inspect
from dataclasses import dataclass

import numpy as np

from .. import rejection, speculative
from ..sampling import sample, softmax64
from .chain_step import (
    EXTRA_ROW,
    NO_BONUS,
    NO_DRAFTS,
    NORMALISE,
    WRONG_ROW,
    StepCase,
    chain_exercise,
    rows,
    shaped,
)
from .grading import TRIALS, check_sampler, most_likely

# ---------------------------------------------------------------------------------------------
# Algorithm 2's Steps 3-4, and the classic ways to get them wrong, as rules
# ---------------------------------------------------------------------------------------------


def keep_probability(p, q, t, x):
    """Algorithm 2's test for x̃_t = x: min(1, q_t(x) / p_t(x)), rows t of p and q."""
    return rejection.accept_probability(p[t], q[t], x)


def residual_row(p, q, t, x):
    """Algorithm 2's resample after rejecting x̃_t: (q_t - p_t)+."""
    return rejection.residual(p[t], q[t])


def last_q_row(p, q, K):
    """Algorithm 2's extra token after K acceptances: from q_{K+1} = q[K]."""
    return q[K]


def unnormalised_residual(leftover_to):
    """max(0, q - p) without dividing by its sum, sampled by a hand-written inverse CDF: the
    mass it lacks (1 - sum) lands on the token the search falls back to, `leftover_to` (0: the
    first, as np.argmax(cdf > u) does; -1: the last, as a search clipped to n_vocab - 1 does)."""
    def resample_from(p, q, t, x):
        positive = np.maximum(0.0, np.asarray(q[t], np.float64) - np.asarray(p[t], np.float64))
        positive[leftover_to] += 1.0 - positive.sum()
        return positive
    return resample_from


def normalised(f):
    f = np.asarray(f, np.float64)
    return f / f.sum()


def without(row, x):
    """q_t with the rejected token's probability set to 0, renormalised."""
    row = np.array(row, np.float64)
    row[x] = 0.0
    return normalised(row)


@dataclass(frozen=True)
class StepVariant:
    """One way to write Steps 3-4, for p [K, V] and q [K + 1, V]: keep x̃_t with probability
    accept(p, q, t, x̃_t); after rejecting it, draw from resample_from(p, q, t, x̃_t); when all K
    pass, draw the extra token from bonus_from(p, q, K) (None: no extra token). one_r: a single
    uniform r judges every draft of the loop, instead of a fresh one per draft."""
    name: str
    hint: str  # what to fix, said to the learner
    accept: object = keep_probability
    resample_from: object = residual_row
    bonus_from: object = last_q_row
    one_r: bool = False

    def step(self, drafted, p, q, rng):
        """This variant as a runnable step(drafted, p, q, rng) -> list[int] (random draws in the
        library's order). Algorithm 2 itself is the library's `speculative_step`."""
        if self is ALGORITHM_2:
            return speculative.speculative_step(drafted, p, q, rng)
        emitted, r = [], None
        for t, x in enumerate(drafted):
            r = rng.random() if r is None or not self.one_r else r
            if r < self.accept(p, q, t, x):
                emitted.append(int(x))
            else:
                return emitted + [sample(self.resample_from(p, q, t, x), rng)]
        extra = self.bonus_from(p, q, len(drafted))
        return emitted + ([] if extra is None else [sample(extra, rng)])

    def output_distribution(self, drafted, p, q):
        """The exact probability of every output list for these drafts: {tuple: probability}."""
        out, kept = {}, 1.0  # kept: P(the first t drafts all accepted)
        for t, x in enumerate(drafted):
            a = self.accept(p, q, t, x)
            kept_next = min(kept, a) if self.one_r else kept * a  # one r: accepted while r < every a so far
            rejected_here = kept - kept_next  # P(the first t accepted, this one rejected)
            if rejected_here > 0:
                for y, prob in enumerate(self.resample_from(p, q, t, x)):
                    key = tuple(drafted[:t]) + (y,)
                    out[key] = out.get(key, 0.0) + rejected_here * prob
            kept = kept_next
        extra = self.bonus_from(p, q, len(drafted))
        if extra is None:
            out[tuple(drafted)] = out.get(tuple(drafted), 0.0) + kept
        else:
            for y, prob in enumerate(extra):
                key = tuple(drafted) + (y,)
                out[key] = out.get(key, 0.0) + kept * prob
        return out


ARGMAX_BONUS = ("when all K drafts pass, sample the extra token from q[K] with rng (rng.choice(V, p=q[K])); its most "
                "likely token, argmax, is greedy decoding, not a sample of q")
ARGMAX_RESIDUAL = ("after a rejection, sample the new token from the residual with rng (rng.choice(V, p=residual)); "
                   "its most likely token, argmax, is greedy decoding: the tokens the residual gives less mass never "
                   "come out, and the text is no longer distributed as q")
ALGORITHM_2 = StepVariant("Algorithm 2", "")
VARIANTS = (
    ALGORITHM_2,
    # what a rejection resamples from
    StepVariant("resampling from q", "after a rejection you sample from q; sample from the residual "
                "(q − p)+ = max(0, q − p) / Σ max(0, q − p): the mass min(p, q) was already given out by acceptance",
                resample_from=lambda p, q, t, x: np.asarray(q[t], np.float64)),
    StepVariant("resampling from p", "after a rejection you sample from p, the draft; sample from (q − p)+, "
                "the tokens the target wants more than the draft offered",
                resample_from=lambda p, q, t, x: np.asarray(p[t], np.float64)),
    StepVariant("the residual reversed, (p − q)+", "your residual is max(0, p − q) renormalised; it must be "
                "max(0, q − p): what the target wants more than the draft",
                resample_from=lambda p, q, t, x: rejection.residual(q[t], p[t])),
    StepVariant("the residual not normalised (its missing mass on the first token)", NORMALISE,
                resample_from=unnormalised_residual(0)),
    StepVariant("the residual not normalised (its missing mass on the last token)", NORMALISE,
                resample_from=unnormalised_residual(-1)),
    StepVariant("the residual normalised with a softmax", "you turned max(0, q − p) into a distribution with a "
                "softmax; exp(0) = 1 gives every token mass, even those the target wants no more of. Divide by the sum "
                "instead: (q − p)+ = max(0, q − p) / Σ max(0, q − p)",
                resample_from=lambda p, q, t, x: softmax64(np.maximum(0.0, np.asarray(q[t]) - np.asarray(p[t])))),
    StepVariant("the residual as q without the rejected token", "after rejecting x̃ you resample from q with "
                "x̃ left out. That is (q − p)+ only when p is a point mass on x̃ (notebook 06's prompt lookup); in "
                "general every token the draft over-rates has given out too much already: resample from "
                "max(0, q − p) / Σ max(0, q − p)", resample_from=lambda p, q, t, x: without(q[t], x)),
    StepVariant("the residual |q − p|", "your residual is |q − p| renormalised, which gives mass to the tokens the "
                "draft over-rated; keep only the shortfall, max(0, q − p), then renormalise",
                resample_from=lambda p, q, t, x: normalised(np.abs(np.asarray(q[t]) - np.asarray(p[t])))),
    StepVariant("argmax of the residual", ARGMAX_RESIDUAL,
                resample_from=lambda p, q, t, x: most_likely(rejection.residual(p[t], q[t]))),
    StepVariant("argmax for the residual and for the bonus token", f"{ARGMAX_RESIDUAL}; likewise the extra token "
                "from q[K]", resample_from=lambda p, q, t, x: most_likely(rejection.residual(p[t], q[t])),
                bonus_from=lambda p, q, K: most_likely(q[K])),
    StepVariant("the residual always from row 0", "after rejecting x̃_t, resample from row t of both, "
                "(q[t] − p[t])+, the distributions at the rejected position; you take row 0 whatever t is",
                resample_from=lambda p, q, t, x: rejection.residual(p[0], q[0])),
    # the extra token
    StepVariant("no bonus token", NO_BONUS, bonus_from=lambda p, q, K: None if K else q[K]),  # K = 0: one token, as asked
    StepVariant("argmax for the bonus token", ARGMAX_BONUS, bonus_from=lambda p, q, K: most_likely(q[K])),
    StepVariant("the bonus token from the wrong row", WRONG_ROW, bonus_from=lambda p, q, K: q[K - 1]),
    StepVariant("the bonus token from p's last row", f"when all K drafts pass, {EXTRA_ROW}; p[K − 1] is the draft's "
                "distribution for the last draft, which the draft model never extends",
                bonus_from=lambda p, q, K: p[K - 1] if K else q[K]),  # no draft, no row of p: as q[K]
    StepVariant("the bonus token from q's first row", f"when all K drafts pass, {EXTRA_ROW}; q[0] is the "
                "target's distribution for the first draft's position", bonus_from=lambda p, q, K: q[0]),
    # the test
    StepVariant("accepting with probability q(x̃)", "accept x̃_t with probability min(1, q(x̃_t) / p(x̃_t)), "
                "not q(x̃_t): divide by p(x̃_t), the chance it was drafted",
                accept=lambda p, q, t, x: float(q[t][x])),
    StepVariant("accepting with probability min(1, p/q)", "the ratio is upside down: accept with "
                "min(1, q(x̃_t) / p(x̃_t))", accept=lambda p, q, t, x: rejection.accept_probability(q[t], p[t], x)),
    StepVariant("accepting every draft", "a draft must pass the test r < min(1, q(x̃_t) / p(x̃_t)) with a "
                "uniform r drawn from rng; keeping every draft (or never drawing r) samples from p, not q",
                accept=lambda p, q, t, x: 1.0),
    StepVariant("a deterministic test, keep x̃ if q(x̃) ≥ p(x̃)", "the test is random: keep x̃_t when a uniform "
                "r < min(1, q(x̃_t) / p(x̃_t)). A draft the target likes less than the draft did (q < p) is still "
                "kept with probability q/p; rejecting it always leaves its share of q unfilled",
                accept=lambda p, q, t, x: float(q[t][x] >= p[t][x])),
    StepVariant("the comparison inverted, r > min(1, q/p)", "keep x̃_t when r < min(1, q/p), not r > min(1, q/p): "
                "inverted, the test rejects the drafts the target likes and keeps the ones it does not",
                accept=lambda p, q, t, x: 1.0 - rejection.accept_probability(p[t], q[t], x)),
    StepVariant("one r for the whole loop", "draw a fresh r = rng.random() for every draft you judge; with one "
                "r for the loop the verdicts are tied together (a small r accepts everything, a large one "
                "rejects early), and the drafts after the first are kept too often", one_r=True),
    # the rows
    StepVariant("judging x̃_t with q[t + 1]", "row t of q is the target's distribution at the same position as p[t] "
                "and drafted[t]: score() already lined the rows up (the logits at position i predict token i + 1, "
                "so q[t] is the one that predicts x̃_t). Judging with q[t + 1] is off by one — as is indexing q from "
                "1 like the paper while indexing p from 0",
                accept=lambda p, q, t, x: rejection.accept_probability(p[t], q[t + 1], x),
                resample_from=lambda p, q, t, x: rejection.residual(p[t], q[t + 1])),
)
MISTAKES = {variant.name: variant for variant in VARIANTS[1:]}

# Mistakes that show in one output or one exception, named the moment they happen
EXTRA_AFTER_REJECTION = ("the loop emitted a token after the one resampled at a rejection (for drafts {drafts} "
                         "it returned {output}): after a rejection the loop emits the resampled token and stops; "
                         "the extra token from q[K] comes only when all K drafts are accepted")
JUDGED_ON = ("for drafts {drafts} it returned {output}: after the first rejection it went on judging the later "
             "drafts. The loop stops at the first rejection, since the later drafts were conditioned on a token "
             "that is now gone")

NAN_AFTER_NO_REJECTION = (
    "A NaN comes from normalising max(0, q − p) when its sum is 0, on a row where p = q: Algorithm 2 never rejects "
    "there (min(1, q/p) = 1 for every token, and r < 1), so your step rejected a draft it must keep.")
NAN_GUESS = ("Check the comparison: keep x̃_t when r < min(1, q/p); a classic mistake, the comparison inverted, "
             "r > min(1, q/p), rejects the drafts the target likes.")

# ---------------------------------------------------------------------------------------------
# The cases and the grader
# ---------------------------------------------------------------------------------------------

def grading_cases():
    """Small cases where every classic mistake changes the output distribution: K = 1, 2, 3, a
    token with p(x) = 0 (never drafted) and one with q(x) = 0 (a draft the target refuses),
    a row with p = q (never rejected), two drafts in a row each kept about half the time (where
    one r for the whole loop shows); rows as the loop makes them at temperature 0.7 with top-p
    0.9 (zeros in both), and for a greedy target (temperature 0: q a point mass) with a draft at
    temperature 1.5; K = 4, all four kept more than half the time (a slip that only shows
    from the fourth draft on); and K = 0, which the loop sends when a draft proposes nothing."""
    return (
        StepCase(p=rows([0.6, 0.3, 0.1]), q=rows([0.2, 0.5, 0.3], [0.1, 0.2, 0.7])),
        StepCase(p=rows([0.6, 0.3, 0.1], [0.5, 0.1, 0.4]), q=rows([0.3, 0.3, 0.4], [0.25, 0.45, 0.3], [0.7, 0.2, 0.1])),
        StepCase(p=rows([0.5, 0.5, 0.0], [0.3, 0.3, 0.4], [0.6, 0.2, 0.2]),
                 q=rows([0.2, 0.3, 0.5], [0.3, 0.3, 0.4], [0.0, 0.5, 0.5], [0.4, 0.4, 0.2])),
        StepCase(p=shaped([[2.0, 1.2, 0.9, -1.0], [0.2, 1.5, -0.5, 1.1]], temperature=0.7, top_p=0.9),
                 q=shaped([[1.0, 2.0, -1.0, 0.6], [1.5, 0.3, 1.0, -2.0], [0.0, 1.0, 1.8, 0.5]], temperature=0.7, top_p=0.9),
                 label="temperature 0.7 with top-p 0.9"),
        StepCase(p=shaped([[0.5, 1.0, 0.0], [1.0, 0.2, 0.4]], temperature=1.5),
                 q=shaped([[0.0, 2.0, 1.0], [1.0, 0.0, 0.5], [0.3, 0.2, 0.9]], temperature=0),
                 label="a greedy target (temperature 0) with a draft at temperature 1.5"),
        StepCase(p=rows([0.5, 0.3, 0.2], [0.2, 0.5, 0.3], [0.3, 0.3, 0.4], [0.4, 0.4, 0.2]),
                 q=rows([0.4, 0.4, 0.2], [0.3, 0.4, 0.3], [0.2, 0.4, 0.4], [0.5, 0.2, 0.3], [0.2, 0.2, 0.6])),
        StepCase(p=np.zeros((0, 3)), q=rows([0.2, 0.5, 0.3]), label=NO_DRAFTS),
    )


ALGORITHM_2_EXERCISE = chain_exercise(
    "Algorithm 2", ALGORITHM_2, MISTAKES, grading_cases(), call="check_speculative_step(my_speculative_step)",
    walk_through="Walk through Steps 3-4: r ~ U[0, 1) per draft, accept if r < min(1, q/p), else one token from "
                 "(q − p)+ and stop; all accepted: one more from q[K].",
    after_a_non_draft={"extra": EXTRA_AFTER_REJECTION, "judged on": JUDGED_ON},
    nan_hint=NAN_AFTER_NO_REJECTION, nan_guess=NAN_GUESS)


def check_speculative_step(fn, trials=TRIALS, seed=0):
    """Grade a learner's speculative_step(drafted, p, q, rng) -> list[int] by its output distribution
    (grading.check_sampler); returns a Check. Each classic mistake moves the law of some case by a
    total-variation distance of 0.08 or more (tests/test_step_exercise.py checks it), far beyond the
    noise of 2,000 trials."""
    return check_sampler(fn, ALGORITHM_2_EXERCISE, trials, seed)


def solution():
    """The library's own Steps 3-4: print it when you are stuck (it is what speculative_sampling runs)."""
    print(inspect.getsource(speculative.speculative_step))
