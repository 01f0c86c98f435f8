"""Notebook 07's exercise: write the multi-candidate step yourself, and its grader.

You write `accept_among(candidates, p, q, rng) -> token`, the step picogpt.tree.walk calls at
every node of a token tree (tree_sampling's `step=` runs yours):
    candidates  the node's children c_1 .. c_m, token ids (none at a leaf)
    p           [m, n_vocab]  row i: the distribution c_i was drawn from (the draft's p at the node
                without the candidates before it: picogpt/tree.py draws without replacement)
    q           [n_vocab]     the target's distribution at the node
    rng         a numpy Generator: every random draw comes from it
and it returns one token: the first candidate accepted, judged against what is still missing
(q_1 = q, after rejecting c_i: q_{i+1} = (q_i - p_i)+), or, when all are rejected (or there are
none), a sample from the last residual.

`check_multi_candidate_step(fn)` is the course's one grader (grading.check_sampler) given
`MULTI_CANDIDATE_EXERCISE`: small cases with fixed candidates (a leaf among them, and distributions
shaped by a temperature and top-p), the right rule (`MULTI_STEP`, whose law is
rejection.output_distribution_among) and the classic mistakes (`MISTAKES`) as `CandidateRule`
values; the parts of a token's law are which candidate was kept, and the token drawn when none was.
"""

import inspect
from dataclasses import dataclass

import numpy as np

from .. import rejection
from ..errors import shown
from ..sampling import distribution, sample
from .grading import TRIALS, Exercise, Part, Problem, check_number, check_sampler, most_likely

# ---------------------------------------------------------------------------------------------
# The step and the classic ways to get it wrong, each with its exact distribution
# ---------------------------------------------------------------------------------------------


def running_residual(p_i, q_i, x, q):
    """What the next candidate is judged against after rejecting x: (q_i - p_i)+."""
    return rejection.residual(p_i, q_i)


def without_token(p_i, q_i, x, q):
    """q_i with the rejected token taken out, renormalised (right only for a point-mass draft)."""
    q_next = np.array(q_i, np.float64)
    q_next[x] = 0.0
    return q_next / q_next.sum()


def not_updated(p_i, q_i, x, q):
    return q_i


@dataclass(frozen=True)
class CandidateRule:
    """One way to write the step: judge candidate i (of the first `tried`) with row `row(p, i)`
    against the running q_i, keeping it with keep(row, q_i, c_i); q_i becomes update(row, q_i,
    c_i, q) after a rejection; when all are rejected, draw from fallback(q, q_last, p). one_r: a
    single uniform r judges every candidate, instead of a fresh one per candidate."""
    name: str
    hint: str  # what to fix, said to the learner
    row: object = lambda p, i: p[i]
    keep: object = rejection.accept_probability
    update: object = running_residual
    fallback: object = lambda q, q_last, p: q_last
    tried: int = None  # None: every candidate
    one_r: bool = False

    def candidates_tried(self, candidates):
        return list(candidates)[: self.tried]

    def output_distribution(self, candidates, p, q):
        """The exact distribution [n_vocab] of the token this rule emits for these candidates."""
        q = np.asarray(q, np.float64)
        emitted, reached, q_i = np.zeros_like(q), 1.0, q  # reached: P(every candidate so far rejected)
        above = 0.0  # one r: every candidate so far is rejected exactly when r >= the largest keep probability so far
        for i, x in enumerate(self.candidates_tried(candidates)):
            a = self.keep(self.row(p, i), q_i, x)
            kept = max(0.0, a - above) if self.one_r else reached * a
            emitted[x] += kept
            reached, above = reached - kept, max(above, a)
            q_i = self.update(self.row(p, i), q_i, x, q)
        return emitted + reached * self.fallback(q, q_i, p)

    def step(self, candidates, p, q, rng):
        """This rule as a runnable step (random draws in the library's order). The right rule is
        the library's rejection.accept_among."""
        if self is MULTI_STEP:
            return rejection.accept_among(candidates, p, q, rng)
        q = np.asarray(q, np.float64)
        q_i, r = q, None
        for i, x in enumerate(self.candidates_tried(candidates)):
            r = rng.random() if r is None or not self.one_r else r
            if r < self.keep(self.row(p, i), q_i, x):
                return int(x)
            q_i = self.update(self.row(p, i), q_i, x, q)
        return sample(self.fallback(q, q_i, p), rng)


UPDATE = ("after rejecting c_i, the next candidate is judged against what is still missing, "
          "q_{i+1} = (q_i − p_i)+ = max(0, q_i − p_i) / Σ max(0, q_i − p_i): the mass min(p_i, q_i) was already "
          "offered to c_i")
MULTI_STEP = CandidateRule("the multi-candidate step", "")
MISTAKES = {rule.name: rule for rule in (
    CandidateRule("the residual not updated between candidates", f"every candidate was judged against q itself; {UPDATE}",
                  update=not_updated, fallback=lambda q, q_last, p: rejection.residual(p[-1], q) if len(p) else q),
    CandidateRule("the residual not updated between candidates (fallback from (q − p_1)+)",
                  f"every candidate was judged against q itself; {UPDATE}",
                  update=not_updated, fallback=lambda q, q_last, p: rejection.residual(p[0], q) if len(p) else q),
    CandidateRule("the residual not updated between candidates (fallback from q)", "every candidate was judged "
                  f"against q itself, and the fallback drawn from q; {UPDATE}, and the fallback comes from the last residual",
                  update=not_updated),
    CandidateRule("the residual formed from q each time", "after rejecting c_i you formed (q − p_i)+ from q itself; "
                  f"form it from the running residual instead, (q_i − p_i)+: {UPDATE}",
                  update=lambda p_i, q_i, x, q: rejection.residual(p_i, q)),
    CandidateRule("the fallback sampled from q", "when every candidate is rejected, sample from the last residual "
                  "q_{m+1}, not from q: the accepted mass min(p_i, q_i) of each round was already given out",
                  fallback=lambda q, q_last, p: q),
    CandidateRule("the fallback sampled from p", "when every candidate is rejected, sample from the last residual "
                  "q_{m+1}; p is the draft's distribution, and the text must come out as q",
                  fallback=lambda q, q_last, p: p[-1] if len(p) else q),
    CandidateRule("the token at a leaf taken as q's most likely", "at a leaf (no candidates) sample the token from q "
                  "with rng; taking its most likely token, argmax q, is greedy decoding, not sampling from q",
                  fallback=lambda q, q_last, p: q_last if len(p) else np.eye(len(q))[int(np.argmax(q))]),
    CandidateRule("stopping at the first rejection", "after rejecting c_1, try c_2 against (q − p_1)+, and so "
                  "on: the tree drafted the other candidates for this. Stopping is still exact (it is Algorithm 2 "
                  "on c_1 alone) but throws the siblings and their subtrees away", tried=1),
    CandidateRule("every candidate judged with p's first row", "row i of p is the distribution c_i was drawn from: "
                  "the draft's p without the candidates before it, renormalised (the tree draws without "
                  "replacement). Judge c_i, and form the residual, with p[i]", row=lambda p, i: p[0]),
    CandidateRule("the residual as q without the rejected candidate", "after rejecting c_i you drop c_i from q; "
                  f"that is right only for a point-mass draft. {UPDATE[0].upper() + UPDATE[1:]}", update=without_token),
    CandidateRule("argmax for the fallback", "when every candidate is rejected (and at a leaf), sample the token from "
                  "the last residual with rng; its most likely token, argmax, is greedy decoding, not a sample",
                  fallback=lambda q, q_last, p: most_likely(q_last)),
    # the test, as notebook 03's step gets it wrong
    CandidateRule("accepting with probability q(c)", "keep c_i with probability min(1, q_i(c_i) / p_i(c_i)), not "
                  "q_i(c_i): divide by p_i(c_i), the chance it was drawn", keep=lambda p_i, q_i, x: float(q_i[x])),
    CandidateRule("accepting with probability min(1, p/q)", "the ratio is upside down: keep c_i with "
                  "min(1, q_i(c_i) / p_i(c_i))", keep=lambda p_i, q_i, x: rejection.accept_probability(q_i, p_i, x)),
    CandidateRule("a deterministic test, keep c if q(c) ≥ p(c)", "the test is random: keep c_i when a uniform "
                  "r < min(1, q_i(c_i) / p_i(c_i)). A candidate the target likes less than the draft did (q_i < p_i) is "
                  "still kept with probability q_i/p_i", keep=lambda p_i, q_i, x: float(q_i[x] >= p_i[x])),
    CandidateRule("the comparison inverted, r > min(1, q/p)", "keep c_i when r < min(1, q_i(c_i) / p_i(c_i)), not "
                  "r > min(1, q_i/p_i): inverted, the test rejects the candidates the target likes and keeps the ones "
                  "it does not", keep=lambda p_i, q_i, x: 1.0 - rejection.accept_probability(p_i, q_i, x)),
    CandidateRule("one r for the whole step", "draw a fresh r = rng.random() for every candidate you judge; with one "
                  "r for the step the verdicts are tied together: a candidate tried after a rejection was rejected "
                  "by a large r, so it is kept too rarely", one_r=True),
)}


# ---------------------------------------------------------------------------------------------
# The cases and the grader
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CandidateCase:
    """Fixed candidates, the rows they were drawn from (without replacement), and q; `label` says
    how the distributions were made when that matters to a learner."""
    candidates: tuple
    p: np.ndarray  # [m, V]
    q: np.ndarray  # [V]
    label: str = ""


def case(p, q, candidates, label=""):
    """A case with candidates drawn without replacement from p: row i is p without the ones before."""
    p, rows, left = np.asarray(p, np.float64), [], np.array(p, np.float64)
    for x in candidates:
        rows.append(left / left.sum())
        left[x] = 0.0
    return CandidateCase(tuple(candidates), np.array(rows).reshape(len(candidates), len(p)), np.asarray(q, np.float64),
                         label)


def grading_cases():
    """Cases where each classic mistake moves the output distribution (tests/test_tree_exercise.py
    checks it): two and three candidates the target under-rates, one it likes, a second candidate
    kept neither never nor always once the first is rejected (where one r for the whole step
    shows), distributions as the loop makes them at temperature 0.7 with top-p 0.9 (zeros in
    both), and a leaf (no candidates)."""
    p, q = [0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4]
    shaped = dict(temperature=0.7, top_p=0.9)
    return (case(p, q, [0, 1]), case(p, q, [0, 1, 2]), case([0.1, 0.6, 0.3, 0.0], [0.3, 0.2, 0.1, 0.4], [1, 2]),
            case([0.6, 0.3, 0.1], [0.2, 0.35, 0.45], [0, 1]),
            case(distribution(np.array([1.5, 1.2, -0.5, 0.4, -1.0]), **shaped),
                 distribution(np.array([0.3, 1.6, -2.0, 1.4, 0.2]), **shaped), [0, 3],
                 label="temperature 0.7 with top-p 0.9"),
            case(p, q, []))


NAN = ("A NaN comes from normalising a residual whose sum is 0. The multi-candidate step never forms one: "
       "(q_i − p_i)+ sums to 0 only where q_i = p_i, and there c_i is always kept. Normalise each residual as you form "
       "it, q_{i+1} = max(0, q_i − p_i) / Σ max(0, q_i − p_i): left unnormalised it shrinks with every rejection until "
       "nothing is left (and the next candidate is judged against too little); and keep c_i when "
       "r < min(1, q_i(c_i) / p_i(c_i)), not the other way round.")


def explain(error, refused, inputs, c):
    """What an exception the learner's step raised means, from the case and from what rng.choice was
    handed (grading.Refusal): (what, "")."""
    if not c.candidates and isinstance(error, IndexError):
        return "At a leaf there are no candidates: p has no rows, and the token comes from q.", ""
    if refused and refused.kind == "nan":
        return NAN, ""
    if refused and refused.kind == "sum":
        return ("A classic mistake, the residual not normalised: divide max(0, q_i − p_i) by its sum, each time you "
                "form it; rng.choice needs a distribution."), ""
    return "", ""


def fixed(c, trials, rng):
    """The inputs of every trial of case c: its candidates, fixed, with their rows and q."""
    return [(list(c.candidates), c.p, c.q)] * trials


def outcome(token, inputs, c):
    """((), token), or the Problem of an output that is not one token id of the vocabulary."""
    if isinstance(token, (bool, np.bool_)) or not isinstance(token, (int, np.integer)) or not 0 <= token < len(c.q):
        return None, Problem(f"it returned {shown(repr(token), 80)}; return one token id, an int from 0 to "
                             f"{len(c.q) - 1}: an accepted candidate, or a sample from the last residual.")
    return ((), int(token)), None


def law(rule, c):
    """The rule's exact distribution of the emitted token in case c, as {((), token): probability}."""
    return {((), token): float(prob) for token, prob in enumerate(rule.output_distribution(c.candidates, c.p, c.q))}


def parts(c, number):
    """The two factors of the emitted token's law in case c, each with where it is: which candidate
    was kept, or none; and the token drawn when none was."""
    where = (f" (case {number}, candidates {list(c.candidates)}{', ' + c.label if c.label else ''}; "
             f"p = {np.round(c.p, 3).tolist()}, q = {np.round(c.q, 3).tolist()})")
    if not c.candidates:
        return [(Part("the token at a leaf, where there are no candidates", lambda key: key, tuple(range(len(c.q))),
                      "tokens", lambda y: f"token {y}"), where)]
    kept = {x: f"c_{i + 1} kept" for i, x in enumerate(c.candidates)}
    others = tuple(y for y in range(len(c.q)) if y not in kept)
    return [(Part("which candidate was kept", lambda key: ((), kept.get(key[1], "none kept")), (*kept.values(), "none kept"),
                  "outcomes", str), where),
            (Part("the token drawn after every candidate was rejected", lambda key: key if key[1] not in kept else None,
                  others, "tokens", lambda y: f"token {y}"), where)]


MULTI_CANDIDATE_EXERCISE = Exercise(
    "the multi-candidate step", MULTI_STEP, MISTAKES, grading_cases(), call="check_multi_candidate_step(my_accept_among)",
    run_in="tree_sampling(..., step={name})", inputs=fixed, outcome=outcome, law=law, parts=parts, explain=explain,
    walk_through="For each candidate in turn: r ~ U[0, 1); keep it if r < min(1, q_i(c_i) / p_i(c_i)); else "
                 "q_{i+1} = (q_i − p_i)+. None kept: sample from the last q_i.",
    judged_on="which candidate was kept, the token drawn when none was", noun="candidates",
    cases_text="0 to 3 candidates, one at temperature 0.7 with top-p 0.9")


def check_multi_candidate_step(fn, trials=TRIALS, seed=0):
    """Grade a learner's accept_among(candidates, p, q, rng) -> token by its output distribution
    (grading.check_sampler); returns a Check. Each classic mistake moves some case's output by a
    total-variation distance of 0.05 or more, far beyond the noise of 2,000 trials."""
    return check_sampler(fn, MULTI_CANDIDATE_EXERCISE, trials, seed)


def solution():
    """The library's own multi-candidate step: print it when you are stuck."""
    print(inspect.getsource(rejection.accept_among))


# ---------------------------------------------------------------------------------------------
# A question to answer by hand first
# ---------------------------------------------------------------------------------------------

def check_second_candidate(answer, p=(0.5, 0.3, 0.2), q=(0.1, 0.5, 0.4), candidates=(0, 1)):
    """Two candidates drawn without replacement from p, c_1 = token 0 then c_2 = token 1, and the
    target's q. What is the probability that the multi-candidate step emits token 1 (c_2)?"""
    c = case(p, q, list(candidates))
    first, second = candidates
    expected = float(rejection.output_distribution_among(c.candidates, c.p, c.q)[second])
    a_1 = rejection.accept_probability(c.p[0], c.q, first)
    q_2 = rejection.residual(c.p[0], c.q)
    a_2 = rejection.accept_probability(c.p[1], q_2, second)
    how = ("c_1 first: kept with min(1, q(c_1)/p(c_1)). Only if it is rejected is c_2 tried, against the "
           "residual q_2 = (q − p)+, with its own row p_2 = p without c_1, renormalised.")
    solution = (f"P(reject c_1) = 1 − min(1, {q[first]}/{p[first]}) = {1 - a_1:g}; q_2 = (q − p)+ = "
                f"{np.round(q_2, 3).tolist()}, p_2 = {np.round(c.p[1], 3).tolist()}, so c_2 is kept with "
                f"min(1, {q_2[second]:.3g}/{c.p[1][second]:.3g}) = {a_2:.4g}. Together {1 - a_1:g} × {a_2:.4g} = {expected:.4f}.")
    mistakes = [(a_2, "that is the chance c_2 is kept once it is tried; it is tried only after c_1 is rejected"),
                ((1 - a_1) * min(1, q[second] / p[second]), "c_2 is judged against what is still missing, "
                 "q_2 = (q − p)+, and with its own row p_2 (p without c_1), not against q and p"),
                (q[second], "that is q(1); for these two candidates the step emits token 1 with another "
                 "probability (q comes out only averaged over the candidates' drawing)")]
    return check_number(answer, expected, how, solution, mistakes)
