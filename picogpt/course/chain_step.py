"""The chain step's exercise, shared by notebooks 03 and 08: a learner's
`step(drafted, p, q, rng) -> list[int]` (the contract of speculative_sampling's `step=`), graded
by grading.check_sampler against a rule's exact law over (drafts, output).

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

from ..errors import shown
from ..sampling import distribution
from ..speculative import token_ids
from .grading import Exercise, Part, Problem

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

    return Exercise(name, rule, mistakes, cases, call=call, run_in="speculative_sampling(..., step={name})",
                    inputs=drafts_for, outcome=outcome, law=exact_joint, parts=parts, explain=explain,
                    walk_through=walk_through, judged_on="how many drafts were kept, the token that follows them, "
                    "the extra token", noun="drafts", cases_text=cases_text(cases))
