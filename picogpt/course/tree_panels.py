"""Notebook 07's numbers, as pure functions of the numbers handed in (no drawing, no model run):
what a walk did to each node of a tree, where to draw the nodes, the multi-candidate step's exact
output against wrong rules, the running residuals, and what a measurement of trees against chains
resolves (the measurement itself and the formula's tokens per loop are measure/trees.py's).

Notation (Chen et al. 2023): p is the draft's distribution, q the target's, (f)+ = max(0, f) / Σ max(0, f).
"""

from dataclasses import dataclass
from itertools import permutations, product

import numpy as np

from .. import theory
from ..errors import PicoGPTError
from ..rejection import RESIDUAL_MASS_EPS, residual
from ..tree import ROOT
from .panels import ROUNDING_TV, VISIBLE_TV
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
