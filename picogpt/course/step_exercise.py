"""Notebook 03's main exercise: write Steps 3-4 of Algorithm 2 yourself, and its grader.

You write `speculative_step(drafted, p, q, rng) -> list[int]`, the function
`picogpt.speculative.speculative_sampling` calls once per loop (its `verify=` argument runs yours):
    drafted  the K drafted ids x̃_1 .. x̃_K (K may be 0: a draft that proposes nothing)
    p        [K, n_vocab]      the draft's distributions they were sampled from
    q        [K + 1, n_vocab]  the target's, one more row: q[K] is q_{K+1}
    rng      a numpy Generator: every random draw comes from it
and it returns what the loop emits: the accepted drafts, then one token resampled from
(q - p)+ at the first rejection, or the extra ("bonus") token from q[K] when all K pass.

`check_speculative_step(fn)` grades it by its output *distribution* and returns a `Check`
(grading.py): over small p/q cases (K = 0 to 4, rows shaped by a temperature, top-p and a
greedy target among them) it draws the drafts from p, calls fn on copies of them as the loop
does (grading.on_copies), and tests the histogram of (drafts, output) against the exact
probabilities of Algorithm 2, as a whole and part by part:
how many drafts were kept, the token after a rejection at each position, the extra token. A
wrong step is told which part differs, with the expected and observed frequencies, and the
classic mistake (`VARIANTS`) whose exact distribution its outputs fit, if one does, or, when the
same drafts always give the same output, the random numbers that restart at every call; mistakes
that show in a single output or exception (a token after the resampled one, an id outside the
vocabulary, rng.choice refusing an unnormalised residual or the NaN of rejecting where p = q, an
index past q's last row, p[0] read when there are no drafts) are named as soon as they happen,
with the step and the drafts it was called with. The grader never raises. `VARIANTS[i].step`
runs a mistake, for notebook 04's demo.
Notebook 03's second exercise, the loop around the step, is loop_exercise.py.
"""

import inspect
from dataclasses import dataclass
from itertools import product

import numpy as np

from .. import rejection, speculative
from ..errors import shown
from ..sampling import distribution, sample, softmax64
from ..speculative import token_ids
from .grading import Check, Part, always_the_same, best_fitting, function_name, judge, located, not_answered, on_copies, raised

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


def most_likely(row):
    """The point mass on the row's most likely token: what argmax in place of a sample draws."""
    return np.eye(len(row))[int(np.argmax(row))]


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


NORMALISE = ("divide max(0, q − p) by its sum before sampling from it: (q − p)+ is a distribution, "
             "and the mass it lacks must not fall on one token")
EXTRA_ROW = ("the extra token comes from q[K], the last row of q (the paper's q_{K+1}): the target's distribution "
             "after the last draft, which only the scoring call computed")
WRONG_ROW = f"when all K drafts pass, {EXTRA_ROW}, not q[K − 1] (that row already judged the last draft)"
NO_BONUS = ("when all K drafts are accepted, the loop emits one more token, from q[K] (the target's distribution "
            "after the last draft): K + 1 tokens, not the K drafts alone. Without it the text is still distributed "
            "as q (the next loop drafts that position again), but every clean sweep throws away a distribution "
            "the target already computed")
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

SAME_EVERY_CALL = ("the same random numbers in every call: your step gave the same output every time it was handed "
                   "the same {inputs}, as one that makes its own Generator with a fixed seed does "
                   "(np.random.default_rng(0) inside the step starts the same numbers at every call). Draw every "
                   "random number from the rng argument (rng.random(), rng.choice); argmax in place of a sample, or "
                   "a test without a uniform, draws none at all.")

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
# The grader
# ---------------------------------------------------------------------------------------------

TRIALS = 2000  # calls of the learner's step per case
SEED_CHECKS = 20  # trials per case whose step is called twice more with same-seed Generators
SIGNIFICANCE = 1e-4  # a correct step is refused with at most about this probability (all the tests together)


@dataclass(frozen=True)
class StepCase:
    """Rows of p [K, V] and q [K + 1, V]; the drafts are sampled from p's rows. `label` says how
    the rows were made when that matters to a learner (a temperature, top-p, no drafts)."""
    p: np.ndarray
    q: np.ndarray
    label: str = ""

    @property
    def K(self):
        return len(self.p)

    @property
    def n_vocab(self):
        return self.q.shape[1]


def rows(*values):
    return np.array(values, np.float64).reshape(len(values), -1)


def shaped(logits, **controls):
    """Rows of probabilities as the loop hands them to a step under sampling controls."""
    return distribution(np.array(logits, np.float64), **controls)


NO_DRAFTS = "no drafts at all, K = 0, as notebook 06's prompt lookup proposes where the text has no match"


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


@dataclass(frozen=True)
class StepExercise:
    """What check_speculative_step grades a step(drafted, p, q, rng) against: the right rule and the
    named mistakes (each with output_distribution(drafted, p, q) -> {output: probability} and a hint),
    the cases, and what the grader says where the rule matters."""
    name: str  # the rule, as the learner knows it
    rule: object
    mistakes: dict  # name -> rule
    cases: tuple  # StepCase
    walk_through: str  # said when the outputs fit neither the rule nor a mistake
    nan_hint: str  # what a NaN from normalising an empty residual means here
    nan_guess: str  # the mistake that likely made it, said only when no other is named or located first
    after_a_non_draft: dict  # "extra" / "judged on" -> a message template ({drafts}, {output})
    call: str = "check_speculative_step(my_speculative_step)"  # how the learner calls the grader
    next_token: str = "the token resampled after rejecting x̃_{t}"  # {t}: the first draft not kept, from 1; {i}: kept

    @property
    def grader(self):
        return self.call.split("(")[0]


def all_drafts(case):
    """Every possible draft sequence and its probability under p: [(drafted tuple, probability)]."""
    V = case.n_vocab
    return [(d, float(np.prod([case.p[t, x] for t, x in enumerate(d)]))) for d in product(range(V), repeat=case.K)]


def exact_joint(variant, case):
    """{(drafted, output): probability} when drafts come from p and the step is `variant`."""
    joint = {}
    for drafted, prob in all_drafts(case):
        if prob > 0:
            for output, q_out in variant.output_distribution(list(drafted), case.p, case.q).items():
                joint[(drafted, output)] = prob * q_out
    return joint


ALGORITHM_2_EXERCISE = StepExercise(
    "Algorithm 2", ALGORITHM_2, MISTAKES, grading_cases(),
    walk_through="Walk through Steps 3-4: r ~ U[0, 1) per draft, accept if r < min(1, q/p), else one token from "
                 "(q − p)+ and stop; all accepted: one more from q[K].",
    nan_hint=NAN_AFTER_NO_REJECTION, nan_guess=NAN_GUESS,
    after_a_non_draft={"extra": EXTRA_AFTER_REJECTION, "judged on": JUDGED_ON})


def rows_text(name, rows_):
    return f"{name} = {np.round(rows_, 3).tolist()}"


def drafts_text(drafted):
    return f"the drafts {list(drafted)}"


def parts(case, number, exercise):
    """The factors of the law of (drafts, output) in one case, each with where it is: (Part, text).
    How many drafts were kept, given the drafts; the token after the kept ones when a draft was
    not kept at position t, given the drafts up to it; the extra token when all K were kept."""
    K, tokens = case.K, tuple(range(case.n_vocab))
    where = f" (case {number}, K = {K}{', ' + case.label if case.label else ''}"
    found = []
    if K:
        found.append((Part("how many drafts were kept", lambda key: (key[0], len(key[1]) - 1), tuple(range(K + 1)),
                           "drafts kept", lambda n: f"{n} kept", drafts_text),
                      f"{where}; {rows_text('p', case.p)}, {rows_text('q', case.q)})"))
    for t in range(K):
        found.append((Part(exercise.next_token.format(t=t + 1, i=t),
                           lambda key, t=t: (key[0][: t + 1], key[1][-1]) if len(key[1]) == t + 1 else None, tokens,
                           "tokens", lambda y: f"token {y}", drafts_text),
                      f"{where}; {rows_text(f'p[{t}]', case.p[t])}, {rows_text(f'q[{t}]', case.q[t])})"))
    found.append((Part("the extra token after all K drafts were kept" if K else "the one token a loop with no drafts emits",
                       lambda key: (key[0], key[1][-1]) if len(key[1]) == K + 1 else None, tokens, "tokens",
                       lambda y: f"token {y}", drafts_text if K else None),
                  f"{where}; {rows_text(f'q[{K}]', case.q[K])})"))
    return found


def judged(counts, cases, exercise):
    """The outputs tested against the rule, as a whole and part by part (grading.judge)."""
    laws = [exact_joint(exercise.rule, case) for case in cases]
    parts_ = [parts(case, number, exercise) for number, case in enumerate(cases, 1)]
    return judge(laws, counts, parts_, SIGNIFICANCE)


def distribution_message(counts, cases, exercise):
    """What to say about outputs that are not the rule's: where they differ, and the classic
    mistake they fit if there is one (or, when the same drafts always gave the same output, the
    random numbers that restart at every call)."""
    verdict = judged(counts, cases, exercise)
    best_p, best = best_fitting(counts, [(rule, [exact_joint(rule, case) for case in cases])
                                         for rule in exercise.mistakes.values()])
    if best_p > SIGNIFICANCE:
        return (f"your outputs are not distributed as {exercise.name}'s. Where they differ: "
                f"{located(verdict, exercise.name, 1)}. That is a classic mistake, {best.name} (its exact distribution "
                f"fits yours: p = {best_p:.2g}): {best.hint}.")
    if always_the_same([exact_joint(exercise.rule, case) for case in cases], counts, lambda key: key[0], SIGNIFICANCE):
        return (f"your outputs are not distributed as {exercise.name}'s. Where they differ: "
                f"{located(verdict, exercise.name, 1)}. That is a classic mistake, {SAME_EVERY_CALL.format(inputs='drafts')}")
    return (f"your outputs are not distributed as {exercise.name}'s. Where they differ: {located(verdict, exercise.name, 2)}. "
            f"That is none of the classic mistakes I know by name. {exercise.walk_through}")


def shape_problem(output, drafted, n_vocab, exercise=None):
    """Why `output` cannot be what a loop emits for these drafts: (kind, message), or None.
    kind is "fatal", or "extra" / "judged on" for a prefix that goes wrong after a rejection:
    one output of K = 1 cannot tell those two apart, so the grader decides after every trial."""
    K, tokens = len(drafted), token_ids(output)
    if tokens is None:
        return "fatal", (f"it returned {shown(repr(output), 120)}; return a list of token ids (Python ints), e.g. "
                         "emitted.append(int(token)).")
    outside = [x for x in tokens if not 0 <= x < n_vocab]
    if outside:
        return "fatal", (f"it returned token id {outside[0]}, outside the vocabulary (ids 0..{n_vocab - 1}). From a "
                         "hand-written inverse CDF this means the probabilities you searched add up to less than 1: "
                         f"a classic mistake, the residual not normalised ({NORMALISE}).")
    if not tokens:
        return "fatal", ("it returned no token; a loop always emits at least one: after a rejection of the very first "
                         "draft, the token resampled from (q − p)+; with no drafts at all (K = 0), one token from q[0].")
    if len(tokens) > K + 1:
        return "fatal", (f"it returned {len(tokens)} tokens for K = {K} drafts; a loop emits between 1 and K + 1 "
                         "(the accepted drafts, then one more).")
    if list(tokens[:-1]) != list(drafted[: len(tokens) - 1]):
        j = next(i for i, (a, b) in enumerate(zip(tokens, drafted)) if a != b)  # the first token that is not a draft
        kind = "extra" if len(tokens) == j + 2 else "judged on"
        return kind, (exercise or ALGORITHM_2_EXERCISE).after_a_non_draft[kind].format(drafts=list(drafted), output=list(tokens))
    return None


def error_message(fn, error, drafted, case, exercise=None):
    """What to say about an exception the learner's step raised inside the grader: (the step, the
    drafts, the exception and what it means; the mistake that likely made it, or ""). The classic
    mistakes that end in one (rng.choice refusing a residual that is not a distribution) are named."""
    exercise = exercise or ALGORITHM_2_EXERCISE
    text = str(error)
    said = raised(fn, error, f"inside {exercise.grader}, for the drafts {list(drafted)} (K = {case.K})")
    if case.K == 0:
        return (f"{said}. With no drafts (K = 0: notebook 06's prompt lookup proposes none where the text has no "
                "match, and speculative_sampling still calls the step) p has no rows and q has one, q[0]: the loop "
                "emits one token from q[0]. Read the vocabulary's size from q (q.shape[1]), not from p[0]."), ""
    if isinstance(error, ValueError) and "do not sum to 1" in text:
        return f"{said}. That is a classic mistake, the residual not normalised: {NORMALISE}.", ""
    if isinstance(error, ValueError) and "non-negative" in text:
        return (f"{said}. q − p is negative where the draft over-rates a token: the residual is max(0, q − p), "
                "then divided by its sum."), ""
    if isinstance(error, ValueError) and "same size" in text:
        return (f"{said}. rng.choice(n, p=row) draws from 0 .. n − 1, one id per entry of row: n is the vocabulary's "
                f"size, q.shape[1] = {case.n_vocab} here; len(q) is q's number of rows, K + 1."), ""
    if isinstance(error, ValueError) and "NaN" in text:
        return f"{said}. {exercise.nan_hint}", exercise.nan_guess
    if isinstance(error, IndexError):
        return (f"{said}. drafted and p have K rows (0 .. K − 1), q has K + 1 (0 .. K). The paper counts from 1: its "
                "x̃_t, p_t and q_t are drafted[t − 1], p[t − 1] and q[t − 1] here, and its extra row q_{K+1} is q[K]."), ""
    return f"{said} (p = {case.p.tolist()}, q = {case.q.tolist()}).", ""


def attempt(fn, drafted, case, rng, exercise=None):
    """Call the learner's step on copies of drafted, p and q, as the loop does (grading.on_copies):
    (output, None), or (None, (what to say, the mistake that likely made it)) if it raised."""
    try:
        return on_copies(fn, list(drafted), case.p, case.q, rng), None
    except Exception as e:  # the learner's code: report it, don't crash the notebook
        return None, error_message(fn, e, drafted, case, exercise)


def drafts_for(case, trials, rng):
    """`trials` draft sequences sampled from p's rows: [trials, K] token ids."""
    columns = [rng.choice(case.n_vocab, size=trials, p=row) for row in case.p]
    return np.stack(columns, axis=1) if columns else np.zeros((trials, 0), np.int64)


def run_case(fn, case, trials, draft_rng, step_rng, seed_checks, exercise):
    """Call the learner's step `trials` times on drafts sampled from p: ({(drafts, output): count},
    {kind: the first message of a mistake shown after a rejection}, what stopped it or None: (what
    to say, the mistake that likely made it or ""))."""
    counts, after_rejection = {}, {}
    for trial, row in enumerate(drafts_for(case, trials, draft_rng)):
        drafted = tuple(int(x) for x in row)
        output, error = attempt(fn, drafted, case, step_rng, exercise)
        if error:
            return counts, after_rejection, error
        problem = shape_problem(output, drafted, case.n_vocab, exercise)
        if problem and problem[0] == "fatal":
            return counts, after_rejection, (problem[1], "")
        if problem:
            after_rejection.setdefault(problem[0], problem[1])
            continue
        if trial < SEED_CHECKS:  # several: a step with its own unseeded rng may agree once by chance
            same_seed = seed_checks.spawn(1)[0]
            (first, error), (again, error_again) = (attempt(fn, drafted, case, np.random.default_rng(same_seed), exercise)
                                                    for _ in range(2))
            if error or error_again:
                return counts, after_rejection, error or error_again
            if token_ids(first) != token_ids(again):
                return counts, after_rejection, ("two calls with Generators of the same seed gave different outputs: "
                                                 "draw every random number from the rng argument (rng.random(), "
                                                 "rng.choice).", "")
        key = (drafted, token_ids(output))
        counts[key] = counts.get(key, 0) + 1
    return counts, after_rejection, None


def cases_text(cases):
    Ks = ", ".join(str(K) for K in sorted({case.K for case in cases}))
    labels = [case.label for case in cases if case.label and case.label != NO_DRAFTS]
    return f"K = {Ks}" + (f"; rows at {' and at '.join(labels)}" if labels else "")


def check_speculative_step(fn, trials=TRIALS, seed=0, exercise=None):
    """Grade a learner's speculative_step(drafted, p, q, rng) -> list[int]; returns a Check.

    First the shape of each output (a prefix of the drafts, then one token), and that the same
    Generator seed gives the same output; then the distribution: `trials` calls per case, the
    drafts sampled from p, the (drafts, output) histogram tested against Algorithm 2's exact
    probabilities as a whole and part by part (how many drafts were kept; the token after a draft
    that was not; the extra token after all K). The drafts, the learner's step in each case and the
    same-seed checks draw from independent streams (one SeedSequence, spawned). A correct step is
    refused with probability about SIGNIFICANCE = 1e-4 at most; each classic mistake moves the
    distribution of some case by a total-variation distance of 0.08 or more
    (tests/test_step_exercise.py checks it), far beyond the noise of 2,000 trials. A wrong step
    is told which part of its output differs, with the frequencies, and the classic mistake it
    fits when there is one. `exercise` (a StepExercise) grades another rule with the same
    machinery (notebook 08's block verification)."""
    exercise = exercise or ALGORITHM_2_EXERCISE
    if not_answered(fn) or not callable(fn):
        return Check(False, f"write your step function, then pass the function itself: {exercise.call}.")
    cases = exercise.cases
    draft_stream, seed_checks, *step_streams = np.random.SeedSequence(seed).spawn(2 + len(cases))
    draft_rng = np.random.default_rng(draft_stream)
    counts, after_rejection, stopped = [], {}, None
    for case, step_stream in zip(cases, step_streams):
        case_counts, problems, stopped = run_case(fn, case, trials, draft_rng, np.random.default_rng(step_stream),
                                                  seed_checks, exercise)
        if stopped:
            break
        counts.append(case_counts)
        for kind, message in problems.items():
            after_rejection.setdefault(kind, message)
    if after_rejection:  # judging on shows, with K >= 2, a second token after the first non-draft
        return Check(False, after_rejection.get("judged on") or after_rejection["extra"])
    done = cases[: len(counts)]  # the cases the step ran through
    if stopped:  # what the step did before it stopped, if that was wrong already, comes first (and no guess after it)
        said, guess = stopped
        if done and not judged(counts, done, exercise).ok:
            return Check(False, f"{distribution_message(counts, done, exercise)} Then, in case {len(done) + 1}: {said}")
        return Check(False, f"{said} {guess}".rstrip())
    verdict = judged(counts, cases, exercise)
    if verdict.ok:
        return Check(True, f"over {len(cases)} cases ({cases_text(cases)}), {len(cases) * trials:,} calls, your step's "
                           f"outputs fit {exercise.name}'s exact distribution, as a whole (chi-square p = "
                           f"{verdict.p_value:.2g}) and part by part: how many drafts were kept, the token that "
                           f"follows them, the extra token. Run it inside the real loop: "
                           f"speculative_sampling(..., verify={function_name(fn)}).")
    return Check(False, distribution_message(counts, cases, exercise))


def solution():
    """The library's own Steps 3-4: print it when you are stuck (it is what speculative_sampling runs)."""
    print(inspect.getsource(speculative.token_by_token))
