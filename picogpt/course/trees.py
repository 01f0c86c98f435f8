"""Notebook 07's numbers, as pure functions: what a walk did to each node of a tree, where to
draw the nodes, the multi-candidate step's exact output against wrong rules, the running
residuals, the tokens per loop a tree should emit, and trees against chains measured.

Notation (Chen et al. 2023): p is the draft's distribution, q the target's, (f)+ = max(0, f) / Σ max(0, f).
"""

from dataclasses import dataclass
from itertools import permutations, product

import numpy as np

from .. import theory
from ..errors import PicoGPTError
from ..measure.machine import load_average
from ..measure.timing import spread
from ..rejection import residual
from ..sampling import autoregressive_sampling, distribution
from ..speculative import speculative_sampling
from ..tree import ROOT, tree_sampling
from .tree_exercise import MISTAKES, MULTI_STEP

# ---------------------------------------------------------------------------------------------
# One tree, drawn: what the walk did to each node, and where each node goes on the page
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


def tree_layout(tree):
    """(x, y) of each node for drawing, [n_nodes, 2], and the root's (x, y): y = -depth, leaves one
    unit apart left to right in the order they were drawn, a parent centred over its children."""
    xy, leaves = np.zeros((len(tree), 2)), [0]

    def place(node):
        children = tree.children(node)
        if not children:
            x = leaves[0]
            leaves[0] += 1
        else:
            x = float(np.mean([place(child) for child in children]))
        if node != ROOT:
            xy[node] = (x, -len(tree.branch(node)))
        return x

    return xy, (place(ROOT), 0.0)


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


def candidates_readout(panel):
    """The sentence the candidates explorer shows above its figure."""
    drawn = "independently" if panel.independent else "without replacement"
    text = (f"{panel.m} candidate{'s' if panel.m > 1 else ''} drawn {drawn}: P(one is kept) = "
            f"{panel.kept:.3f} (one candidate: Σ min(p, q) = {theory.acceptance_rate(panel.p, panel.q):.3f})")
    if panel.rule == MULTI_STEP.name:
        return text + f" &nbsp;·&nbsp; TV(output, q) = {panel.tv:.1g}: the output is q"
    exact = panel.tv < 5e-4
    return text + (f"<br><b>{panel.rule}: TV(output, q) = {panel.tv:.3f}" +
                   (" — exact, but it keeps fewer candidates</b>" if exact else ": the output is not q</b>"))


def running_residuals(rows, q):
    """q_1 = q, q_{i+1} = (q_i - p_i)+ for each row p_i: what each candidate is judged against. [m + 1, V]"""
    q_i = [np.asarray(q, np.float64)]
    for p_i in rows:
        q_i.append(residual(p_i, q_i[-1]))
    return np.array(q_i)


# ---------------------------------------------------------------------------------------------
# How many tokens a loop should emit: the formula, fed the acceptance of m candidates
# ---------------------------------------------------------------------------------------------

def mean_acceptances(draft, target, text, m_max, **controls):
    """[alpha_1 .. alpha_m_max]: theory.acceptance_with_candidates at every position of `text`,
    averaged (candidates drawn independently: the formula's drawing). One forward pass each."""
    p, q = distribution(draft(text), **controls), distribution(target(text), **controls)  # [len(text), n_vocab]
    return np.array([float(np.mean(theory.acceptance_with_candidates(p, q, m))) for m in range(1, m_max + 1)])


def predicted_tokens_per_loop(shape, alphas):
    """theory.expected_tokens_per_tree_loop with level d's acceptance alphas[m_d - 1]."""
    return float(theory.expected_tokens_per_tree_loop([alphas[m - 1] for m in shape]))


def n_nodes(shape):
    """The number of nodes of a tree of this shape: m_1 + m_1 m_2 + ... + m_1 ... m_D."""
    return int(sum(np.cumprod(shape)))


def shape_name(shape):
    return f"chain K = {len(shape)}" if set(shape) == {1} else f"tree {tuple(shape)}"


# ---------------------------------------------------------------------------------------------
# Trees against chains against autoregressive sampling, measured
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Variant:
    """One way to sample, measured over the repeats."""
    name: str
    shape: tuple  # (1,) * K for a chain
    nodes: int  # drafted tokens per loop
    seconds: object  # Spread of the run's wall time
    speedup_runs: object  # Spread of autoregressive / this, repeat by repeat (same seed)
    tokens_per_call: float  # tokens emitted per target call, every run
    t_score: object  # Spread of the in-loop target call over every node (first loops left out)
    t_draft_s: float  # median draft time per loop (first loops left out)

    @property
    def speedup(self):
        return self.speedup_runs.median


@dataclass(frozen=True)
class TreeMeasurement:
    draft: str
    target: str
    N: int
    repeats: int
    controls: dict
    autoregressive_s: object  # Spread
    t_target: object  # Spread of the autoregressive steps after the prompt
    variants: dict  # name -> Variant
    load_average_before: list
    load_average_after: list


def run_variant(draft, target, ids, N, shape, seed, controls):
    """A chain runs the library's Algorithm 2 (speculative_sampling); a tree runs tree_sampling."""
    if set(shape) == {1}:
        return speculative_sampling(draft, target, ids, N, K=len(shape), seed=seed, **controls)
    return tree_sampling(draft, target, ids, N, shape=shape, seed=seed, **controls)


def measure_trees(draft, target, ids, N, shapes, repeats=5, seed=0, **controls):
    """Autoregressive sampling, chains and trees of `shapes`, interleaved: per repeat each shape,
    then autoregressive, all with seed + repeat (as measure.speedup interleaves its runs), after a
    short warm-up of each. Costs are read inside the loops."""
    if repeats < 1 or N < 2 or not shapes:
        raise PicoGPTError(f"measure_trees needs shapes, repeats >= 1 and N >= 2, got {shapes}, {repeats}, {N}")
    load_before = load_average()
    for shape in shapes:
        run_variant(draft, target, ids, 4, shape, seed, controls)
    autoregressive_sampling(target, ids, 4, seed=seed, **controls)
    runs, ar_runs = {shape: [] for shape in shapes}, []
    for repeat in range(repeats):
        for shape in shapes:
            runs[shape].append(run_variant(draft, target, ids, N, shape, seed + repeat, controls))
        ar_runs.append(autoregressive_sampling(target, ids, N, seed=seed + repeat, **controls))
    variants = {}
    for shape, results in runs.items():
        loops = [loop for run in results for loop in run.loops]
        steady = [loop for run in results for loop in run.loops[1:]]
        emitted = sum(len(loop.tokens) for loop in loops)  # a chain's LoopTrace or a TreeLoop
        variants[shape_name(shape)] = Variant(
            name=shape_name(shape), shape=tuple(shape), nodes=n_nodes(shape),
            seconds=spread([run.seconds for run in results]),
            speedup_runs=spread([ar.seconds / run.seconds for ar, run in zip(ar_runs, results)]),
            tokens_per_call=emitted / len(loops), t_score=spread([loop.t_score_s for loop in steady]),
            t_draft_s=float(np.median([loop.t_draft_s for loop in steady])))
    return TreeMeasurement(draft=draft.name, target=target.name, N=N, repeats=repeats, controls=dict(controls),
                           autoregressive_s=spread([run.seconds for run in ar_runs]),
                           t_target=spread([t for run in ar_runs for t in run.token_times_s[1:]]),
                           variants=variants, load_average_before=load_before, load_average_after=load_average())


def measurement_lines(m, predicted=None):
    """The measurement as text, one line per variant; `predicted` {name: tokens per loop}."""
    lines = [f"{m.draft} -> {m.target}, N = {m.N}, {m.repeats} repeats, interleaved; autoregressive "
             f"{m.autoregressive_s.median:.2f} s (IQR {m.autoregressive_s.q1:.2f}-{m.autoregressive_s.q3:.2f}), "
             f"t_target {m.t_target.median * 1e3:.1f} ms; load average {m.load_average_before} -> {m.load_average_after}",
             f"{'':18} {'nodes':>5} {'tokens/call':>11} {'predicted':>9} {'t_score ms (IQR)':>18} "
             f"{'t_draft ms':>10} {'speedup (IQR of repeats)':>25}"]
    for v in m.variants.values():
        guess = f"{predicted[v.name]:9.2f}" if predicted and v.name in predicted else f"{'':9}"
        lines.append(f"{v.name:18} {v.nodes:5d} {v.tokens_per_call:11.2f} {guess} "
                     f"{v.t_score.median * 1e3:7.1f} ({v.t_score.q1 * 1e3:.1f}-{v.t_score.q3 * 1e3:.1f}) "
                     f"{v.t_draft_s * 1e3:10.1f} {v.speedup:14.2f}x ({v.speedup_runs.q1:.2f}-{v.speedup_runs.q3:.2f})")
    return lines


def verdict_lines(m):
    """Which variant emitted the most per target call, which was fastest, and whether the repeats
    resolve the fastest (course/results.py's check: interquartile ranges of the repeat-by-repeat
    speedups that overlap the best's cannot be told from it)."""
    from types import SimpleNamespace

    from .results import indistinguishable_from_best
    most = max(m.variants.values(), key=lambda v: v.tokens_per_call)
    best, tied = indistinguishable_from_best(SimpleNamespace(Ks=list(m.variants), by_K=m.variants))
    lines = [f"most tokens per target call: {most.name} ({most.tokens_per_call:.2f}); fastest: {best} "
             f"({m.variants[best].speedup:.2f}x autoregressive)"]
    if tied == [best]:
        lines.append(f"resolved: every other variant's repeat-by-repeat speedups stay below {best}'s "
                     f"(interquartile ranges over {m.repeats} repeats of {m.N} tokens)")
    else:
        lines.append(f"not resolved: {', '.join(tied)} cannot be told apart by {m.repeats} repeats of {m.N} tokens "
                     "(their repeat-by-repeat interquartile ranges overlap the best's)")
    return lines
