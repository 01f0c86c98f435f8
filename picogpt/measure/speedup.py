"""Speculative against autoregressive sampling on this machine: the one measurement of the
costs and the speedup (used by the bench, notebooks 05-09, `speculate --compare` and the model
card's tool; notebooks 07 and 09 through measure/trees.py).

Every cost is timed where a user pays it, inside the sampling loops:
- t_target_s: one token of autoregressive sampling (Algorithm 1): a cached target call on one
  new position, its probabilities and the draw (SamplingResult.token_times_s);
- t_draft_s: one drafted token inside speculative sampling (Algorithm 2, step 1):
  LoopTrace.t_draft_s / K;
- t_score_s[K]: the target's one call on K + 1 positions inside the loop (step 2), with its
  probabilities: LoopTrace.t_score_s;
- t_decide_s[K]: the accept/reject steps and the caches' roll-back (steps 3-4): LoopTrace.t_decide_s;
- other: the rest of a run's wall time (the loop's own bookkeeping).
The first call of each run also reads the prompt (the prefill), so the first token of
autoregressive sampling and the first loop of speculative sampling are left out of the costs;
they stay in the wall times and in the breakdown, which adds up to the wall time.

A warm-up run of every variant first pays what a process pays once (first reads of the weights,
loading the compiled kernels). The timed runs are interleaved (per repeat: each K and
autoregressive, all with the same seed, the order reversed every other repeat), so a busy moment
hits every variant alike and a drift favours none; each repeat's times are kept (runs_s), the
pairs measure/compare.py judges. Run times
are medians over the repeats with their interquartile range; the costs are medians over the
steps and loops after the first (the scoring calls' interquartile range is kept too).

The measured speedup, everywhere picogpt prints one (this module's text, the command line's
--compare, the bench, notebooks 05 and 06, the rendered results documents), is one statistic:
the median over the repeats of the ratio autoregressive seconds / speculative seconds *of the same
repeat*, with the interquartile range of those same ratios (`speedup_text` writes it). Why this one:
- the two runs of a repeat ran next to each other with the same seed, so a slow stretch of a busy
  machine slows both and cancels in their ratio; a ratio of two medians pairs runs from different
  moments, and its bracket (of other numbers) can miss the point itself ("1.62x (1.29-1.52)");
- the point and its bracket are quartiles of the same few numbers, so q1 <= median <= q3 always;
- with the 3 to 5 repeats a run can afford, a bootstrap interval would resample too few numbers
  to mean more than the interquartile range, which a reader can check by hand.
Whether two methods differ is not read from these ranges: measure/compare.py judges the pairs
(`versus_autoregressive`, `versus`), with an interval at a stated confidence.

The predicted speedup is Jay Mody's arithmetic (theory.predicted_speedup) fed the in-loop costs
and alpha_hat, the acceptance rate pooled over every accept/reject decision. A draft that proposed
nothing made no decision: alpha_hat is then undefined (nan), not an error, and every loop was one
target step (`text_lines` and the notebooks say so).
"""

import dataclasses
import sys
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from .. import theory
from ..errors import PicoGPTError
from ..sampling import autoregressive_sampling
from ..speculative import Chain
from . import compare, machine
from .machine import load_average
from .timing import Spread, spread

# ---------------------------------------------------------------------------------------------
# The costs and the formulas they feed
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Costs:
    t_draft_s: float  # one drafted token
    t_target_s: float  # one target decoding step
    t_score_s: dict  # K -> one target call on K + 1 positions

    @property
    def c(self):
        """Leviathan et al.'s cost coefficient: a draft step in units of a target step."""
        return self.t_draft_s / self.t_target_s


def predicted_at(costs, alpha, K):
    """theory.predicted_speedup (Jay Mody's arithmetic) with the measured scoring cost t_score(K)."""
    return theory.predicted_speedup(alpha=alpha, K=K, t_draft_s=costs.t_draft_s,
                                          t_target_s=costs.t_target_s, t_score_s=costs.t_score_s[K])


def predictions(costs, alpha, Ks):
    """Predicted speedup for each K, two ways: {label: [len(Ks)]}.

    - the arithmetic with the in-loop scoring cost t_score(K),
    - the same arithmetic pricing scoring K + 1 positions as one target step: that is exactly
      Leviathan et al.'s formula with c = t_draft / t_target (one curve, not two).
    """
    Ks = list(Ks)
    return {
        "in-loop t_score(K)": np.array([predicted_at(costs, alpha, K) for K in Ks]),
        "t_score = t_target (Leviathan et al.)": np.asarray(
            theory.predicted_speedup_leviathan(alpha, np.array(Ks), costs.c), np.float64),
    }


# ---------------------------------------------------------------------------------------------
# What one measurement returns
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AtK:
    """Speculative sampling with one K, over every repeat."""
    K: int
    seconds: Spread  # wall time of one run
    speedup_runs: Spread  # the ratios repeat by repeat (autoregressive / speculative, same repeat, same seed)
    predicted: float  # predicted_at(costs, alpha_hat, K), from the in-loop costs
    t_score_s: float  # median in-loop scoring call on K + 1 positions (first loops excluded)
    t_decide_s: float  # median in-loop accept/reject + roll-back, per loop (first loops excluded)
    tokens_per_loop: float  # tokens emitted / loops, all runs together
    n_accepted: int  # drafted tokens kept, all runs
    n_decisions: int  # accept/reject decisions made, all runs
    n_loops: int
    breakdown_s: dict  # mean seconds per run: draft_s + score_s + decide_s + other_s = mean wall time
    t_score_spread: Spread = None  # the in-loop scoring calls loop by loop: median (t_score_s) and IQR
    runs_s: tuple = ()  # each repeat's wall time, in repeat order: the pairs measure/compare.py judges
    tokens_per_loop_runs: tuple = ()  # each repeat's tokens per loop, in repeat order

    @property
    def speedup(self):
        """The measured speedup: the median of the repeat-by-repeat ratios (the module's docstring)."""
        return self.speedup_runs.median

    @property
    def alpha_hat(self):
        """The acceptance rate observed at this K alone (nan if no draft was proposed)."""
        return ratio_or_nan(self.n_accepted, self.n_decisions)


@dataclass(frozen=True)
class SpeedupMeasurement:
    """Autoregressive vs speculative sampling of the same N tokens: costs, speedups, breakdown."""
    draft: str
    target: str
    N: int
    repeats: int
    controls: dict  # temperature, top_k, top_p: the same for both algorithms
    autoregressive_s: Spread  # wall time of one autoregressive run
    autoregressive_breakdown_s: dict  # mean seconds per run: target_s (its calls) + other_s
    t_target_s: float  # median in-loop target step (prefill excluded)
    t_draft_s: float  # median in-loop drafted token, every K (first loops excluded)
    alpha_hat: float  # accepted / decisions, pooled over every K and repeat
    n_accepted: int
    n_decisions: int
    by_K: dict  # K -> AtK
    load_average_before: list  # the OS's 1, 5, 15 minute load averages (None where unknown)
    load_average_after: list
    autoregressive_runs_s: tuple = ()  # each repeat's autoregressive wall time, in repeat order

    @property
    def Ks(self):
        return sorted(self.by_K)

    @property
    def costs(self):
        """The in-loop costs, as the formulas take them."""
        return Costs(t_draft_s=self.t_draft_s, t_target_s=self.t_target_s,
                     t_score_s={K: at.t_score_s for K, at in self.by_K.items()})

    @property
    def best_K(self):
        """(measured best K, predicted best K)."""
        return (max(self.Ks, key=lambda K: self.by_K[K].speedup),
                max(self.Ks, key=lambda K: self.by_K[K].predicted))


def as_dict(measurement):
    """The measurement as JSON-ready data (K keys as strings): what bench.json, notebook 05 and
    weights/measurements.json hold."""
    data = dataclasses.asdict(measurement)
    data["by_K"] = {str(K): at for K, at in data["by_K"].items()}
    return data


def from_dict(data):
    """as_dict's inverse (also for data read back from JSON)."""
    def spreads(d, keys):
        return {k: Spread(**d[k]) if k in keys else v for k, v in d.items()}

    # "speedup" is derived from speedup_runs; a stored one (a ratio of medians, in files written
    # when that was the statistic) is not read
    def runs(d, keys):  # JSON lists back to tuples; files saved before runs were kept have none
        return {k: tuple(v) if k in keys else v for k, v in d.items()}

    by_K = {int(K): AtK(**runs(spreads({k: v for k, v in at.items() if k != "speedup" and v is not None},
                                       ("seconds", "speedup_runs", "t_score_spread")),
                               ("runs_s", "tokens_per_loop_runs")))
            for K, at in data["by_K"].items()}
    return SpeedupMeasurement(**runs({**spreads(data, ("autoregressive_s",)), "by_K": by_K}, ("autoregressive_runs_s",)))


# ---------------------------------------------------------------------------------------------
# From the runs' own timings to the figures
# ---------------------------------------------------------------------------------------------

def median_or_nan(values):
    return float(np.median(values)) if len(values) else float("nan")


def ratio_or_nan(accepted, decisions):
    """Accepted drafts / accept-reject decisions; nan (undefined) when no draft was judged."""
    return accepted / decisions if decisions else float("nan")


def speculative_breakdown(run):
    """Seconds of one speculative run: draft calls, scoring calls, decide/roll-back, and the rest."""
    parts = {"draft_s": sum(loop.t_draft_s for loop in run.loops),
             "score_s": sum(loop.t_score_s for loop in run.loops),
             "decide_s": sum(loop.t_decide_s for loop in run.loops)}
    return {**parts, "other_s": run.seconds - sum(parts.values())}


def mean_breakdown(breakdowns):
    return {key: float(np.mean([b[key] for b in breakdowns])) for key in breakdowns[0]}


def summarise(draft, target, N, controls, ar_runs, spec_runs, load_before=None, load_after=None):
    """The SpeedupMeasurement of finished runs: ar_runs [SamplingResult] one per repeat,
    spec_runs {K: [SpeculativeResult]} one per repeat, in the same order (same seeds)."""
    steady = {K: [loop for run in runs for loop in run.loops[1:]] for K, runs in spec_runs.items()}
    t_target_s = median_or_nan([t for run in ar_runs for t in run.token_times_s[1:]])
    t_draft_s = median_or_nan([loop.t_draft_s / loop.K for loops in steady.values() for loop in loops if loop.K])
    ar_seconds = [run.seconds for run in ar_runs]
    loops = {K: [loop for run in runs for loop in run.loops] for K, runs in spec_runs.items()}
    n_accepted = {K: sum(loop.n_accepted for loop in all_loops) for K, all_loops in loops.items()}
    n_decisions = {K: sum(loop.decisions for loop in all_loops) for K, all_loops in loops.items()}
    alpha_hat = ratio_or_nan(sum(n_accepted.values()), sum(n_decisions.values()))
    t_score_loops = {K: spread([loop.t_score_s for loop in steady[K] if loop.K == K]) for K in spec_runs}
    t_score_s = {K: t_score_loops[K].median for K in spec_runs}
    costs = Costs(t_draft_s, t_target_s, t_score_s)
    by_K = {}
    for K, runs in spec_runs.items():
        seconds = spread([run.seconds for run in runs])
        by_K[K] = AtK(
            K=K, seconds=seconds, speedup_runs=spread([ar.seconds / run.seconds for ar, run in zip(ar_runs, runs)]),
            predicted=float(predicted_at(costs, alpha_hat, K)), t_score_s=t_score_s[K],
            t_decide_s=median_or_nan([loop.t_decide_s for loop in steady[K]]),
            tokens_per_loop=sum(len(loop.tokens) for loop in loops[K]) / len(loops[K]),
            n_accepted=n_accepted[K], n_decisions=n_decisions[K], n_loops=len(loops[K]),
            breakdown_s=mean_breakdown([speculative_breakdown(run) for run in runs]), t_score_spread=t_score_loops[K],
            runs_s=tuple(run.seconds for run in runs), tokens_per_loop_runs=tuple(run.tokens_per_loop for run in runs))
    ar_breakdown = mean_breakdown([{"target_s": sum(run.token_times_s),
                                    "other_s": run.seconds - sum(run.token_times_s)} for run in ar_runs])
    return SpeedupMeasurement(
        draft=draft, target=target, N=N, repeats=len(ar_runs), controls=dict(controls),
        autoregressive_s=spread(ar_seconds), autoregressive_breakdown_s=ar_breakdown,
        t_target_s=t_target_s, t_draft_s=t_draft_s, alpha_hat=alpha_hat,
        n_accepted=sum(n_accepted.values()), n_decisions=sum(n_decisions.values()), by_K=by_K,
        load_average_before=load_before, load_average_after=load_after, autoregressive_runs_s=tuple(ar_seconds))


# ---------------------------------------------------------------------------------------------
# The measurement
# ---------------------------------------------------------------------------------------------

def measure_speedup(draft, target, ids, N, Ks, repeats=3, seed=0, warmup_tokens=4, temperature=1.0,
                    top_k=None, top_p=None, on_loop=None, progress=False, on_run=None):
    """Sample N tokens after `ids` autoregressively from `target` and speculatively with `draft`
    proposing K tokens per loop, for each K in Ks, `repeats` times interleaved (repeat r uses
    seed + r for every variant); returns a SpeedupMeasurement. warm_up runs first (not counted).
    `on_loop(trace)` sees every loop of the first speculative run (the command line streams its
    text); `progress` shows a bar over the runs. `draft` is a model or any draft
    speculative_sampling takes (picogpt/drafts.py); `on_run(K, result)` sees every timed run as
    it ends, K None for an autoregressive one (notebooks draw their bars, the command line keeps
    the first run of each to print). measure_chains is the same with a verifier per chain."""
    def on_chain_run(chain, run):
        if on_run is not None:
            on_run(None if chain is None else chain.K, run)

    return measure_chains(draft, target, ids, N, [Chain(int(K)) for K in Ks], repeats, seed, warmup_tokens,
                          temperature, top_k, top_p, on_loop, progress, on_chain_run)["token"]


def measure_chains(draft, target, ids, N, chains, repeats=3, seed=0, warmup_tokens=4, temperature=1.0,
                   top_k=None, top_p=None, on_loop=None, progress=False, on_run=None):
    """measure_speedup for chains (speculative.Chain: a K and a verifier) raced in the same
    interleaved repeats against the same autoregressive runs: {verify: SpeedupMeasurement of that
    verifier's chains}, so that two verifiers at one K are compared seed by seed (`speculate
    --compare --verify block`, the bench). `on_run(chain, result)` sees every timed run, chain None
    for an autoregressive one."""
    chains = list(dict.fromkeys(chains))
    controls = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    ar_runs, spec_runs, loads = timed_runs({chain: (draft, chain) for chain in chains}, target, ids, N, repeats, seed,
                                           warmup_tokens, controls, on_loop, progress, on_run)
    verifiers = dict.fromkeys(chain.verify for chain in chains)
    return {verify: summarise(draft.name, target.name, N, controls, ar_runs,
                              {chain.K: runs for chain, runs in spec_runs.items() if chain.verify == verify}, *loads)
            for verify in verifiers}


def timed_runs(variants, target, ids, N, repeats, seed, warmup_tokens, controls, on_loop=None, progress=False,
               on_run=None):
    """The runs of one measurement: variants {key: (draft, method)} are the speculative samplers to
    time, each method a value that samples (speculative.Chain: K and a verifier; tree.TreeShape: a
    token tree). measure_speedup's keys are the Ks, notebook 06 races several drafts,
    measure/trees.py chains against trees. A warm-up of each, then `repeats` interleaved rounds.
    Returns ([SamplingResult] per repeat, {key: [SpeculativeResult] per repeat}, (load average
    before, after))."""
    if not variants or repeats < 1 or N < 2:
        raise PicoGPTError(f"a speedup measurement needs at least one K (got {list(variants)}), repeats >= 1 "
                           f"(got {repeats}) and N >= 2 (got {N}): the first token reads the prompt, the costs "
                           "come after it")
    load_before = load_average()
    warm_up(variants, target, ids, min(N, warmup_tokens), seed, controls)
    ar_runs, spec_runs = interleaved_runs(variants, target, ids, N, repeats, seed, controls, on_loop, progress, on_run)
    return ar_runs, spec_runs, (load_before, load_average())


def warm_up(variants, target, ids, n_tokens, seed, controls):
    """A short run of each variant {key: (draft, method)}, not counted: it pays what a process pays once
    (the weights' first reads from disk, the compiled kernels' loading, the threads' start) before
    any timing. Every call shape the timed runs make is made here: one position, K + 1 positions,
    the prompt."""
    if n_tokens < 1:
        return
    autoregressive_sampling(target, ids, n_tokens, seed=seed, **controls)
    for draft, method in variants.values():
        method.sample(draft, target, ids, n_tokens, seed=seed, **controls)


def interleaved_runs(variants, target, ids, N, repeats, seed, controls, on_loop=None, progress=False, on_run=None):
    """([SamplingResult] per repeat, {key: [SpeculativeResult] per repeat}): per repeat, each
    variant {key: (draft, method)} and autoregressive sampling, all with seed + repeat, so that a busy
    moment hits every variant alike; the order alternates (the variants then autoregressive, then
    autoregressive then the variants backwards), so that a drift in the machine's speed favours no
    one (measure/compare.py judges these pairs). With `progress`, a bar over the runs on a terminal (after
    the first run when on_loop streams that one's text)."""
    order = [*variants, None]  # None: autoregressive
    runs = [(repeat, key) for repeat in range(repeats) for key in (order if repeat % 2 == 0 else order[::-1])]
    ar_runs, spec_runs = [], {key: [] for key in variants}
    bar = None
    for i, (repeat, key) in enumerate(runs):
        if progress and bar is None and (on_loop is None or i > 0):
            bar = tqdm(total=len(runs), initial=i, desc="timed runs", unit="run", file=sys.stderr, leave=False,
                       delay=0.5, disable=None)
        if key is None:
            ar_runs.append(run := autoregressive_sampling(target, ids, N, seed=seed + repeat, **controls))
        else:
            draft, method = variants[key]
            spec_runs[key].append(run := method.sample(draft, target, ids, N, seed=seed + repeat,
                                                       on_loop=on_loop if i == 0 else None, **controls))
        if on_run is not None:
            on_run(key, run)
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    return ar_runs, spec_runs


def gap_accounting(m):
    """Why the measured speedup differs from the predicted one, per K, as factors that multiply:
    measured = predicted x tokens x loop_time / autoregressive x rest, where
    - tokens: tokens per loop as measured / 1 + a + ... + a^K with a = alpha_hat (drafts are not
      accepted independently with one rate: easy and hard stretches of text);
    - loop_time: the loop the formula prices, K t_draft + t_score(K), / a loop's mean measured
      time (the first loop also reads the prompt; decide, roll-back and the rest; means vs medians);
    - autoregressive: N t_target / the mean autoregressive run (its prompt prefill, the rest);
    - rest: what these leave (the last loop's tokens past N; the measured speedup is a median of
      per-repeat ratios, the other factors are built from means).
    {K: {predicted, measured, tokens, loop_time, autoregressive, rest}}."""
    ar_mean_s = sum(m.autoregressive_breakdown_s.values())
    autoregressive = m.N * m.t_target_s / ar_mean_s
    out = {}
    for K, at in m.by_K.items():
        tokens = at.tokens_per_loop / float(theory.expected_tokens_per_loop(m.alpha_hat, K))
        loop_s = sum(at.breakdown_s.values()) / (at.n_loops / m.repeats)
        loop_time = (K * m.t_draft_s + at.t_score_s) / loop_s
        explained = at.predicted * tokens * loop_time / autoregressive
        out[K] = {"predicted": at.predicted, "measured": at.speedup, "tokens": tokens, "loop_time": loop_time,
                  "autoregressive": autoregressive, "rest": at.speedup / explained}
    return out


# ---------------------------------------------------------------------------------------------
# One speedup measurement as text
# ---------------------------------------------------------------------------------------------

NO_DRAFTS = ("no drafts proposed: alpha undefined; every loop was one plain target step, so the speedup is "
             "1 minus what looking for drafts and the loop's bookkeeping cost")


def speedup_text(at):
    """The measured speedup as every text prints it: '1.62x (IQR 1.55-1.70)', the median of the
    repeat-by-repeat ratios and their interquartile range (the module's docstring)."""
    runs = at.speedup_runs
    return f"{runs.median:.2f}x (IQR {runs.q1:.2f}-{runs.q3:.2f})"


def alpha_text(m):
    """'alpha_hat 0.88 (4242 decisions)', or the sentence for a draft that proposed nothing."""
    return f"alpha_hat {m.alpha_hat:.2f} ({m.n_decisions} decisions)" if m.n_decisions else NO_DRAFTS


def text_lines(m, label=None):
    """One end-to-end measurement as text: costs, then per K measured vs predicted and the breakdown."""
    label = label or f"{m.draft} -> {m.target}, temperature {m.controls.get('temperature', 1.0):g}"
    lines = [f"speculative vs autoregressive sampling, {label}, N={m.N}, {m.repeats} repeats: "
             f"{alpha_text(m)}; autoregressive "
             f"{m.autoregressive_s.median:.2f} s (IQR {m.autoregressive_s.q1:.2f}-{m.autoregressive_s.q3:.2f}); "
             f"load average {m.load_average_before} -> {m.load_average_after}",
             f"  in the loop: t_draft {m.t_draft_s * 1e3:.1f} ms per token, t_target {m.t_target_s * 1e3:.1f} ms",
             "  K   speculative s (IQR)    speedup (IQR of the per-repeat ratios)  predicted  t_score/t_target  "
             "per run: draft + score + decide + other s"]
    for K in m.Ks:
        at, b = m.by_K[K], m.by_K[K].breakdown_s
        lines.append(f"  {K:<3d} {at.seconds.median:6.2f} ({at.seconds.q1:.2f}-{at.seconds.q3:.2f})  "
                     f"{speedup_text(at):>39}  {at.predicted:8.2f}x  {at.t_score_s / m.t_target_s:16.2f}  "
                     f"{b['draft_s']:.2f} + {b['score_s']:.2f} + {b['decide_s']:.3f} + {b['other_s']:.3f}")
    best = compare.best_line({K: speedups_by_repeat(m, K) for K in m.Ks}, label=lambda K: f"K = {K}")
    return lines + ["  why measured and predicted differ (gap_accounting):", *gap_lines(m), f"  the best K: {best}"]


def gap_lines(m):
    """speedup.gap_accounting as text, one line per K."""
    lines = ["  K   predicted  measured  measured/predicted = tokens x loop time / autoregressive x rest"]
    for K, g in gap_accounting(m).items():
        lines.append(f"  {K:<3d} {g['predicted']:7.2f}x  {g['measured']:7.2f}x  {g['measured'] / g['predicted']:17.2f}"
                     f"   = {g['tokens']:.2f} x {g['loop_time']:.2f} / {g['autoregressive']:.2f} x {g['rest']:.2f}")
    return lines


def speedups_by_repeat(m, K):
    """Autoregressive seconds / speculative seconds at K, repeat by repeat ((): saved without repeats)."""
    return ratios_by_repeat(m.autoregressive_runs_s, m.by_K[K].runs_s)


def ratios_by_repeat(autoregressive_runs_s, runs_s):
    """Autoregressive seconds / a variant's, repeat by repeat ((): either saved without its repeats)."""
    if not runs_s or len(runs_s) != len(autoregressive_runs_s):
        return ()
    return tuple(ar / s for ar, s in zip(autoregressive_runs_s, runs_s))


def versus_autoregressive(m, K, name=None):
    """measure/compare.py's comparison of speculative sampling at K (named `name`) against
    autoregressive sampling, repeat by repeat; None for results saved without their repeats."""
    at = m.by_K[K]
    if not at.runs_s or len(at.runs_s) != len(m.autoregressive_runs_s):
        return None
    return compare.compare(name or f"speculative sampling (K = {K})", at.runs_s, "autoregressive sampling",
                           m.autoregressive_runs_s)


def versus(a, a_at, b, b_at, words=compare.TIME):
    """measure/compare.py's comparison of two variants measured in the same repeats (AtK, or a
    tree's Variant), named a and b: their times (words TIME) or tokens per loop (TOKENS_PER_CALL); None
    for results saved without their repeats."""
    key = "runs_s" if words.lower_is_better else "tokens_per_loop_runs"
    a_runs, b_runs = getattr(a_at, key), getattr(b_at, key)
    if not a_runs or len(a_runs) != len(b_runs):
        return None
    return compare.compare(a, a_runs, b, b_runs, words)


def busy_warning(measurement, cores):
    """machine.busy_warning for the load averages read before and after `measurement`."""
    return machine.busy_warning([measurement.load_average_before, measurement.load_average_after], cores)
