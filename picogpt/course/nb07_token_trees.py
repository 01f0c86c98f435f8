"""Notebook 07 (token trees): what only it uses. Its exercise, the multi-candidate step, with the
right rule and the classic mistakes as values, graded by the course's one grader
(grading.check_sampler) and a question to answer by hand first; its panels (pure functions: what a
walk did to each node, the candidates explorer's exact output under each rule, what a measurement
of trees resolves, the bench's committed tree row); its figures; and the candidates explorer.

You write `accept_among(candidates, p, q, rng) -> token`, the step picogpt.tree.walk calls at
every node of a token tree (tree_sampling's `verify=` runs yours):
    candidates  the node's children c_1 .. c_m, token ids (none at a leaf)
    p           [m, n_vocab]  row i: the distribution c_i was drawn from (the draft's p at the node
                without the candidates before it: picogpt/tree.py draws without replacement)
    q           [n_vocab]     the target's distribution at the node
    rng         a numpy Generator: every random draw comes from it
and it returns one token: the first candidate accepted, judged against what is still missing
(q_1 = q, after rejecting c_i: q_{i+1} = (q_i - p_i)+), or, when all are rejected (or there are
none), a sample from the last residual. The figures need matplotlib (the `dev` extra).
"""

import inspect
from dataclasses import dataclass
from itertools import permutations, product

import numpy as np
from matplotlib.figure import Figure

from .. import rejection, theory
from ..errors import PicoGPTError, shown
from ..rejection import RESIDUAL_MASS_EPS, residual
from ..sampling import distribution, sample
from ..tree import ROOT
from .figures import COLOURS, figure_png, finish_tree_axes, new_ax, room_for_legend, tree_layout
from .grading import TRIALS, Exercise, Part, Problem, check_number, check_sampler, most_likely
from .panels import ROUNDING_TV, VISIBLE_TV
from .widgets import png_output, toy_controls

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
    run_in="Run it inside the tree loop: tree_sampling(..., verify={name}).",
    inputs=fixed, outcome=outcome, law=law, parts=parts, explain=explain,
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


# ---------------------------------------------------------------------------------------------
# The panels: what a walk did to each node of a tree
# ---------------------------------------------------------------------------------------------

ACCEPTED, REJECTED, NOT_REACHED = "accepted", "rejected", "never reached"


def node_status(tree, branch):
    """What the walk did to each node: accepted (on the branch), rejected (tried at a node the walk
    reached: the children before the accepted one, or all of them where the walk stopped) or never
    reached (a sibling after the accepted one, or anything below a node not accepted)."""
    status = [NOT_REACHED] * len(tree)
    for parent in [ROOT, *branch]:
        children = tree.children(parent)
        accepted = [c for c in children if c in branch]
        for child in children[: children.index(accepted[0]) if accepted else len(children)]:
            status[child] = REJECTED
    for node in branch:
        status[node] = ACCEPTED
    return status


# ---------------------------------------------------------------------------------------------
# The multi-candidate step on a toy pair: exact output of the right rule and of wrong ones
# ---------------------------------------------------------------------------------------------

RULES = {MULTI_STEP.name: MULTI_STEP, **{name: MISTAKES[name] for name in (
    "the residual not updated between candidates", "the fallback sampled from q", "stopping at the first rejection")}}


def drawn_without_replacement(p, m):
    """Every way to draw m distinct candidates from p, one after another: [(candidates, rows
    [m, V] each was drawn from, probability)] (fewer candidates where p has fewer tokens)."""
    p = np.asarray(p, np.float64)
    m = min(m, int(np.count_nonzero(p)))
    out = []
    for candidates in permutations(np.flatnonzero(p).tolist(), m):
        rows, probability, left = [], 1.0, p.copy()
        for x in candidates:
            rows.append(left / left.sum())
            probability *= rows[-1][x]
            left[x] = 0.0
        out.append((candidates, np.array(rows).reshape(m, len(p)), probability))
    return out


def drawn_independently(p, m):
    """Every way to draw m candidates independently from p (a token may come twice): [(candidates,
    rows [m, V] each was drawn from (p every time), probability)]."""
    p = np.asarray(p, np.float64)
    return [(candidates, np.array([p] * m), float(np.prod(p[list(candidates)])))
            for candidates in product(np.flatnonzero(p).tolist(), repeat=m)]


@dataclass(frozen=True)
class CandidatesPanel:
    """The token one node emits when m candidates are drawn from p (without replacement unless
    `independent`), judged by `rule`."""
    p: np.ndarray
    q: np.ndarray
    m: int
    rule: str
    output: np.ndarray  # the exact distribution of the emitted token [n_vocab]
    kept: float  # P(the emitted token is one of the candidates): the chance the walk goes deeper
    tv: float  # TV(output, q): 0 for the right rule
    independent: bool = False


def candidates_panel(p, q, m, rule=MULTI_STEP.name, independent=False):
    """Enumerate every drawing of the m candidates and add up `rule`'s exact output (RULES)."""
    if rule not in RULES:
        raise PicoGPTError(f"rule {rule!r}: expected one of {', '.join(RULES)}")
    q = np.asarray(q, np.float64)
    output, kept = np.zeros_like(q), 0.0
    for candidates, rows, probability in (drawn_independently if independent else drawn_without_replacement)(p, m):
        emitted = RULES[rule].output_distribution(candidates, rows, q)
        output += probability * emitted
        kept += probability * sum(emitted[x] for x in set(candidates))
    return CandidatesPanel(np.asarray(p, np.float64), q, m, rule, output, float(kept),
                           float(0.5 * np.abs(output - q).sum()), independent)


def candidates_bound(p, q, m):
    """Σ_x min(q(x), 1 - (1 - p(x))^m): no exact rule keeps one of m candidates drawn independently
    from p more often. The coupling bound of notebook 04 (P(X = x and x is a candidate) is at most
    both q(x) and P(x is a candidate)); Sun et al. (SpecTr, arXiv 2310.15141) pose the best rule as
    an optimal-transport problem under this bound."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    return float(np.minimum(q, 1.0 - (1.0 - p) ** m).sum())


def n_drawn(panel):
    """How many candidates a drawing yields: m, but no more than p has tokens when drawn without replacement."""
    return panel.m if panel.independent else min(panel.m, int(np.count_nonzero(panel.p)))


def told_apart(a, b):
    """a and b printed with the fewest decimals (3 or more) that show them different."""
    digits = next((d for d in range(3, 13) if f"{a:.{d}f}" != f"{b:.{d}f}"), 12)
    return f"{a:.{digits}f}", f"{b:.{digits}f}"


def why_as_many(panel):
    """Why an exact rule that stops after the first candidate keeps as many as the multi-candidate
    step for this pair (a phrase)."""
    first = theory.acceptance_rate(panel.p, panel.q)
    if n_drawn(panel) == 1:
        return "with one candidate there is no second one to try"
    if first >= 1 - RESIDUAL_MASS_EPS:
        return "p = q here: the first candidate is always kept"
    if first <= RESIDUAL_MASS_EPS:
        return "p and q share no token here: no candidate is ever kept"
    return "no candidate after the first is ever kept for this pair"


def kept_comparison(panel, right):
    """How many candidates an exact wrong rule keeps, against the multi-candidate step (`right`, the same drawing)."""
    if abs(panel.kept - right.kept) <= ROUNDING_TV:
        return f"it keeps as many candidates as the multi-candidate step ({panel.kept:.3f}): {why_as_many(panel)}"
    ours, theirs = told_apart(panel.kept, right.kept)
    return (f"it keeps {'fewer' if panel.kept < right.kept else 'more'} candidates: P(one is kept) = {ours} against "
            f"{theirs} for the multi-candidate step")


def candidates_title(panel):
    """The title over the candidates' figure: how many were drawn, and how far the output is from q."""
    drawn = n_drawn(panel)
    tv = f"{panel.tv:.3f}" if panel.tv >= VISIBLE_TV or panel.tv <= ROUNDING_TV else f"{panel.tv:.1g}"
    return f"{drawn} candidate{'s' if drawn > 1 else ''}: the emitted token's distribution, TV(output, q) = {tv}"


def candidates_readout(panel):
    """The sentence the candidates explorer shows above its figure, true for every p, q, m and rule."""
    drawn, how = n_drawn(panel), "independently" if panel.independent else "without replacement"
    text = f"{drawn} candidate{'s' if drawn > 1 else ''} drawn {how}"
    if drawn < panel.m:
        text += f" (p has {drawn} token{'s' if drawn > 1 else ''}: no more can be drawn without replacement)"
    text += (f": P(one is kept) = {panel.kept:.3f} (one candidate: Σ min(p, q) = "
             f"{theory.acceptance_rate(panel.p, panel.q):.3f})")
    if panel.rule == MULTI_STEP.name:
        return text + f" &nbsp;·&nbsp; TV(output, q) = {panel.tv:.1g}: the output is q"
    if panel.tv <= ROUNDING_TV:
        right = candidates_panel(panel.p, panel.q, panel.m, independent=panel.independent)
        verdict = f"TV(output, q) = {panel.tv:.1g}: exact for this pair, and {kept_comparison(panel, right)}"
    elif panel.tv >= VISIBLE_TV:
        verdict = f"TV(output, q) = {panel.tv:.3f}: the output is not q"
    else:
        verdict = f"TV(output, q) = {panel.tv:.1g}: the output is not q, though too little to show on the bars"
    return text + f"<br><b>{panel.rule}: {verdict}</b>"


def running_residuals(rows, q):
    """q_1 = q, q_{i+1} = (q_i - p_i)+ for each row p_i: what each candidate is judged against. [m + 1, V]"""
    q_i = [np.asarray(q, np.float64)]
    for p_i in rows:
        q_i.append(residual(p_i, q_i[-1]))
    return np.array(q_i)


def verdict_lines(m):
    """Which variant emitted the most per target call and which was fastest (the highest median
    speedup); whether the repeats resolve the fastest is the last line of measure/trees.text_lines
    (measure/compare.py's paired test), printed with the table."""
    most = max(m.variants.values(), key=lambda v: v.tokens_per_call)
    best = max(m.variants, key=lambda name: m.variants[name].speedup)
    return [f"most tokens per target call: {most.name} ({most.tokens_per_call:.2f}, all runs together); fastest: "
            f"{best} ({m.variants[best].speedup:.2f}x autoregressive, the median over the repeats; whether the repeats "
            "resolve it: the table's last line)"]


def draft_time_line(tree, chain):
    """A tree's in-loop draft time against a chain's of as many drafted tokens (measure.trees
    Variants): its draft calls a loop against the chain's and the two times with their loop-by-loop
    spread. Loops are not pairs (a tree's loop and a chain's draw different text), so no verdict is
    drawn from them: the runs' paired verdict is verdict_lines'."""
    from ..measure.trees import ms_text
    calls = f"{tree.name}: {len(tree.shape)} draft calls a loop, {chain.name}: {len(chain.shape)}"
    return (f"{calls}; the draft's time a loop {ms_text(tree.t_draft, tree.t_draft_s)} ms against "
            f"{ms_text(chain.t_draft, chain.t_draft_s)} ms ({tree.t_draft_s / chain.t_draft_s:.2f} of the chain's; "
            "medians over the loops with their interquartile range, a description, not a paired comparison)")


def draft_time_lines(m):
    """draft_time_line for every tree of a TreeMeasurement raced beside a chain of as many drafted tokens."""
    chains = {v.nodes: v for v in m.variants.values() if set(v.shape) == {1}}
    return [draft_time_line(v, chains[v.nodes]) for v in m.variants.values()
            if set(v.shape) != {1} and v.nodes in chains]


def bench_tree_lines(path=None):
    """The bench's committed chains and trees (benchmarks/bench.json's "trees"), as text, each pair
    with where its weights came from and what its repeats resolve; or a line saying they are not
    measured there."""
    from ..measure import trees as tree_measure
    from ..measure.results import BENCH_JSON
    from .speed_panels import bench_source, read_bench
    bench = read_bench(path or BENCH_JSON)
    found = (bench or {}).get("trees", [])
    if not found:
        return ["chains and trees: not in benchmarks/bench.json, not measured there (run: python -m picogpt bench --save)"]
    lines = []
    for entry in found:
        m = tree_measure.from_dict(entry["trees"])
        lines += [f"the bench, {m.target}: {bench_source(bench, m.target)}", *tree_measure.text_lines(m),
                  *verdict_lines(m), *draft_time_lines(m), ""]
    return lines


# ---------------------------------------------------------------------------------------------
# The figures
# ---------------------------------------------------------------------------------------------

STATUS_COLOURS = {ACCEPTED: "tab:green", REJECTED: "tab:red", NOT_REACHED: "lightgrey"}


def plot_tree(tree, status, labels, root_label, ax=None, title="A token tree and its walk", after=None):
    """The tree drawn top-down from the text's last token (the root), each node labelled with its
    token and coloured by what the walk did to it; `labels` [n_nodes] are the nodes' token texts.
    after = (branch, label): the token the walk emitted after its branch, drawn below the branch's end."""
    ax = new_ax(ax, (9, 4))
    xy, (root_x, root_y) = tree_layout(tree)
    if after is not None:
        branch, label = after
        x0, y0 = xy[branch[-1]] if branch else (root_x, root_y)
        ax.plot([x0, x0 + 0.35], [y0, y0 - 0.6], color="black", lw=1, ls="--", zorder=1)
        ax.text(x0 + 0.35, y0 - 0.6, label, ha="center", va="center", fontsize=9, zorder=3,
                bbox=dict(boxstyle="round", facecolor="white", edgecolor="black", ls="--"))
        ax.scatter([], [], marker="s", s=80, color="white", edgecolor="black", ls="--",
                   label="emitted after the branch")
    for node, parent in enumerate(tree.parents):
        x0, y0 = (root_x, root_y) if parent < 0 else xy[parent]
        ax.plot([x0, xy[node, 0]], [y0, xy[node, 1]], color="grey", lw=1, zorder=1)
    ax.text(root_x, root_y, root_label, ha="center", va="center", fontsize=9, zorder=3,
            bbox=dict(boxstyle="round", facecolor="white", edgecolor="black"))
    for node, (x, y) in enumerate(xy):
        ax.text(x, y, labels[node], ha="center", va="center", fontsize=9, zorder=3,
                bbox=dict(boxstyle="round", facecolor=STATUS_COLOURS[status[node]], edgecolor="black", alpha=0.9))
    return finish_tree_axes(ax, xy, STATUS_COLOURS, title, bottom=1.0 if after is not None else 0.6)


def plot_mask(mask, labels, n_shown_text, ax=None, title="The mask of one tree call"):
    """The attention mask [rows, keys] of the text's last n_shown_text tokens and the tree's
    nodes: a dark cell means the row's token may attend to the column's (mask 0), white not (-inf)."""
    ax = new_ax(ax, (6.5, 5.5))
    n = len(labels)
    shown = mask[-n:, -n:] == 0  # [n, n]: the last text tokens and every node
    ax.imshow(shown, cmap="Greys", vmin=0, vmax=1.4)
    ax.set_xticks(range(n), labels, rotation=90, fontsize=8)
    ax.set_yticks(range(n), labels, fontsize=8)
    ax.axhline(n_shown_text - 0.5, color="tab:blue", lw=1)
    ax.axvline(n_shown_text - 0.5, color="tab:blue", lw=1)
    ax.set(xlabel="key: may be attended to (text | tree nodes)", ylabel="query: the token attending", title=title)
    return ax


def plot_candidates(panel, labels, ax=None):
    """The token one node emits (exact, averaged over the candidates' drawing) against q."""
    ax = new_ax(ax, (8, 3.6))
    x = np.arange(len(panel.q))
    ax.bar(x - 0.2, panel.q, 0.4, color=COLOURS["q"], label="q (target)")
    ax.bar(x + 0.2, panel.output, 0.4, color=COLOURS["overlap"] if panel.tv < 5e-4 else COLOURS["excess"],
           label=f"emitted: {panel.rule}")
    ax.step(x, panel.p, where="mid", color=COLOURS["p"], lw=1, label="p (draft)")
    ax.set_xticks(x, labels)
    ax.set(xlabel="token", ylabel="probability", title=candidates_title(panel))
    room_for_legend(ax, panel.q, panel.output, panel.p)
    return ax


def plot_running_residuals(q_rows, candidates, labels, ax=None):
    """q_1 = q, q_2, ... side by side: what each candidate is judged against, the candidates
    marked under their tokens."""
    ax = new_ax(ax, (9, 3.6))
    x, width = np.arange(q_rows.shape[1]), 0.8 / len(q_rows)
    for i, row in enumerate(q_rows):
        name = "q_1 = q" if i == 0 else f"q_{i + 1} = (q_{i} − p_{i})+"
        ax.bar(x - 0.4 + (i + 0.5) * width, row, width, label=name + (f", judges c_{i + 1}" if i < len(candidates) else
                                                                       ", the fallback"))
    marks = {c: f"\nc_{i + 1}" for i, c in enumerate(candidates)}
    ax.set_xticks(x, [label + marks.get(i, "") for i, label in enumerate(labels)])
    ax.set(xlabel="token (c_i: the i-th candidate)", ylabel="probability",
           title="What each candidate is judged against: the running residual")
    room_for_legend(ax, *q_rows)
    return ax


def plot_tree_measurement(m, axes=None):
    """Three panels of a measure/trees.py measurement: tokens per target call (measured, and by the
    formula), the target call's cost (median and interquartile range over loops) against its rows,
    and the speedup over autoregressive sampling (median of the repeats' ratios, interquartile
    whiskers) beside the predicted one."""
    import matplotlib.pyplot as plt
    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")
    variants = list(m.variants.values())
    names, x = [v.name for v in variants], np.arange(len(variants))
    ax = axes[0]
    ax.bar(x - 0.2, [v.tokens_per_call for v in variants], 0.4, color="tab:green", label="measured")
    ax.bar(x + 0.2, [v.predicted_tokens for v in variants], 0.4, color="lightgrey", edgecolor="black",
           label="formula (independent draws)")
    ax.set_xticks(x, names, rotation=25, ha="right")
    ax.set(ylabel="tokens per target call", title="Tokens per loop")
    ax.legend(fontsize="small")
    ax = axes[1]
    chains = sorted((v for v in variants if set(v.shape) == {1}), key=lambda v: v.nodes)
    for group, style, name in ((chains, "o-", "chains"), ([v for v in variants if v not in chains], "s", None)):
        for v in group:
            ax.errorbar(v.nodes + 1, v.t_score.median * 1e3, yerr=[[(v.t_score.median - v.t_score.q1) * 1e3],
                                                                   [(v.t_score.q3 - v.t_score.median) * 1e3]],
                        fmt=style[0], capsize=3, color="black" if name else None, label=None if name else v.name)
        if name and group:
            ax.plot([v.nodes + 1 for v in group], [v.t_score.median * 1e3 for v in group], "-", color="black",
                    label=", ".join(v.name for v in group))
    ax.errorbar(1, m.t_target.median * 1e3, yerr=[[(m.t_target.median - m.t_target.q1) * 1e3],
                                                   [(m.t_target.q3 - m.t_target.median) * 1e3]],
                fmt="D", color="grey", capsize=3, label="one row: an autoregressive step")
    ax.set(xlabel="rows in the target call (drafted tokens + 1)", ylabel="time (ms)",
           title="What one target call costs (median, IQR over loops)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="x-small", loc="lower right")
    ax = axes[2]
    medians = [v.speedup for v in variants]
    ax.errorbar(x, medians, yerr=[[v.speedup - v.speedup_runs.q1 for v in variants],
                                  [v.speedup_runs.q3 - v.speedup for v in variants]], fmt="o", color="black", capsize=4,
                label="measured")
    ax.plot(x, [v.predicted for v in variants], "s", mfc="none", color="tab:blue", label="predicted (in-loop costs)")
    ax.axhline(1, color="grey", lw=0.8)
    ax.legend(fontsize="small")
    ax.set_xticks(x, names, rotation=25, ha="right")
    ax.set(ylabel="speedup over autoregressive (×)",
           title=f"Wall clock: median of {m.repeats} repeats, interquartile whiskers")
    return axes


# ---------------------------------------------------------------------------------------------
# Many candidates (notebook 07): the candidates explorer
# ---------------------------------------------------------------------------------------------

def candidates_update(p, q, m, rule, labels):
    """What the candidates explorer shows for one setting: (readout HTML, figure outputs,
    CandidatesPanel) for m candidates drawn from p without replacement, judged by `rule`."""
    panel = candidates_panel(p, q, m, rule)
    fig = Figure(figsize=(9, 3.8), layout="constrained")
    plot_candidates(panel, labels, ax=fig.subplots())
    text = candidates_readout(panel)
    return text, (png_output(figure_png(fig), text),), panel


def candidates_explorer():
    """Toy p and q, the number of candidates, and the rule that judges them (RULES): the
    emitted token's exact distribution against q. Returns an ipywidgets.VBox."""
    import ipywidgets as w

    sliders, make_pair = toy_controls()
    m_slider = w.IntSlider(value=2, min=1, max=4, description="candidates m", continuous_update=False,
                           style={"description_width": "initial"})
    rule_switch = w.ToggleButtons(options=list(RULES), value=next(iter(RULES)), description="rule",
                                  style={"description_width": "initial", "button_width": "auto"})
    readout_html = w.HTML()
    figure_out = w.Output(layout={"min_height": "300px"})

    def redraw(_change=None):
        pair = make_pair(**{name: s.value for name, s in sliders.items()})
        readout_html.value, figure_out.outputs, _ = candidates_update(pair.p, pair.q, m_slider.value,
                                                                      rule_switch.value, pair.labels)

    for control in [*sliders.values(), m_slider, rule_switch]:
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox(list(sliders.values())[:2]), w.HBox(list(sliders.values())[2:]), m_slider, rule_switch,
                   readout_html, figure_out])
