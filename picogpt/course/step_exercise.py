"""Notebook 03's main exercise: write Steps 3-4 of Algorithm 2 yourself, and its grader.

You write `speculative_step(drafted, p, q, rng) -> list[int]`, the function
`picogpt.speculative.speculative_sampling` calls once per loop (its `step=` argument runs yours):
    drafted  the K drafted ids x̃_1 .. x̃_K
    p        [K, n_vocab]      the draft's distributions they were sampled from
    q        [K + 1, n_vocab]  the target's, one more row: q[K] is q_{K+1}
    rng      a numpy Generator: every random draw comes from it
and it returns what the loop emits: the accepted drafts, then one token resampled from
(q - p)+ at the first rejection, or the extra ("bonus") token from q[K] when all K pass.

`check_speculative_step(fn)` grades it by its output *distribution*: over several small p/q
cases it draws the drafts from p, calls fn, and compares the histogram of (drafts, output) with
the exact probabilities of Algorithm 2 by a chi-square test. When the answer is wrong it also
tests the classic mistakes (`VARIANTS`), whose exact distributions it computes the same way,
and names the one the output fits; mistakes that show in a single output or exception (a token
after the resampled one, an id outside the vocabulary, rng.choice refusing an unnormalised
residual or the NaN of rejecting where p = q, an index past q's last row) are named as soon as
they happen, and a step that changes its inputs in place is refused. Every call of the learner's
code is guarded: the grader reports, it never raises. `VARIANTS[i].step` runs a mistake, for
notebook 04's demo.
"""

import inspect
from dataclasses import dataclass
from itertools import product

import numpy as np

from .. import rejection, speculative
from ..model import ModelView
from ..sampling import sample
from ..speculative import token_ids
from .chi_square import chi_square_sf, chi_square_test

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


NORMALISE = ("divide max(0, q − p) by its sum before sampling from it: (q − p)+ is a distribution, "
             "and the mass it lacks must not fall on one token")
EXTRA_ROW = ("the extra token comes from q[K], the last row of q (the paper's q_{K+1}): the target's distribution "
             "after the last draft, which only the scoring call computed")
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
    StepVariant("the residual as q without the rejected token", "after rejecting x̃ you resample from q with "
                "x̃ left out. That is (q − p)+ only when p is a point mass on x̃ (notebook 06's prompt lookup); in "
                "general every token the draft over-rates has given out too much already: resample from "
                "max(0, q − p) / Σ max(0, q − p)", resample_from=lambda p, q, t, x: without(q[t], x)),
    StepVariant("the residual |q − p|", "your residual is |q − p| renormalised, which gives mass to the tokens the "
                "draft over-rated; keep only the shortfall, max(0, q − p), then renormalise",
                resample_from=lambda p, q, t, x: normalised(np.abs(np.asarray(q[t]) - np.asarray(p[t])))),
    StepVariant("the residual always from row 0", "after rejecting x̃_t, resample from row t of both, "
                "(q[t] − p[t])+, the distributions at the rejected position; you take row 0 whatever t is",
                resample_from=lambda p, q, t, x: rejection.residual(p[0], q[0])),
    # the extra token
    StepVariant("no bonus token", "when all K drafts are accepted, the loop emits one more token, from q[K] "
                "(the target's distribution after the last draft): K + 1 tokens. (Without it the text is still "
                "distributed as q — the next loop drafts that position again — but every clean sweep throws away "
                "a distribution the target already computed.)", bonus_from=lambda p, q, K: None),
    StepVariant("the bonus token from the wrong row", f"when all K drafts pass, {EXTRA_ROW}, not q[K − 1] "
                "(that row already judged the last draft)", bonus_from=lambda p, q, K: q[K - 1]),
    StepVariant("the bonus token from p's last row", f"when all K drafts pass, {EXTRA_ROW}; p[K − 1] is the draft's "
                "distribution for the last draft, which the draft model never extends",
                bonus_from=lambda p, q, K: p[K - 1]),
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
    "there (min(1, q/p) = 1 for every token, and r < 1), so your step rejected a draft it must keep. Check the "
    "comparison: keep x̃_t when r < min(1, q/p); a classic mistake, the comparison inverted, r > min(1, q/p), "
    "rejects the drafts the target likes.")

# ---------------------------------------------------------------------------------------------
# The grader
# ---------------------------------------------------------------------------------------------

TRIALS = 4000  # calls of the learner's step per case
SEED_CHECKS = 20  # trials per case whose step is called twice more with same-seed Generators
SIGNIFICANCE = 1e-4  # a correct step is refused with at most this probability (the combined test)


@dataclass(frozen=True)
class StepCase:
    """Rows of p [K, V] and q [K + 1, V]; the drafts are sampled from p's rows."""
    p: np.ndarray
    q: np.ndarray

    @property
    def K(self):
        return len(self.p)

    @property
    def n_vocab(self):
        return self.p.shape[1]


def grading_cases():
    """Small cases where every classic mistake changes the output distribution: K = 1, 2, 3, a
    token with p(x) = 0 (never drafted) and one with q(x) = 0 (a draft the target refuses),
    a row with p = q (never rejected), and two drafts in a row each kept about half the time
    (where one r for the whole loop shows)."""
    def rows(*r):
        return np.array(r, np.float64)
    return (
        StepCase(p=rows([0.6, 0.3, 0.1]), q=rows([0.2, 0.5, 0.3], [0.1, 0.2, 0.7])),
        StepCase(p=rows([0.6, 0.3, 0.1], [0.5, 0.1, 0.4]), q=rows([0.3, 0.3, 0.4], [0.25, 0.45, 0.3], [0.7, 0.2, 0.1])),
        StepCase(p=rows([0.5, 0.5, 0.0], [0.3, 0.3, 0.4], [0.6, 0.2, 0.2]),
                 q=rows([0.2, 0.3, 0.5], [0.3, 0.3, 0.4], [0.0, 0.5, 0.5], [0.4, 0.4, 0.2])),
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
    after_a_non_draft: dict  # "extra" / "judged on" -> a message template ({drafts}, {output})
    call: str = "check_speculative_step(my_speculative_step)"  # how the learner calls the grader


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
    nan_hint=NAN_AFTER_NO_REJECTION, after_a_non_draft={"extra": EXTRA_AFTER_REJECTION, "judged on": JUDGED_ON})


def fit(counts, variant, cases):
    """Chi-square of the observed counts against `variant`, one test per case, the statistics and
    degrees of freedom added up into one test: (statistic, dof, p-value, an observed (drafts,
    output) that `variant` never produces, or None)."""
    statistic, dof, impossible = 0.0, 0, None
    for case, case_counts in zip(cases, counts):
        joint = exact_joint(variant, case)
        never = [key for key in case_counts if joint.get(key, 0.0) == 0.0]
        if never:
            impossible = impossible or never[0]
            continue
        keys = sorted(set(joint) | set(case_counts))
        s, d, _ = chi_square_test([case_counts.get(k, 0) for k in keys], [joint.get(k, 0.0) for k in keys])
        statistic, dof = statistic + s, dof + d
    if impossible is not None:
        return float("inf"), dof, 0.0, impossible
    return statistic, dof, chi_square_sf(statistic, dof), None


def shape_problem(output, drafted, n_vocab, exercise=None):
    """Why `output` cannot be what a loop emits for these drafts: (kind, message), or None.
    kind is "fatal", or "extra" / "judged on" for a prefix that goes wrong after a rejection:
    one output of K = 1 cannot tell those two apart, so the grader decides after every trial."""
    K, tokens = len(drafted), token_ids(output)
    if tokens is None:
        return "fatal", (f"it returned {output!r}; return a list of token ids (Python ints), e.g. "
                         "emitted.append(int(token)).")
    outside = [x for x in tokens if not 0 <= x < n_vocab]
    if outside:
        return "fatal", (f"it returned token id {outside[0]}, outside the vocabulary (ids 0..{n_vocab - 1}). From a "
                         "hand-written inverse CDF this means the probabilities you searched add up to less than 1: "
                         f"a classic mistake, the residual not normalised ({NORMALISE}).")
    if not tokens:
        return "fatal", ("it returned no token; a loop always emits at least one: after a rejection of the very first "
                         "draft, the token resampled from (q − p)+.")
    if len(tokens) > K + 1:
        return "fatal", (f"it returned {len(tokens)} tokens for K = {K} drafts; a loop emits between 1 and K + 1 "
                         "(the accepted drafts, then one more).")
    if list(tokens[:-1]) != list(drafted[: len(tokens) - 1]):
        j = next(i for i, (a, b) in enumerate(zip(tokens, drafted)) if a != b)  # the first token that is not a draft
        kind = "extra" if len(tokens) == j + 2 else "judged on"
        return kind, (exercise or ALGORITHM_2_EXERCISE).after_a_non_draft[kind].format(drafts=list(drafted), output=list(tokens))
    return None


def error_message(error, drafted, case, exercise=None):
    """What to say about an exception the learner's step raised: the classic mistakes that end
    in one (rng.choice refusing a residual that is not a distribution) by name."""
    exercise = exercise or ALGORITHM_2_EXERCISE
    text = str(error)
    if isinstance(error, ValueError) and "do not sum to 1" in text:
        return (f"your step raised ValueError: {text}. That is a classic mistake, the residual not normalised: "
                f"{NORMALISE}.")
    if isinstance(error, ValueError) and "non-negative" in text:
        return (f"your step raised ValueError: {text}. q − p is negative where the draft over-rates a token: "
                "the residual is max(0, q − p), then divided by its sum.")
    if isinstance(error, ValueError) and "NaN" in text:
        return f"your step raised ValueError: {text}. {exercise.nan_hint}"
    if isinstance(error, IndexError):
        return (f"your step raised IndexError: {text}. drafted and p have K rows (0 .. K − 1), q has K + 1 (0 .. K). "
                "The paper counts from 1: its x̃_t, p_t and q_t are drafted[t − 1], p[t − 1] and q[t − 1] here, and its "
                "extra row q_{K+1} is q[K].")
    return (f"with drafts {list(drafted)}, p = {case.p.tolist()}, q = {case.q.tolist()}, your step raised "
            f"{type(error).__name__}: {error}")


def attempt(fn, drafted, case, rng, exercise=None):
    """Call the learner's step on copies of drafted, p and q: (output, None), or (None, what to say)
    if it raised or changed one of them in place (the loop keeps using them after the step returns:
    the caches' roll-back reads drafted, the trace and the plots keep p and q)."""
    given = {"drafted": list(drafted), "p": case.p.copy(), "q": case.q.copy()}
    try:
        output = fn(given["drafted"], given["p"], given["q"], rng)
    except Exception as e:  # the learner's code: report it, don't crash the notebook
        return None, error_message(e, drafted, case, exercise)
    original = {"drafted": list(drafted), "p": case.p, "q": case.q}
    changed = [name for name in given if not np.array_equal(np.asarray(given[name]), np.asarray(original[name]))]
    if changed:
        return None, (f"your step changed its argument {changed[0]} in place (drafts {list(drafted)}): the loop keeps using "
                      "its inputs after the step returns (the roll-back reads the drafts, the trace and the plots keep p "
                      "and q). Work on new arrays: np.maximum(0, q[t] − p[t]) makes one, q[t] −= p[t] does not.")
    return output, None


def p_text(p_value):
    return f"{p_value:.2g}" if p_value >= 1e-16 else "< 1e-16"


def step_name(fn):
    """The learner's function name as they would type it (a lambda has none)."""
    name = getattr(fn, "__name__", "")
    return name if name.isidentifier() else "your_step"


def check_speculative_step(fn, trials=TRIALS, seed=0, exercise=None):
    """Grade a learner's speculative_step(drafted, p, q, rng) -> list[int]. Prints why; returns a bool.

    First the shape of each output (a prefix of the drafts, then one token), and that the same
    Generator seed gives the same output; then the distribution: `trials` calls per case, the
    drafts sampled from p, one chi-square test of the (drafts, output) histogram against Algorithm 2's
    exact probabilities. The drafts, the learner's step in each case and the same-seed checks draw
    from independent streams (one SeedSequence, spawned). A correct step is refused with probability
    at most SIGNIFICANCE = 1e-4; each classic mistake moves the distribution of some case by a
    total-variation distance of 0.08 or more (tests/test_step_exercise.py checks it), far beyond the
    noise of 4,000 trials. `exercise` (a StepExercise) grades another rule with the same machinery
    (notebook 08's block verification)."""
    exercise = exercise or ALGORITHM_2_EXERCISE

    def verdict(ok, message):
        print(("✔ right: " if ok else "✘ not yet: ") + message)
        return ok

    if fn is None or fn is Ellipsis or not callable(fn):
        return verdict(False, f"write your step function, then pass the function itself: {exercise.call}.")
    cases = exercise.cases
    draft_stream, seed_checks, *step_streams = np.random.SeedSequence(seed).spawn(2 + len(cases))
    draft_rng = np.random.default_rng(draft_stream)
    counts, after_rejection = [], {}  # kind -> the first message of that kind
    for case, step_stream in zip(cases, step_streams):
        step_rng, case_counts = np.random.default_rng(step_stream), {}
        for trial in range(trials):
            drafted = tuple(int(sample(row, draft_rng)) for row in case.p)
            output, error = attempt(fn, drafted, case, step_rng, exercise)
            if error:
                return verdict(False, error)
            problem = shape_problem(output, drafted, case.n_vocab, exercise)
            if problem and problem[0] == "fatal":
                return verdict(False, problem[1])
            if problem:
                after_rejection.setdefault(problem[0], problem[1])
                continue
            if trial < SEED_CHECKS:  # several: a step with its own unseeded rng may agree once by chance
                same_seed = seed_checks.spawn(1)[0]
                (first, error), (again, error_again) = (attempt(fn, drafted, case, np.random.default_rng(same_seed), exercise)
                                                        for _ in range(2))
                if error or error_again:
                    return verdict(False, error or error_again)
                if token_ids(first) != token_ids(again):
                    return verdict(False, "two calls with Generators of the same seed gave different outputs: "
                                          "draw every random number from the rng argument (rng.random(), rng.choice).")
            key = (drafted, token_ids(output))
            case_counts[key] = case_counts.get(key, 0) + 1
        counts.append(case_counts)
    if after_rejection:  # judging on shows, with K >= 2, a second token after the first non-draft
        return verdict(False, after_rejection.get("judged on") or after_rejection["extra"])
    statistic, dof, p_value, impossible = fit(counts, exercise.rule, cases)
    Ks = ", ".join(str(K) for K in sorted({case.K for case in cases}))
    if p_value > SIGNIFICANCE:
        return verdict(True, f"over {len(cases)} cases (K = {Ks}), {len(cases) * trials:,} calls, your step's outputs "
                             f"fit {exercise.name}'s exact distribution (chi² = {statistic:.0f} on {dof} dof, "
                             f"p = {p_value:.2g}). Run it inside the real loop: speculative_sampling(..., step={step_name(fn)}).")
    against = (f"for drafts {list(impossible[0])} it returned {list(impossible[1])}, which {exercise.name} never does"
               if impossible else f"chi² = {statistic:.0f} on {dof} dof against {exercise.name}, p = {p_text(p_value)}")
    fits = sorted(((fit(counts, v, cases)[2], v) for v in exercise.mistakes.values()), key=lambda pv: -pv[0])
    best_p, best = fits[0]
    if best_p > SIGNIFICANCE:
        return verdict(False, f"your outputs match a classic mistake, {best.name} (chi² test p = {best_p:.2g}; "
                              f"{against}): {best.hint}.")
    return verdict(False, f"your outputs are not distributed as {exercise.name}'s ({against}), nor like any classic "
                          f"mistake I know. {exercise.walk_through}")


def solution():
    """The library's own Steps 3-4: print it when you are stuck (it is what speculative_sampling runs)."""
    print(inspect.getsource(speculative.speculative_step))


# ---------------------------------------------------------------------------------------------
# Exercise 2: the loop around the step, with both KV caches and their roll-back
# ---------------------------------------------------------------------------------------------


class Recording(ModelView):
    """Wraps a model: records, for every call, how many tokens its cache held and how many ids came in."""

    def __init__(self, model):
        super().__init__(model)
        self.calls = []

    def __call__(self, ids, cache):
        self.calls.append((len(cache), len(ids)))
        return self.model(ids, cache)


def recording_step(step, log):
    """step, also logging what it emitted in each loop."""
    def logged(drafted, p, q, rng):
        emitted = step(drafted, p, q, rng)
        log.append(list(emitted))
        return emitted
    return logged


def cache_problem(draft, target, emitted_per_loop, n_prompt, K):
    """Compare the cache lengths seen at each loop's first draft call and its target call with
    what a correct roll-back leaves (n + accepted drafts); say which cache was not rolled back."""
    n = n_prompt
    target_calls, draft_calls = target.calls, draft.calls[::K]  # K draft calls per loop
    for loop, emitted in enumerate(emitted_per_loop[:-1]):
        n_next = n + len(emitted)
        kept = n_next - 1  # x_1 .. x_{n + n_accepted}: neither model has seen the new token
        for name, calls in (("target", target_calls), ("draft", draft_calls)):
            if loop + 1 < len(calls) and calls[loop + 1][0] == 0 < kept:
                return (f"the {name}'s cache was empty at loop {loop + 2}'s first {name} call, which then read all "
                        f"{calls[loop + 1][1]} tokens again: the tokens are right, but every loop re-reads the whole "
                        f"text. Make each cache once, before the while loop, and roll it back to the kept tokens "
                        f"after each loop ({name}_cache.truncate(...))")
        if loop + 1 < len(target_calls) and target_calls[loop + 1][0] != kept:
            return (f"after loop {loop + 1} the target's cache held {target_calls[loop + 1][0]} tokens, expected "
                    f"{kept} (the {n} before the loop + {len(emitted) - 1} accepted drafts): roll it back with "
                    "target_cache.truncate(n + n_accepted)")
        if loop + 1 < len(draft_calls) and draft_calls[loop + 1][0] > kept:
            return (f"after loop {loop + 1} the draft's cache held {draft_calls[loop + 1][0]} tokens, more than the "
                    f"{kept} kept: roll it back too, draft_cache.truncate(min(n + n_accepted, len(draft_cache)))")
        n = n_next
    return None


def count_problem(target_calls, loops, got, N, raised):
    """The counts first: loops run, target calls per loop, tokens returned. A message, or None."""
    if loops == 0 and not raised:
        return ("your loop never called step: Steps 3-4 are missing (the scaffold as given?). Call "
                "emitted = step(drafted, p, q, rng), append what it emits, roll both caches back, and "
                "delete the `break`")
    if target_calls not in (loops, loops + raised):  # a loop that raised may have scored already
        return (f"{target_calls} target calls for {loops} loops; score all K + 1 positions in one call per loop "
                "(score(target, target_cache, ...)), not one call per position")
    if raised:
        return None
    tokens = token_ids(got)
    if tokens is None:
        return f"your loop returned {got!r}; return the list of the N generated token ids"
    if len(tokens) < N:
        return (f"your loop returned {len(tokens)} tokens, N = {N} were asked: it stopped early. The while loop "
                "must run until N tokens are out (a `break` left in?)")
    if len(tokens) > N:
        return (f"{len(tokens)} tokens, expected N = {N}: the last loop may emit more than needed, cut the "
                "output to N")
    return None


def check_speculative_loop(fn, draft, target, ids, step=None, N=10, Ks=(1, 3), seeds=(0, 1)):
    """Grade a learner's my_speculative_sampling(draft, target, ids, N, K, rng, step) -> list of N ids:
    for each K and seed, the same tokens as speculative_sampling(..., seed=seed, step=step), one
    target call per loop, and both caches rolled back to the kept tokens. Counts (loops, target
    calls, tokens) are judged before the caches, so a loop cut short is not blamed on its roll-back.
    Prints why; returns a bool."""
    def verdict(ok, message):
        print(("✔ right: " if ok else "✘ not yet: ") + message)
        return ok

    if fn is None or not callable(fn):
        return verdict(False, "pass your function itself: check_speculative_loop(my_speculative_sampling, draft, target, ids).")
    step = speculative.speculative_step if step is None else speculative.checked_step(step, target.config.n_vocab)
    for K in Ks:
        for seed in seeds:
            expected = speculative.speculative_sampling(draft, target, ids, N, K=K, seed=seed, step=step)
            d, t, log = Recording(draft), Recording(target), []
            try:
                got, error = fn(d, t, list(ids), N, K, np.random.default_rng(seed), recording_step(step, log)), None
            except Exception as e:  # the learner's code: report it, don't crash the notebook
                got, error = None, e
            where = f"K = {K}, seed {seed}"
            problem = count_problem(len(t.calls), len(log), got, N, raised=error is not None)
            if problem:
                return verdict(False, f"{where}: {problem}.")
            problem = cache_problem(d, t, log + [[]], len(ids), K)  # the loop that raised counts too
            if problem:
                return verdict(False, f"{where}: {problem}.")
            if error is not None:
                return verdict(False, f"{where}: your loop raised {type(error).__name__}: {error}")
            got = list(token_ids(got))
            if got != expected.tokens:
                first = next(i for i, (a, b) in enumerate(zip(got, expected.tokens)) if a != b)
                return verdict(False, f"{where}: token {first} differs from speculative_sampling's. Same "
                                      "seed, same draws: draft K tokens (draft_tokens), score once (score), call step, "
                                      "append what it emits, roll back both caches, in that order.")
    return verdict(True, f"for K in {list(Ks)} and seeds {list(seeds)} your loop writes exactly what "
                         "speculative_sampling writes, with one target call per loop and both caches rolled back.")
