"""The sentences of measured speed in notebooks 02, 05 and 06, so that their prose never quotes a
figure: whether a decoding step's pace is set by reading the weights, what a scoring call costs
against calls of one position, whether a run resolves its best choice (a K, a number of layers, a
strategy), what the bench committed (benchmarks/bench.json) for GPT-2 small and XL, and others'
published figures of the same pair, each printed with what differs from ours. Pure functions of
the measurements handed in (and of the committed bench file); the measuring is measure/'s.
"""

import json
import math
from pathlib import Path

from ..errors import PicoGPTError
from ..measure import speedup
from ..measure.results import BELOW_FLOOR, BENCH_JSON, bench_measurements

# ---------------------------------------------------------------------------------------------
# Does a measurement resolve its best choice?
# ---------------------------------------------------------------------------------------------

def indistinguishable_from_best(runs):
    """(the best choice, [every choice the repeats cannot tell from it]) of runs {choice: Spread of
    its repeat-by-repeat speedups}: the best has the highest median, and a choice is kept when the
    upper quartile of its speedups reaches the best's lower quartile. A rough test, not a
    significance test: with 3 to 5 repeats, overlapping interquartile ranges mean that these runs
    do not order the two."""
    best = max(runs, key=lambda choice: runs[choice].median)
    return best, [choice for choice in runs if runs[choice].q3 >= runs[best].q1]


def resolution_line(runs, what, repeats, N, name=str):
    """Whether these repeats resolve the best of runs {choice: Spread of speedups}, as a sentence:
    'resolved: ...', 'not resolved: ...', or 'nothing to resolve: ...' when one choice was measured.
    `what` names a choice ('K', 'L'), name(choice) prints one."""
    best, tied = indistinguishable_from_best(runs)
    size = f"{repeats} repeats of {N} tokens"
    if len(runs) == 1:
        return f"nothing to resolve: {what} = {name(best)} is the only one measured ({size})"
    if tied == [best]:
        return (f"resolved: the interquartile range of every other {what}'s repeat-by-repeat speedups lies below "
                f"{what} = {name(best)}'s ({size})")
    names = [name(choice) for choice in tied]
    separator = "; " if any("," in n for n in names) else ", "  # names with commas of their own
    return (f"not resolved: {what} in [{separator.join(names)}] cannot be told apart by "
            f"{size} (their repeat-by-repeat interquartile ranges overlap the best's)")


def best_K_lines(m):
    """The best K measured and predicted, and whether these repeats can tell the best K apart."""
    runs = {K: m.by_K[K].speedup_runs for K in m.Ks}
    best, tied = indistinguishable_from_best(runs)
    predicted = m.best_K[1]
    line = resolution_line(runs, "K", m.repeats, m.N)
    if tied != [best]:
        line += "; the prediction " + ("falls among them" if predicted in tied else "falls outside them")
    return [f"best K measured: {best} ({m.by_K[best].speedup:.2f}x); best K predicted (in-loop t_score(K)): "
            f"{predicted} ({m.by_K[predicted].predicted:.2f}x)", line]


# ---------------------------------------------------------------------------------------------
# Notebook 02: what sets the pace of decoding, and what one call of several positions saves
# ---------------------------------------------------------------------------------------------

def percent(fraction):
    """A fraction as the whole percent printed beside it (0.654 -> 65): verdicts read this number,
    so the words and the figure printed beside them cannot disagree."""
    return round(100 * fraction)


def pace_line(name, nbytes, seconds_per_token, bandwidth_gbs, busy=False):
    """What sets the pace of one model's decoding, as a sentence: the rate at which it read its
    weights (nbytes per token, one token every seconds_per_token) as a share of the measured memory
    bandwidth. Reading them once at that bandwidth takes that share of its time per token; above
    100% it read them faster than memory delivers, so they came, at least in part, from the CPU's
    caches. `busy`: the machine was busy while measuring (machine.busy_warning), which slows the
    bandwidth measurement (all cores) and decoding differently, so the sentence says the share may be off."""
    if not (nbytes > 0 and seconds_per_token > 0 and bandwidth_gbs > 0
            and math.isfinite(seconds_per_token) and math.isfinite(bandwidth_gbs)):
        raise PicoGPTError(f"pace_line needs positive finite numbers, got nbytes={nbytes}, "
                           f"seconds_per_token={seconds_per_token}, bandwidth_gbs={bandwidth_gbs}")
    achieved_gbs = nbytes / seconds_per_token / 1e9
    share = percent(achieved_gbs / bandwidth_gbs)
    said = (f"{name:12} reads its {nbytes / 1e6:,.1f} MB of weights at {achieved_gbs:,.1f} GB/s ({share:,}% of the "
            f"measured {bandwidth_gbs:,.1f} GB/s)")
    caveat = ("; but the machine was busy, which slows the bandwidth measurement and decoding differently, "
              "so this share may be off" if busy else "")
    if share > 100:
        return (f"{said}: faster than memory delivers them, so they come, at least in part, from the CPU's caches "
                f"(its time per token is below the memory floor){caveat}")
    reading = f"{said}: reading them once at that bandwidth takes {share}% of its time per token"
    if share > 50:
        return f"{reading}, so reading the weights sets its pace{caveat}"
    if share == 50:
        return f"{reading}, and per-call overhead the other 50%{caveat}"
    return f"{reading}, so the other {100 - share}%, per-call overhead, sets its pace{caveat}"


def scoring_line(n, one_call, calls_of_one):
    """n new positions scored in one call against n calls of one position, each a Spread of
    seconds over the repeats, as a sentence: both medians with their interquartile ranges, how many
    times cheaper the cheaper way was, and whether the repeats tell the two apart (the ranges do
    not overlap)."""
    def ms(run):
        return f"{run.median * 1e3:.1f} ms ({run.q1 * 1e3:.1f}-{run.q3 * 1e3:.1f})"

    said = f"{n} new positions: {ms(one_call)} in one call, {ms(calls_of_one)} as {n} calls of one"
    if one_call.q3 < calls_of_one.q1 or calls_of_one.q3 < one_call.q1:
        cheaper, dearer, how = ((one_call, calls_of_one, "one call") if one_call.median < calls_of_one.median
                                else (calls_of_one, one_call, f"{n} calls of one"))
        return (f"{said}: {how} is {dearer.median / cheaper.median:.2f}x cheaper "
                "(medians; the interquartile ranges do not overlap)")
    return f"{said}: the interquartile ranges overlap, so these repeats do not tell the two apart"


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
    per loop and speedup over autoregressive sampling (the median of the repeat-by-repeat ratios,
    with their interquartile range), and whether these repeats order the verifiers."""
    from ..measure.speedup import speedup_text
    m = next(iter(measurements.values()))
    lines = [f"{m.draft} -> {m.target}, temperature {m.controls.get('temperature', 1.0):g}, K = {K}, N = {m.N}, "
             f"{m.repeats} repeats interleaved, the same seeds: autoregressive {m.autoregressive_s.median:.2f} s "
             f"(IQR {m.autoregressive_s.q1:.2f}-{m.autoregressive_s.q3:.2f})"]
    for verify, v in measurements.items():
        at = v.by_K[K]
        lines.append(f"  {VERIFIER_NAMES[verify]:<20} {at.tokens_per_loop:.2f} tokens per loop, speedup {speedup_text(at)}")
    if {"token", "block"} <= set(measurements):
        token, block = (measurements[v].by_K[K].tokens_per_loop for v in ("token", "block"))
        lines.append(f"  block verification emitted {block / token - 1:+.1%} tokens per target call")
    runs = {VERIFIER_NAMES[verify]: v.by_K[K].speedup_runs for verify, v in measurements.items()}
    return lines + ["  " + resolution_line(runs, "verifier", m.repeats, m.N)]
