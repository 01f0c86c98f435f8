"""Notebook 08's numbers, as pure functions of the numbers handed in (no drawing, no model run):
one loop of block verification laid out position by position, the drafts kept per loop token by
token, by the block and at most (for the explorer), and the verifiers measured side by side, as
text. The exact joint of a loop's tokens on a toy pair runs the toy models: model_runs.py.

Notation: p is the draft's distribution, q the target's; w_i the running weight (Sun et al.'s p_i),
h_i the keep probability of position i, eta_i its uniform (picogpt/speculative.py, block_step).
"""

from dataclasses import dataclass

import numpy as np

from .. import rejection, theory
from ..errors import PicoGPTError
from ..speculative import block_keep_probabilities

# ---------------------------------------------------------------------------------------------
# One loop, position by position
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockLoop:
    """What block verification computes for one loop's drafts and uniforms."""
    drafted: tuple  # x̃_1 .. x̃_K
    ratio: np.ndarray  # q_i(x̃_i) / p_i(x̃_i) [K]
    token_wise: np.ndarray  # min(1, ratio) multiplied up to i: P(token by token keeps x̃_1 .. x̃_i) [K]
    weights: np.ndarray  # w_1 .. w_K [K]
    keep: np.ndarray  # h_1 .. h_K [K]
    eta: np.ndarray  # the uniforms [K]
    n_kept: int  # the largest i with eta_i < h_i (0: none)
    first_failure: int  # the drafts before the first i with eta_i >= h_i
    residual: np.ndarray  # what the last token is drawn from: (w q - p)+ at n_kept + 1, or q[K] [n_vocab]
    unweighted: np.ndarray  # (q - p)+ at the same position (q[K] if all kept) [n_vocab]


def block_loop(drafted, p, q, eta):
    """Lay one loop out: drafted [K], p [K, V], q [K + 1, V], eta [K] the uniforms drawn."""
    K = len(drafted)
    weights, keep = block_keep_probabilities(drafted, p, q)
    ratio = np.array([q[i][x] / p[i][x] for i, x in enumerate(drafted)])
    passes = np.asarray(eta) < np.asarray(keep)
    n_kept = max((i + 1 for i in range(K) if passes[i]), default=0)
    first_failure = next((i for i in range(K) if not passes[i]), K)
    if n_kept == K:
        residual = unweighted = np.asarray(q[K], np.float64)
    else:
        residual = rejection.weighted_residual(weights[n_kept], p[n_kept], q[n_kept])
        unweighted = rejection.residual(p[n_kept], q[n_kept])
    return BlockLoop(tuple(int(x) for x in drafted), ratio, np.cumprod(np.minimum(1.0, ratio)), np.array(weights[1:]),
                     np.array(keep), np.asarray(eta, np.float64), n_kept, first_failure, residual, unweighted)


def loop_lines(loop, labels):
    """The loop as a table, one line per position: the draft, q/p, what token by token keeps, the
    running weight, h, eta and its verdict. labels: the drafts' texts [K]."""
    lines = ["  i  draft          q/p   token-wise P(keep 1..i)   w_i    h_i    eta_i"]
    for i in range(len(loop.drafted)):
        verdict = "passes" if loop.eta[i] < loop.keep[i] else "fails"
        lines.append(f"{i + 1:>3}  {labels[i]!r:<12} {loop.ratio[i]:>6.2f}  {loop.token_wise[i]:>12.3f}"
                     f"              {loop.weights[i]:.3f}  {loop.keep[i]:.3f}  {loop.eta[i]:.3f} {verdict}")
    return lines


def instructive(loop, visible_tv=0.05):
    """A loop that shows everything block verification does differently: a position fails and a
    later one passes (the block keeps more than stopping at the first failure would), and a draft is
    left after the kept ones, whose weighted residual differs visibly from Theorem 1's (q − p)+
    (total variation above `visible_tv`)."""
    return (loop.first_failure < loop.n_kept < len(loop.drafted)
            and total_variation(loop.residual, loop.unweighted) > visible_tv)


# ---------------------------------------------------------------------------------------------
# Drafts kept per loop on a two-token vocabulary (the explorer): token by token, block, at most
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeptPanel:
    """P(the first i drafts are kept), i = 1 .. K, for p = (p_a, 1 - p_a), q = (q_a, 1 - q_a)."""
    p: np.ndarray
    q: np.ndarray
    K: int
    kept: dict  # verifier ("token", "block", "bound") -> [K]

    def expected(self, verify):
        """Mean drafts kept per loop."""
        return float(self.kept[verify].sum())


def kept_panel(p_a, q_a, K):
    """The explorer's numbers for one slider setting (theory.KEPT_PROBABILITIES)."""
    if not (0 <= p_a <= 1 and 0 <= q_a <= 1) or int(K) != K or not 1 <= K <= 12:
        raise PicoGPTError(f"p(a) = {p_a}, q(a) = {q_a}, K = {K}: expected probabilities in [0, 1] and K in 1..12")
    p, q = np.array([p_a, 1 - p_a]), np.array([q_a, 1 - q_a])
    return KeptPanel(p, q, int(K), {name: kept(p, q, int(K)) for name, kept in theory.KEPT_PROBABILITIES.items()})


NAMES = {"token": "token by token", "block": "block verification", "bound": "the bound (no exact verifier keeps more)"}


def kept_readout(panel):
    """The sentence the explorer shows above its figure (HTML)."""
    token, block, bound = (panel.expected(v) for v in ("token", "block", "bound"))
    gain = f"{block / token - 1:+.1%}" if token > 0 else "n/a (token by token keeps none)"
    return (f"p = ({panel.p[0]:.2f}, {panel.p[1]:.2f}), q = ({panel.q[0]:.2f}, {panel.q[1]:.2f}), K = {panel.K}: "
            f"drafts kept per loop, token by token {token:.3f}, block {block:.3f} ({gain}), "
            f"at most {bound:.3f}")


def total_variation(a, b):
    return 0.5 * float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).sum())


# ---------------------------------------------------------------------------------------------
# Measured: the two verifiers in the same repeats (measure.speedup.measure_chains)
# ---------------------------------------------------------------------------------------------


def verifier_lines(measurements, K):
    """{verify: SpeedupMeasurement} of one measure_chains call, at K, as text: each verifier's tokens
    per loop (all runs together) and speedup over autoregressive sampling (the median of the
    repeat-by-repeat ratios, with their interquartile range), then the verifiers compared pair by
    pair (measure/compare.py: the same seeds in the same repeats), on tokens per target call and on
    time."""
    from ..measure import compare
    from ..measure.speedup import speedup_text, versus
    m = next(iter(measurements.values()))
    lines = [f"{m.draft} -> {m.target}, temperature {m.controls.get('temperature', 1.0):g}, K = {K}, N = {m.N}, "
             f"{m.repeats} repeats interleaved, the same seeds: autoregressive {m.autoregressive_s.median:.2f} s "
             f"(median; IQR {m.autoregressive_s.q1:.2f}-{m.autoregressive_s.q3:.2f})"]
    for verify, v in measurements.items():
        at = v.by_K[K]
        lines.append(f"  {NAMES[verify]:<20} {at.tokens_per_loop:.2f} tokens per loop (all {m.repeats} runs together), "
                     f"speedup {speedup_text(at)}")
    if {"token", "block"} <= set(measurements):
        token, block = (measurements[v].by_K[K] for v in ("token", "block"))
        lines.append(f"  block verification emitted {block.tokens_per_loop / token.tokens_per_loop - 1:+.1%} tokens per "
                     "target call (all runs together)")
        lines.append("  " + split_line(token, block, m.repeats))
        for words in (compare.TOKENS_PER_CALL, compare.TIME):
            lines.append("  " + compare.sentence(versus(NAMES["block"], block, NAMES["token"], token, words)))
    return lines


def loop_seconds(at, repeats):
    """A run's mean seconds over its mean number of loops: what one loop took, its share of the
    run's fixed costs (the prompt's reading, the bookkeeping) included."""
    return sum(at.breakdown_s.values()) / (at.n_loops / repeats)


def split_line(token, block, repeats):
    """block / token by token (AtK of one measure_chains call), all runs together: the gain in speed
    split into the gain in tokens per target call and the change in time per loop, which multiply
    (a run of N tokens takes N / tokens per loop loops)."""
    tokens = block.tokens_per_loop / token.tokens_per_loop
    loop = loop_seconds(block, repeats) / loop_seconds(token, repeats)
    return (f"block / token by token, all runs together: {tokens:.3f}x tokens per target call, {loop:.3f}x the time "
            f"per loop, so {tokens / loop:.3f}x the speed (from the runs' means; the speedups above are medians of ratios)")


def bench_verifier_lines(path=None):
    """The bench's committed block-verification rows (benchmarks/bench.json, "speculative" entries
    with "block"), each pair and temperature with where its weights came from; or a line saying
    they are not measured there."""
    from ..measure import speedup
    from ..measure.results import BENCH_JSON
    from .speed_panels import bench_source, read_bench
    bench = read_bench(path or BENCH_JSON)
    entries = [entry for entry in (bench or {}).get("speculative", []) if "block" in entry]
    if not entries:
        return ["block verification: not in benchmarks/bench.json, not measured there "
                "(run: python -m picogpt bench --save)"]
    lines = []
    for entry in entries:
        block = speedup.from_dict(entry["block"])
        K = block.Ks[0]
        token = speedup.from_dict(entry["measurement"])
        lines += [f"the bench, {block.target}: {bench_source(bench, block.target)}",
                  *verifier_lines({"token": token, "block": block}, K), ""]
    return lines[:-1]
