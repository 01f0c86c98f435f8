"""The sentences of measured speed in notebooks 02, 05 and 06, so that their prose never quotes a
figure: whether a decoding step's pace is set by reading the weights, what a scoring call costs
against calls of one position, whether a run resolves its best choice (a K, a number of layers, a
strategy), what the bench committed (benchmarks/bench.json) for GPT-2 small and XL, and others'
published figures of the same pair, each printed with what differs from ours. Pure functions of
the measurements handed in (and of the committed bench file); the measuring is measure/'s.
"""

import json
from pathlib import Path

import numpy as np

from ..errors import PicoGPTError
from ..measure import compare, speedup
from ..measure.results import BELOW_FLOOR, BENCH_JSON, bench_measurements
from ..measure.timing import spread

# ---------------------------------------------------------------------------------------------
# Does a measurement resolve its best choice?
# ---------------------------------------------------------------------------------------------

def indistinguishable_from_best(runs):
    """(the best choice, [the best and every choice these pairs cannot tell from it]) of runs
    {choice: each repeat's speedup over autoregressive sampling, in repeat order, the same repeats for
    every choice (speedup.speedups_by_repeat)}: the best has the highest median speedup, and a choice
    is kept unless measure/compare.best_of resolves the best as faster than it (a paired sign test,
    95% overall; the ratio of two speedups of one repeat is the ratio of the two times)."""
    best, comparisons = compare.best_of(runs, compare.SPEEDUP)
    return best, [best] + [choice for choice, c in comparisons.items() if not c.a_better]


def resolution_line(runs, what, repeats, N, name=str):
    """Whether these repeats resolve the best of runs {choice: each repeat's speedup}, as
    measure/compare.best_sentence says it: 'resolved: ...', 'not resolved: ...' (with about how many
    pairs would resolve it), or 'nothing to resolve: ...' when one choice was measured. `what` names
    a choice ('K', 'L'), name(choice) prints one; runs saved without their repeats are not judged."""
    return f"{compare.best_line(runs, label=lambda choice: f'{what} = {name(choice)}')} ({repeats} repeats of {N} tokens)"


def best_K_lines(m):
    """The best K measured and predicted, and whether these repeats can tell the best K apart."""
    runs = {K: speedup.speedups_by_repeat(m, K) for K in m.Ks}
    best, predicted = m.best_K
    line = resolution_line(runs, "K", m.repeats, m.N)
    if line.startswith("not resolved"):
        _, tied = indistinguishable_from_best(runs)
        line += "; the prediction " + ("falls among them" if predicted in tied else "falls outside them")
    return [f"best K measured: {best} ({m.by_K[best].speedup:.2f}x, the highest median speedup); best K predicted "
            f"(in-loop t_score(K)): {predicted} ({m.by_K[predicted].predicted:.2f}x)", line]


# ---------------------------------------------------------------------------------------------
# Notebook 02: what sets the pace of decoding, and what one call of several positions saves
# ---------------------------------------------------------------------------------------------

def pace_line(name, nbytes, seconds_per_token, bandwidth_gbs, busy=False):
    """What sets the pace of one model's decoding, as a sentence, from pairs measured side by side
    (machine.floor_beside_decode): seconds_per_token[i] a decode and bandwidth_gbs[i] the memory
    bandwidth of the same repeat. Per pair, the share of the decode that reading the weights once
    (nbytes) at that bandwidth takes; their median with its 95% interval (measure/compare.py's
    sign-test interval). A verdict only where the interval allows one: above half, reading the
    weights sets the pace; below half, per-call overhead does; a share above 100% is a decode faster
    than memory delivers (the weights came, at least in part, from the CPU's caches), from which no
    pace is read. `busy`: the machine was busy while measuring (machine.busy_warning)."""
    seconds_per_token, bandwidth_gbs = np.asarray(seconds_per_token, float), np.asarray(bandwidth_gbs, float)
    if not (nbytes > 0 and seconds_per_token.shape == bandwidth_gbs.shape and seconds_per_token.ndim == 1
            and len(seconds_per_token) and np.all(np.isfinite(seconds_per_token)) and np.all(seconds_per_token > 0)
            and np.all(np.isfinite(bandwidth_gbs)) and np.all(bandwidth_gbs > 0)):
        raise PicoGPTError(f"pace_line needs nbytes > 0 and pairs of positive finite seconds per token and GB/s, "
                           f"got nbytes={nbytes}, seconds_per_token={seconds_per_token}, bandwidth_gbs={bandwidth_gbs}")
    shares = 100 * nbytes / (bandwidth_gbs * 1e9) / seconds_per_token  # the floor / the decode, pair by pair, in %
    median, low, high, _ = compare.median_interval(shares)
    said = (f"{name:12} reads its {nbytes / 1e6:,.1f} MB of weights once a token: at the bandwidth measured beside "
            f"each decode, that takes {median:,.0f}% of its time per token (median of {len(shares)} pairs")
    caveat = ("; the machine was busy, which slows the bandwidth measurement (all cores) and decoding differently"
              if busy else "")
    if np.isnan(low):
        return (f"{said}; {len(shares)} pairs give no 95% interval, the sign test needs "
                f"{compare.fewest_pairs()}): no verdict{caveat}")
    boundary = 100 if low > 100 else 50  # the bound a verdict rests on is printed on its side of it
    said += f", 95% interval {share_text(low, boundary)}-{share_text(high, 50)}%)"
    if low > 100:
        return (f"{said}: faster than memory delivers them, so they come, at least in part, from the CPU's caches "
                f"(its time per token is below the memory floor), and no pace is read from it{caveat}")
    if low > 50:
        return f"{said}: more than half, so reading the weights sets its pace{caveat}"
    if high < 50:
        return f"{said}: less than half, so per-call overhead sets its pace{caveat}"
    return f"{said}: the interval holds half, so these pairs do not say which sets its pace{caveat}"


def share_text(percent, boundary):
    """A share in whole percent, or with the decimals that keep it off `boundary` (50.2 is not '50')."""
    for digits in (0, 1, 2, 4):
        text = f"{percent:,.{digits}f}"
        if float(text.replace(",", "")) != boundary:
            return text
    return repr(float(percent))


def scoring_line(n, one_call, calls_of_one):
    """n new positions scored in one call against n calls of one position, each way's seconds in
    every repeat (timing.scoring_seconds: paired, the order alternated), as a sentence: both medians
    with their interquartile ranges, then measure/compare.py's verdict on the pairs (which way is
    cheaper, by how much, with its 95% interval, or what would resolve it)."""
    def ms(values):
        run = spread(values)
        return f"{run.median * 1e3:.1f} ms ({run.q1 * 1e3:.1f}-{run.q3 * 1e3:.1f})"

    said = f"{n} new positions: {ms(one_call)} in one call, {ms(calls_of_one)} as {n} calls of one (medians, IQR)"
    verdict = compare.compare("one call", one_call, f"{n} calls of one", calls_of_one,
                              compare.Words(better="cheaper", worse="dearer"))
    return f"{said}: {compare.sentence(verdict)}"


# ---------------------------------------------------------------------------------------------
# What `python -m picogpt bench` committed
# ---------------------------------------------------------------------------------------------

def read_bench(path=BENCH_JSON):
    """benchmarks/bench.json as a dict, or None when it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def bench_pair_measurements(draft="gpt2", target="gpt2-xl", path=BENCH_JSON):
    """The bench's end-to-end measurements of this pair: [SpeedupMeasurement] (any temperature)."""
    found, _ = bench_measurements(path)
    return [m for m, _ in found if (m.draft, m.target) == (draft, target)]


def bench_source(bench, name):
    """Where the bench's weights of `name` came from ('random weights, published shapes', ...)."""
    return (bench or {}).get("models", {}).get(name, {}).get("source", "weights of unrecorded origin")


def decode_vs_floor_lines(name="gpt2-xl", path=BENCH_JSON):
    """How close the bench's one-token decode of `name` came to its memory floor (reading every
    weight once at the machine's measured bandwidth), in isolated calls and inside the sampling
    loop, as lines of text; or a line saying it is not measured."""
    bench = read_bench(path)
    model = (bench or {}).get("models", {}).get(name)
    if not model or "floor_s" not in model:
        return [f"{name}: not in {Path(path).name}; run python -m picogpt bench to measure it"]
    floor_s = model["floor_s"]
    decode = model.get("engines", {}).get("picogpt", {}).get("decode", {})
    lines = [f"{name} ({model.get('source', 'unrecorded weights')}), picogpt's fast path, from {Path(path).name} "
             f"({bench.get('machine', {}).get('cpu', 'an unrecorded machine')}): memory floor {floor_s * 1e3:.0f} ms per token"]
    multiples = []
    for context, run in sorted(decode.items(), key=lambda item: int(item[0])):
        multiples.append(run["median_s"] / floor_s)
        lines.append(f"  isolated one-token calls after {context} tokens: {run['median_s'] * 1e3:.0f} ms = "
                     f"{multiples[-1]:.2f} x the floor")
    for m in bench_pair_measurements(target=name, path=path):
        multiples.append(m.t_target_s / floor_s)
        lines.append(f"  inside the sampling loop (t_target, temperature {m.controls.get('temperature', 1.0):g}): "
                     f"{m.t_target_s * 1e3:.0f} ms = {multiples[-1]:.2f} x the floor")
    if min(multiples, default=1) < 1:
        lines.append(f"  under 1 x the floor: {BELOW_FLOOR} (the bench measured its ceiling, "
                     f"{bench.get('ceiling', {}).get('gb_per_s', float('nan')):.1f} GB/s, beside the isolated calls; "
                     "the loops ran minutes later), so these figures do not bound each other")
    return lines


def bench_best_K_lines(draft="gpt2", target="gpt2-xl", path=BENCH_JSON):
    """The bench's committed best K for the pair, at each temperature it ran, with its resolution."""
    found = bench_pair_measurements(draft, target, path)
    if not found:
        return [f"{draft} -> {target}: not in {Path(path).name}, not measured (run: python -m picogpt bench)"]
    bench = read_bench(path)
    lines = []
    for m in found:
        lines.append(f"the bench, {draft} -> {target} ({bench_source(bench, target)}), temperature "
                     f"{m.controls.get('temperature', 1.0):g}, alpha_hat {m.alpha_hat:.2f}, N = {m.N}, {m.repeats} repeats:")
        lines += ["  " + line for line in best_K_lines(m)]
    return lines


# ---------------------------------------------------------------------------------------------
# Others' published figures of GPT-2 small drafting for GPT-2 XL
# ---------------------------------------------------------------------------------------------

MODY = {  # jaymody/speculative-sampling, README.md (main branch), main.py's settings
    "source": "Jay Mody, github.com/jaymody/speculative-sampling, README",
    "autoregressive_s": 60.64, "speculative_s": 27.15, "N": 40, "K": 4,
    "setup": "real GPT-2 weights, temperature 0 (greedy), no KV cache (every step reruns the whole sequence), "
             "his machine",
}


def others_lines(m=None, label="picogpt"):
    """Mody's published figures beside a picogpt measurement `m` of the same pair (or the bench's
    at temperature 1 when m is None), each line saying what differs."""
    mody = MODY
    lines = [f"{mody['source']}: {mody['autoregressive_s']} s autoregressive, {mody['speculative_s']} s speculative "
             f"for N = {mody['N']}, K = {mody['K']}: {mody['autoregressive_s'] / mody['speculative_s']:.2f}x",
             f"  setup: {mody['setup']}"]
    if m is None:
        found = [x for x in bench_pair_measurements() if x.controls.get("temperature", 1.0) == 1.0]
        m, label = (found[0], "the bench") if found else (None, label)
    if m is None:
        return lines + ["picogpt: GPT-2 small -> XL not measured here (run: python -m picogpt bench)"]
    at = m.by_K.get(mody["K"])
    source = bench_source(read_bench(), m.target) if label == "the bench" else "the weights loaded here"
    lines.append(f"{label}: {m.draft} -> {m.target}, K = {mody['K']}: "
                 + (speedup.speedup_text(at) if at else "K = 4 not measured"))
    lines.append(f"  setup: {source}, temperature {m.controls.get('temperature', 1.0):g} (sampling: alpha_hat "
                 f"{m.alpha_hat:.2f} is set by how much the two models agree at that temperature), a KV cache, "
                 f"N = {m.N}, median of {m.repeats} repeats, {label}'s machine")
    lines.append("  so: different weights, decoding, caching and machines; compare what each ratio is made of, "
                 "not the two ratios")
    return lines


VERIFIER_NAMES = {"token": "token by token", "block": "block verification"}


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
        lines.append(f"  {VERIFIER_NAMES[verify]:<20} {at.tokens_per_loop:.2f} tokens per loop (all {m.repeats} runs together), "
                     f"speedup {speedup_text(at)}")
    if {"token", "block"} <= set(measurements):
        token, block = (measurements[v].by_K[K] for v in ("token", "block"))
        lines.append(f"  block verification emitted {block.tokens_per_loop / token.tokens_per_loop - 1:+.1%} tokens per "
                     "target call (all runs together)")
        lines.append("  " + split_line(token, block, m.repeats))
        for words in (compare.TOKENS_PER_CALL, compare.TIME):
            lines.append("  " + compare.sentence(versus(VERIFIER_NAMES["block"], block, VERIFIER_NAMES["token"], token, words)))
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
