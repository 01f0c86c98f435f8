"""Token trees against chains against autoregressive sampling, measured the way measure/speedup.py
measures chains (used by notebook 07 and `python -m picogpt bench`).

The runs are speedup.py's (timed_runs): per repeat each variant, then autoregressive sampling,
all with seed + repeat, so a busy moment hits every variant alike; a chain runs the library's
Algorithm 2 (speculative_sampling), a tree tree_sampling (picogpt/tree.py). Costs are read
inside the loops, the first loop of each run (which also reads the prompt) left out. The speedup
is speedup.py's one statistic: the median over the repeats of autoregressive seconds / this variant's seconds of the same repeat,
with the interquartile range of those ratios.

The prediction is Jay Mody's arithmetic with a tree's loop: the tokens a loop should emit, by
theory.expected_tokens_per_tree_loop fed alpha_m (theory.acceptance_with_candidates, averaged
over the positions of the first autoregressive run's text), over what a loop costs inside the
loop (the draft's calls + the target's one call), against one autoregressive step.
"""

import dataclasses
from dataclasses import dataclass

import numpy as np

from .. import theory
from ..errors import PicoGPTError
from ..sampling import distribution
from ..speculative import Chain
from ..tree import TreeShape, n_nodes
from . import compare, speedup
from .timing import Spread, spread


def method(shape):
    """What a measurement runs for a shape: Algorithm 2 (speculative.Chain) for (1, .., 1), the
    library's chain, tree sampling (tree.TreeShape) for any other."""
    return Chain(len(shape)) if set(shape) == {1} else TreeShape(tuple(shape))


def methods(shapes):
    """What the bench races for its shapes: `method` of each, then each tree (not a chain) again with
    traversal verification (tree.TreeShape(shape, "traversal")). A traversal row's formula is the
    walk's: no formula for traversal's tokens per loop is implemented, so read its measured column."""
    shapes = [tuple(shape) for shape in shapes]
    return [method(shape) for shape in shapes] + [TreeShape(shape, "traversal") for shape in shapes if set(shape) != {1}]


def mean_acceptances(draft, target, text, m_max, **controls):
    """[alpha_1 .. alpha_m_max]: theory.acceptance_with_candidates at every position of `text`,
    averaged (candidates drawn independently: the formula's drawing). One forward pass each."""
    p, q = distribution(draft(text), **controls), distribution(target(text), **controls)  # [len(text), n_vocab]
    return np.array([float(np.mean(theory.acceptance_with_candidates(p, q, m))) for m in range(1, m_max + 1)])


def predicted_tokens_per_loop(shape, alphas):
    """theory.expected_tokens_per_tree_loop with level d's acceptance alphas[m_d - 1]."""
    return float(theory.expected_tokens_per_tree_loop([alphas[m - 1] for m in shape]))


@dataclass(frozen=True)
class Variant:
    """A chain or a tree, measured over the repeats."""
    name: str
    shape: tuple  # (1,) * K for a chain
    nodes: int  # drafted tokens per loop
    seconds: Spread  # one run's wall time
    speedup_runs: Spread  # autoregressive / this, repeat by repeat (same seed)
    tokens_per_call: float  # tokens emitted per loop (= per target call), every run
    t_score: Spread  # the in-loop target call over every node, loop by loop
    t_draft_s: float  # median in-loop draft time per loop (all its draft calls and draws)
    predicted_tokens: float  # tokens per loop by the formula
    predicted: float  # predicted speedup: predicted_tokens / (t_draft_s + t_score) x t_target
    t_draft: Spread = None  # the in-loop draft time, loop by loop (t_draft_s is its median; None in older files)
    runs_s: tuple = ()  # each repeat's wall time, in repeat order: the pairs measure/compare.py judges
    tokens_per_loop_runs: tuple = ()  # each repeat's tokens per loop, in repeat order

    @property
    def speedup(self):
        """The measured speedup: the median of the repeat-by-repeat ratios."""
        return self.speedup_runs.median


@dataclass(frozen=True)
class TreeMeasurement:
    draft: str
    target: str
    N: int
    repeats: int
    controls: dict
    alphas: list  # alpha_1 .. alpha_m: the chance one of m independent candidates is kept, averaged
    autoregressive_s: Spread
    t_target: Spread  # the autoregressive steps after the prompt
    variants: dict  # name -> Variant
    load_average_before: list
    load_average_after: list
    autoregressive_runs_s: tuple = ()  # each repeat's autoregressive wall time, in repeat order

    def speedups_by_repeat(self, name):
        """Autoregressive seconds / variant `name`'s, repeat by repeat ((): saved without repeats)."""
        return speedup.ratios_by_repeat(self.autoregressive_runs_s, self.variants[name].runs_s)


def measure_trees(draft, target, ids, N, methods, repeats=5, seed=0, **controls):
    """Autoregressive sampling and each of `methods` (speculative.Chain, tree.TreeShape: `method`
    makes one from a shape), interleaved by speedup.timed_runs after a short warm-up of each (see the
    module's docstring). Returns a TreeMeasurement."""
    methods = list(methods)
    if not methods or not all(isinstance(m, (Chain, TreeShape)) for m in methods):
        raise PicoGPTError(f"measure_trees needs chains and trees to race, speculative.Chain(K) or "
                           f"tree.TreeShape((m_1, .., m_D)) (measure.trees.method(shape) makes one), got {methods!r}")
    variants = {m.name: (draft, m) for m in methods}
    ar_runs, runs, (load_before, load_after) = speedup.timed_runs(variants, target, ids, N, repeats, seed,
                                                                  warmup_tokens=4, controls=controls)
    alphas = mean_acceptances(draft, target, list(ids) + ar_runs[0].tokens, max(max(m.shape) for m in methods),
                              **controls)
    t_target = spread([t for run in ar_runs for t in run.token_times_s[1:]])
    variants = {}
    for m in methods:
        results = runs[m.name]
        loops = [loop for run in results for loop in run.loops]
        steady = [loop for run in results for loop in run.loops[1:]] or loops
        t_score, t_draft = spread([loop.t_score_s for loop in steady]), spread([loop.t_draft_s for loop in steady])
        tokens = predicted_tokens_per_loop(m.shape, alphas)
        variants[m.name] = Variant(
            name=m.name, shape=m.shape, nodes=n_nodes(m.shape), seconds=spread([run.seconds for run in results]),
            speedup_runs=spread([ar.seconds / run.seconds for ar, run in zip(ar_runs, results)]),
            tokens_per_call=sum(len(loop.tokens) for loop in loops) / len(loops),  # a LoopTrace's or a TreeLoop's
            t_score=t_score, t_draft_s=t_draft.median, predicted_tokens=tokens,
            predicted=tokens / (t_draft.median + t_score.median) * t_target.median, t_draft=t_draft,
            runs_s=tuple(run.seconds for run in results), tokens_per_loop_runs=tuple(run.tokens_per_loop for run in results))
    return TreeMeasurement(draft=draft.name, target=target.name, N=N, repeats=repeats, controls=dict(controls),
                           alphas=[float(a) for a in alphas], autoregressive_s=spread([run.seconds for run in ar_runs]),
                           t_target=t_target, variants=variants, load_average_before=load_before,
                           load_average_after=load_after, autoregressive_runs_s=tuple(run.seconds for run in ar_runs))


def as_dict(m):
    """The measurement as JSON-ready data (what bench.json holds)."""
    return dataclasses.asdict(m)


def from_dict(data):
    """as_dict's inverse (also for data read back from JSON)."""
    def spreads(d, keys):
        return {k: Spread(**v) if k in keys and v is not None else v for k, v in d.items()}

    def runs(v):  # JSON lists back to tuples; files saved before runs were kept have none
        return {k: tuple(x) if k in ("runs_s", "tokens_per_loop_runs", "autoregressive_runs_s") else x
                for k, x in v.items()}

    variants = {name: Variant(**{**runs(spreads(v, ("seconds", "speedup_runs", "t_score", "t_draft"))),
                                 "shape": tuple(v["shape"])})
                for name, v in data["variants"].items()}
    return TreeMeasurement(**{**runs(spreads(data, ("autoregressive_s", "t_target"))), "variants": variants})


def text_lines(m):
    """The measurement as text, one line per variant."""
    lines = [f"chains and trees vs autoregressive sampling, {m.draft} -> {m.target}, temperature "
             f"{m.controls.get('temperature', 1.0):g}, N = {m.N}, {m.repeats} repeats, interleaved: autoregressive "
             f"{m.autoregressive_s.median:.2f} s (IQR {m.autoregressive_s.q1:.2f}-{m.autoregressive_s.q3:.2f}), "
             f"t_target {m.t_target.median * 1e3:.1f} ms; alpha_1..{len(m.alphas)} "
             + " ".join(f"{a:.2f}" for a in m.alphas) + f"; load average {m.load_average_before} -> {m.load_average_after}",
             f"  {'':26} {'nodes':>5} {'tokens/call':>11} {'(formula)':>9} {'t_score ms (IQR)':>18} {'t_draft ms (IQR)':>18} "
             f"{'measured':>26} {'predicted':>9}"]
    for v in m.variants.values():
        lines.append(f"  {v.name:26} {v.nodes:5d} {v.tokens_per_call:11.2f} {v.predicted_tokens:9.2f} "
                     f"{ms_text(v.t_score):>18} {ms_text(v.t_draft, v.t_draft_s):>18} {speedup.speedup_text(v):>26} "
                     f"{v.predicted:8.2f}x")
    best = compare.best_line({name: m.speedups_by_repeat(name) for name in m.variants})
    return lines + [f"  the fastest: {best}"]


def ms_text(s, median_s=None):
    """A time's median and interquartile range in ms, '14.3 (11.6-19.5)'; only the median when no
    spread was recorded (s None)."""
    if s is None:
        return f"{median_s * 1e3:.1f}"
    return f"{s.median * 1e3:.1f} ({s.q1 * 1e3:.1f}-{s.q3 * 1e3:.1f})"
