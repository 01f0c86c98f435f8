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
and names the one the output fits. `VARIANTS[i].step` runs a mistake, for notebook 04's demo.
"""

import inspect
from dataclasses import dataclass
from itertools import product

import numpy as np

from .. import rejection, speculative
from ..sampling import sample
from .chi_square import chi_square_sf, chi_square_test

# ---------------------------------------------------------------------------------------------
# Algorithm 2's Steps 3-4, and the classic ways to get them wrong, as rules
# ---------------------------------------------------------------------------------------------


def always(p, q, x):
    return 1.0


@dataclass(frozen=True)
class StepVariant:
    """One way to write Steps 3-4: accept x̃_t with probability accept(p_t, q_t, x̃_t); after a
    rejection draw from resample_from(p_t, q_t); when all K pass, the extra token from
    q[bonus_row(K)] (bonus_row None: no extra token)."""
    name: str
    hint: str  # what to fix, said to the learner
    accept: object = rejection.accept_probability
    resample_from: object = rejection.residual
    bonus_row: object = lambda K: K  # noqa: E731

    def step(self, drafted, p, q, rng):
        """This variant as a runnable step(drafted, p, q, rng) -> list[int] (random draws in the
        library's order). Algorithm 2 itself is the library's `speculative_step`."""
        if self is ALGORITHM_2:
            return speculative.speculative_step(drafted, p, q, rng)
        emitted = []
        for t, x in enumerate(drafted):
            if rng.random() < self.accept(p[t], q[t], x):
                emitted.append(int(x))
            else:
                return emitted + [sample(self.resample_from(p[t], q[t]), rng)]
        row = self.bonus_row(len(drafted))
        return emitted + ([] if row is None else [sample(q[row], rng)])

    def output_distribution(self, drafted, p, q):
        """The exact probability of every output list for these drafts: {tuple: probability}."""
        out, kept = {}, 1.0  # kept: P(the first t drafts all accepted)
        for t, x in enumerate(drafted):
            a = self.accept(p[t], q[t], x)
            if kept * (1 - a) > 0:
                for y, prob in enumerate(self.resample_from(p[t], q[t])):
                    key = tuple(drafted[:t]) + (y,)
                    out[key] = out.get(key, 0.0) + kept * (1 - a) * prob
            kept *= a
        row = self.bonus_row(len(drafted))
        if row is None:
            out[tuple(drafted)] = out.get(tuple(drafted), 0.0) + kept
        else:
            for y, prob in enumerate(q[row]):
                key = tuple(drafted) + (y,)
                out[key] = out.get(key, 0.0) + kept * prob
        return out


ALGORITHM_2 = StepVariant("Algorithm 2", "")
VARIANTS = (
    ALGORITHM_2,
    StepVariant("resampling from q", "after a rejection you sample from q; sample from the residual "
                "(q − p)+ = max(0, q − p) / Σ max(0, q − p): the mass min(p, q) was already given out by acceptance",
                resample_from=lambda p, q: np.asarray(q, np.float64)),
    StepVariant("resampling from p", "after a rejection you sample from p, the draft; sample from (q − p)+, "
                "the tokens the target wants more than the draft offered", resample_from=lambda p, q: np.asarray(p, np.float64)),
    StepVariant("the residual reversed, (p − q)+", "your residual is max(0, p − q) renormalised; it must be "
                "max(0, q − p): what the target wants more than the draft", resample_from=lambda p, q: rejection.residual(q, p)),
    StepVariant("no bonus token", "when all K drafts are accepted, the loop emits one more token, from q[K] "
                "(the target's distribution after the last draft): K + 1 tokens. (Without it the text is still "
                "distributed as q — the next loop drafts that position again — but every clean sweep throws away "
                "a distribution the target already computed.)", bonus_row=lambda K: None),
    StepVariant("the bonus token from the wrong row", "when all K drafts pass, the extra token comes from q[K], "
                "the last row of q (q_{K+1} in the paper), not q[K − 1]", bonus_row=lambda K: K - 1),
    StepVariant("accepting with probability q(x̃)", "accept x̃_t with probability min(1, q(x̃_t) / p(x̃_t)), "
                "not q(x̃_t): divide by p(x̃_t), the chance it was drafted", accept=lambda p, q, x: float(q[x])),
    StepVariant("accepting with probability min(1, p/q)", "the ratio is upside down: accept with "
                "min(1, q(x̃_t) / p(x̃_t))", accept=lambda p, q, x: rejection.accept_probability(q, p, x)),
    StepVariant("accepting every draft", "a draft must pass the test r < min(1, q(x̃_t) / p(x̃_t)); "
                "keeping all of them samples from p, not q", accept=always),
)
MISTAKES = {variant.name: variant for variant in VARIANTS[1:]}

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


def grading_cases():
    """Small cases where every classic mistake changes the output distribution: K = 1, 2, 3, a
    token with p(x) = 0 (never drafted) and one with q(x) = 0 (a draft the target refuses),
    and a row with p = q (never rejected)."""
    def rows(*r):
        return np.array(r, np.float64)
    return (
        StepCase(p=rows([0.6, 0.3, 0.1]), q=rows([0.2, 0.5, 0.3], [0.1, 0.2, 0.7])),
        StepCase(p=rows([0.5, 0.4, 0.1], [0.2, 0.2, 0.6]), q=rows([0.3, 0.3, 0.4], [0.5, 0.3, 0.2], [0.7, 0.2, 0.1])),
        StepCase(p=rows([0.5, 0.5, 0.0], [0.3, 0.3, 0.4], [0.6, 0.2, 0.2]),
                 q=rows([0.2, 0.3, 0.5], [0.3, 0.3, 0.4], [0.0, 0.5, 0.5], [0.4, 0.4, 0.2])),
    )


def all_drafts(case):
    """Every possible draft sequence and its probability under p: [(drafted tuple, probability)]."""
    V = case.p.shape[1]
    return [(d, float(np.prod([case.p[t, x] for t, x in enumerate(d)]))) for d in product(range(V), repeat=case.K)]


def exact_joint(variant, case):
    """{(drafted, output): probability} when drafts come from p and the step is `variant`."""
    joint = {}
    for drafted, prob in all_drafts(case):
        if prob > 0:
            for output, q_out in variant.output_distribution(list(drafted), case.p, case.q).items():
                joint[(drafted, output)] = prob * q_out
    return joint


def fit(counts, variant, cases):
    """Chi-square of the observed counts against `variant`, one test per case, the statistics and
    degrees of freedom added up into one test: (statistic, dof, p-value)."""
    statistic, dof = 0.0, 0
    for case, case_counts in zip(cases, counts):
        joint = exact_joint(variant, case)
        keys = sorted(set(joint) | set(case_counts))
        s, d, _ = chi_square_test([case_counts.get(k, 0) for k in keys], [joint.get(k, 0.0) for k in keys])
        statistic, dof = statistic + s, dof + d
    return statistic, dof, chi_square_sf(statistic, dof) if np.isfinite(statistic) else 0.0


def shape_problem(output, drafted):
    """Why `output` cannot be what a loop emits for these drafts, or None."""
    K = len(drafted)
    if not isinstance(output, (list, tuple)) or not all(isinstance(x, (int, np.integer)) for x in output):
        return (f"it returned {output!r}; return a list of token ids (Python ints), e.g. "
                "emitted.append(int(token)).")
    if not 1 <= len(output) <= K + 1:
        return (f"it returned {len(output)} tokens for K = {K} drafts; a loop emits between 1 and K + 1 "
                "(the accepted drafts, then one more).")
    if list(output[:-1]) != list(drafted[: len(output) - 1]):
        return (f"for drafts {list(drafted)} it returned {list(output)}: the tokens before the last must be the "
                "first drafts, in order. Judging drafts after the first rejection: the loop stops there, since "
                "the later drafts were conditioned on a token that is now gone.")
    return None


def p_text(p_value):
    return f"{p_value:.2g}" if p_value >= 1e-16 else "< 1e-16"


def call(fn, drafted, case, rng):
    return fn(list(drafted), case.p.copy(), case.q.copy(), rng)


def check_speculative_step(fn, trials=TRIALS, seed=0):
    """Grade a learner's speculative_step(drafted, p, q, rng) -> list[int]. Prints why; returns a bool.

    First the shape of each output (a prefix of the drafts, then one token), and that the same
    Generator seed gives the same output; then the distribution: `trials` calls per case, the
    drafts sampled from p, one chi-square test of the (drafts, output) histogram against Algorithm 2's
    exact probabilities. A correct step is refused with probability at most SIGNIFICANCE = 1e-4;
    each classic mistake moves the distribution of some case by a total-variation distance of
    0.08 or more (tests/test_step_exercise.py checks it), far beyond the noise of 4,000 trials:
    every one of them is refused at p < 1e-12 there."""
    def verdict(ok, message):
        print(("✔ right: " if ok else "✘ not yet: ") + message)
        return ok

    if fn is None or fn is Ellipsis or not callable(fn):
        return verdict(False, "write your step function, then pass the function itself: check_speculative_step(my_speculative_step).")
    cases = grading_cases()
    draft_rng = np.random.default_rng(seed)
    counts = []
    for i, case in enumerate(cases):
        case_counts = {}
        step_rng = np.random.default_rng([seed, i])
        for trial in range(trials):
            drafted = tuple(int(sample(row, draft_rng)) for row in case.p)
            try:
                output = call(fn, drafted, case, step_rng)
            except Exception as e:  # the learner's code: report it, don't crash the notebook
                return verdict(False, f"with drafts {list(drafted)}, p = {case.p.tolist()}, q = {case.q.tolist()}, "
                                      f"your step raised {type(e).__name__}: {e}")
            problem = shape_problem(output, drafted)
            if problem:
                return verdict(False, problem)
            if trial < SEED_CHECKS:  # several: a step with its own unseeded rng may agree once by chance
                first, again = (call(fn, drafted, case, np.random.default_rng([12345, trial])) for _ in range(2))
                if list(first) != list(again):
                    return verdict(False, "two calls with Generators of the same seed gave different outputs: "
                                          "draw every random number from the rng argument (rng.random(), rng.choice).")
            key = (drafted, tuple(int(x) for x in output))
            case_counts[key] = case_counts.get(key, 0) + 1
        counts.append(case_counts)
    statistic, dof, p_value = fit(counts, ALGORITHM_2, cases)
    if p_value > SIGNIFICANCE:
        return verdict(True, f"over {len(cases)} cases (K = 1, 2, 3), {len(cases) * trials:,} calls, your step's outputs "
                             f"fit Algorithm 2's exact distribution (chi² = {statistic:.0f} on {dof} dof, p = {p_value:.2g}). "
                             "It is the function speculative_sampling runs: try speculative_sampling(..., step=speculative_step).")
    fits = sorted(((fit(counts, v, cases)[2], v) for v in MISTAKES.values()), key=lambda pv: -pv[0])
    best_p, best = fits[0]
    if best_p > SIGNIFICANCE:
        return verdict(False, f"your outputs match a classic mistake, {best.name} (chi² test p = {best_p:.2g}, "
                              f"against Algorithm 2 p = {p_text(p_value)}): {best.hint}.")
    return verdict(False, f"your outputs are not distributed as Algorithm 2's (chi² = {statistic:.0f} on {dof} dof, "
                          f"p = {p_text(p_value)}), nor like any classic mistake I know. Walk through Steps 3-4: "
                          "r ~ U[0, 1) per draft, accept if r < min(1, q/p), else one token from (q − p)+ and stop; "
                          "all accepted: one more from q[K].")


def solution():
    """The library's own Steps 3-4: print it when you are stuck (it is what speculative_sampling runs)."""
    print(inspect.getsource(speculative.speculative_step))


# ---------------------------------------------------------------------------------------------
# Exercise 2: the loop around the step, with both KV caches and their roll-back
# ---------------------------------------------------------------------------------------------


class Recording:
    """Wraps a model: records, for every call, how many tokens its cache held and how many ids came in."""

    def __init__(self, model):
        self.model, self.config, self.name, self.calls = model, model.config, model.name, []

    def new_cache(self):
        return self.model.new_cache()

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
        if loop + 1 < len(target_calls) and target_calls[loop + 1][0] != kept:
            return (f"after loop {loop + 1} the target's cache held {target_calls[loop + 1][0]} tokens, expected "
                    f"{kept} (the {n} before the loop + {len(emitted) - 1} accepted drafts): roll it back with "
                    "target_cache.truncate(n + n_accepted)")
        if loop + 1 < len(draft_calls) and draft_calls[loop + 1][0] > kept:
            return (f"after loop {loop + 1} the draft's cache held {draft_calls[loop + 1][0]} tokens, more than the "
                    f"{kept} kept: roll it back too, draft_cache.truncate(min(n + n_accepted, len(draft_cache)))")
        n = n_next
    return None


def check_speculative_loop(fn, draft, target, ids, step=None, N=10, Ks=(1, 3), seeds=(0, 1)):
    """Grade a learner's my_speculative_sampling(draft, target, ids, N, K, rng, step) -> list of N ids:
    for each K and seed, the same tokens as speculative_sampling(..., seed=seed, step=step), one
    target call per loop, and both caches rolled back to the kept tokens. Prints why; returns a bool."""
    def verdict(ok, message):
        print(("✔ right: " if ok else "✘ not yet: ") + message)
        return ok

    if fn is None or not callable(fn):
        return verdict(False, "pass your function itself: check_speculative_loop(my_speculative_sampling, draft, target, ids).")
    step = speculative.speculative_step if step is None else step
    for K in Ks:
        for seed in seeds:
            expected = speculative.speculative_sampling(draft, target, ids, N, K=K, seed=seed, step=step)
            d, t, log = Recording(draft), Recording(target), []
            try:
                got, error = fn(d, t, list(ids), N, K, np.random.default_rng(seed), recording_step(step, log)), None
            except Exception as e:  # the learner's code: report it, don't crash the notebook
                got, error = None, e
            problem = cache_problem(d, t, log + [[]], len(ids), K)  # the loop that raised counts too
            if problem:
                return verdict(False, f"K = {K}, seed {seed}: {problem}.")
            if error is not None:
                return verdict(False, f"K = {K}, seed {seed}: your loop raised {type(error).__name__}: {error}")
            got = [int(x) for x in got]
            if len(t.calls) != len(log):
                return verdict(False, f"K = {K}, seed {seed}: {len(t.calls)} target calls for {len(log)} loops; "
                                      "score all K + 1 positions in one call per loop.")
            if len(got) != N:
                return verdict(False, f"K = {K}, seed {seed}: {len(got)} tokens, expected N = {N}: the last loop may "
                                      "emit more than needed, cut the output to N.")
            if got != expected.tokens:
                where = next(i for i, (a, b) in enumerate(zip(got, expected.tokens)) if a != b)
                return verdict(False, f"K = {K}, seed {seed}: token {where} differs from speculative_sampling's. Same "
                                      "seed, same draws: draft K tokens (draft_tokens), score once (score), call step, "
                                      "append what it emits, roll back both caches, in that order.")
    return verdict(True, f"for K in {list(Ks)} and seeds {list(seeds)} your loop writes exactly what "
                         "speculative_sampling writes, with one target call per loop and both caches rolled back.")
