"""The chain step as rules, shared by notebooks 03, 04, 06 and 08: Algorithm 2's Steps 3-4 and
their classic mistakes as values (`StepVariant`: the test, what a rejection resamples from, where
the extra token comes from, each with its exact law and a runnable step), and the exercise of a
learner's `step(drafted, p, q, rng) -> list[int]` (the contract of speculative_sampling's `verify=`),
graded by grading.check_sampler against a rule's exact law over (drafts, output).

    drafted  the K drafted ids x̃_1 .. x̃_K (K may be 0: a draft that proposes nothing)
    p        [K, n_vocab]      the draft's distributions they were sampled from
    q        [K + 1, n_vocab]  the target's, one more row: q[K] is q_{K+1}
    rng      a numpy Generator: every random draw comes from it

A case is rows of p and q; the drafts are sampled from p. The law of an output is a product of
factors (`parts`): how many drafts were kept given the drafts, the token after the kept ones, the
extra token after all K. What an output must be whatever the rule (`outcome`: a list of token ids,
1 to K + 1 of them, in the vocabulary, the drafts kept then one token) is judged before its law,
its length before its ids; an exception is explained from the case and from what rng.choice was
handed (grading.Refusal), never from an exception's text.
"""

from dataclasses import dataclass
from itertools import product

import numpy as np

from .. import rejection, speculative
from ..errors import shown
from ..sampling import distribution, sample, softmax64
from ..speculative import token_ids
from .grading import Exercise, Part, Problem, most_likely

NO_DRAFTS = "no drafts at all, K = 0, as notebook 06's prompt lookup proposes where the text has no match"
NORMALISE = ("divide max(0, q − p) by its sum before sampling from it: (q − p)+ is a distribution, "
             "and the mass it lacks must not fall on one token")
EXTRA_ROW = ("the extra token comes from q[K], the last row of q (the paper's q_{K+1}): the target's distribution "
             "after the last draft, which only the scoring call computed")
WRONG_ROW = f"when all K drafts pass, {EXTRA_ROW}, not q[K − 1] (that row already judged the last draft)"
NO_BONUS = ("when all K drafts are accepted, the loop emits one more token, from q[K] (the target's distribution "
            "after the last draft): K + 1 tokens, not the K drafts alone. Without it the text is still distributed "
            "as q (the next loop drafts that position again), but every clean sweep throws away a distribution "
            "the target already computed")


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


def exact_joint(rule, case):
    """{(drafted, output): probability} when the drafts come from p and the step is `rule`
    (rule.output_distribution(drafted, p, q) -> {output: probability})."""
    joint = {}
    for drafted in product(range(case.n_vocab), repeat=case.K):
        prob = float(np.prod([case.p[t, x] for t, x in enumerate(drafted)]))
        if prob > 0:
            for output, q_out in rule.output_distribution(list(drafted), case.p, case.q).items():
                joint[(drafted, output)] = prob * q_out
    return joint


def drafts_for(case, trials, rng):
    """`trials` inputs (drafted, p, q), the drafts sampled from p's rows."""
    columns = [rng.choice(case.n_vocab, size=trials, p=row) for row in case.p]
    drafts = np.stack(columns, axis=1) if columns else np.zeros((trials, 0), np.int64)
    return [([int(x) for x in row], case.p, case.q) for row in drafts]


def rows_text(name, rows_):
    return f"{name} = {np.round(rows_, 3).tolist()}"


def drafts_text(drafted):
    return f"the drafts {list(drafted)}"


def cases_text(cases):
    Ks = ", ".join(str(K) for K in sorted({case.K for case in cases}))
    labels = [case.label for case in cases if case.label and case.label != NO_DRAFTS]
    return f"K = {Ks}" + (f"; rows at {' and at '.join(labels)}" if labels else "")


def chain_exercise(name, rule, mistakes, cases, *, call, walk_through, after_a_non_draft, nan_hint, nan_guess="",
                   next_token="the token resampled after rejecting x̃_{t}"):
    """A chain step's exercise for grading.check_sampler. after_a_non_draft: what to say of an output
    that goes on after its first token that is not a draft, {"extra": .., "judged on": ..}
    (templates of {drafts} and {output}); next_token: the part after a draft not kept ({t}: that
    draft, from 1; {i}: how many were kept)."""

    def outcome(output, inputs, case):
        """The outcome (drafts, tokens), or the Problem that no law explains: the length before the ids."""
        drafted, K, tokens = inputs[0], case.K, token_ids(output)
        if tokens is None:
            return None, Problem(f"it returned {shown(repr(output), 120)}; return a list of token ids (Python ints), "
                                 "e.g. emitted.append(int(token)).")
        if not tokens:
            return None, Problem("it returned no token; a loop always emits at least one: after a rejection of the "
                                 "very first draft, the token resampled from (q − p)+; with no drafts at all (K = 0), "
                                 "one token from q[0].")
        if len(tokens) > K + 1:
            return None, Problem(f"it returned {len(tokens)} tokens for K = {K} drafts; a loop emits between 1 and "
                                 "K + 1 (the accepted drafts, then one more).")
        outside = [x for x in tokens if not 0 <= x < case.n_vocab]
        if outside:
            return None, Problem(f"it returned token id {outside[0]}, outside the vocabulary (ids 0..{case.n_vocab - 1})."
                                 " From a hand-written inverse CDF this means the probabilities you searched add up to "
                                 f"less than 1: a classic mistake, the residual not normalised ({NORMALISE}).")
        if list(tokens[:-1]) != list(drafted[: len(tokens) - 1]):
            j = next(i for i, (a, b) in enumerate(zip(tokens, drafted)) if a != b)  # the first token not a draft
            kind = "extra" if len(tokens) == j + 2 else "judged on"
            said = after_a_non_draft[kind].format(drafts=list(drafted), output=list(tokens))
            return None, Problem(said, rank=2 if kind == "judged on" else 1)  # judging on shows with K >= 2
        return (tuple(drafted), tokens), None

    def parts(case, number):
        """How many drafts were kept, given the drafts; the token after the kept ones when draft t was
        not kept, given the drafts up to it; the extra token when all K were kept."""
        K, tokens = case.K, tuple(range(case.n_vocab))
        where = f" (case {number}, K = {K}{', ' + case.label if case.label else ''}"
        found = []
        if K:
            found.append((Part("how many drafts were kept", lambda key: (key[0], len(key[1]) - 1), tuple(range(K + 1)),
                               "drafts kept", lambda n: f"{n} kept", drafts_text),
                          f"{where}; {rows_text('p', case.p)}, {rows_text('q', case.q)})"))
        for t in range(K):
            found.append((Part(next_token.format(t=t + 1, i=t),
                               lambda key, t=t: (key[0][: t + 1], key[1][-1]) if len(key[1]) == t + 1 else None,
                               tokens, "tokens", lambda y: f"token {y}", drafts_text),
                          f"{where}; {rows_text(f'p[{t}]', case.p[t])}, {rows_text(f'q[{t}]', case.q[t])})"))
        found.append((Part("the extra token after all K drafts were kept" if K else
                           "the one token a loop with no drafts emits",
                           lambda key: (key[0], key[1][-1]) if len(key[1]) == K + 1 else None, tokens, "tokens",
                           lambda y: f"token {y}", drafts_text if K else None),
                      f"{where}; {rows_text(f'q[{K}]', case.q[K])})"))
        return found

    def explain(error, refused, inputs, case):
        """What an exception means, from the case and from what rng.choice was handed: (what, the mistake
        that likely made it or "")."""
        V = case.n_vocab
        if case.K == 0:
            return ("With no drafts (K = 0: notebook 06's prompt lookup proposes none where the text has no match, "
                    "and speculative_sampling still calls the step) p has no rows and q has one, q[0]: the loop emits "
                    "one token from q[0]. Read the vocabulary's size from q (q.shape[1]), not from p[0]."), ""
        if refused and refused.kind == "size":
            return ("rng.choice(n, p=row) draws from 0 .. n − 1, one id per entry of row: n is the vocabulary's size, "
                    f"q.shape[1] = {V} here; len(q) is q's number of rows, K + 1."), ""
        if refused and refused.length != V:  # not a token's distribution: the law of how many drafts are kept, say
            return (f"The probabilities you handed rng.choice ({refused.length} of them, not one per token of the "
                    f"{V}) are not a distribution ({refused.kind}): probabilities computed in floating point can "
                    "leave [0, 1] by a rounding (a keep probability of 1 + 2e-16 makes 1 − h = −2e-16). Clip them "
                    "to [0, 1] with np.clip before sampling; the residual is not where it failed."), ""
        if refused and refused.kind == "nan":
            return nan_hint, nan_guess
        if refused and refused.kind == "sum":
            return f"That is a classic mistake, the residual not normalised: {NORMALISE}.", ""
        if refused and refused.kind == "negative":
            return ("q − p is negative where the draft over-rates a token: the residual is max(0, q − p), then "
                    "divided by its sum."), ""
        if isinstance(error, IndexError):
            return ("drafted and p have K rows (0 .. K − 1), q has K + 1 (0 .. K). The paper counts from 1: its x̃_t, "
                    "p_t and q_t are drafted[t − 1], p[t − 1] and q[t − 1] here, and its extra row q_{K+1} is q[K]."), ""
        return f"It ran on p = {case.p.tolist()}, q = {case.q.tolist()}.", ""

    return Exercise(name, rule, mistakes, cases, call=call,
                    run_in="Run it inside the real loop: speculative_sampling(..., verify={name}).",
                    inputs=drafts_for, outcome=outcome, law=exact_joint, parts=parts, explain=explain,
                    walk_through=walk_through, judged_on="how many drafts were kept, the token that follows them, "
                    "the extra token", noun="drafts", cases_text=cases_text(cases))


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
