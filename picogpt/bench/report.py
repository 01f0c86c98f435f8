"""The bench's results written out and read back: JSON and a figure (in a scratch folder, or in
benchmarks/ with `--save`), the text `python -m picogpt bench` prints, the text of one speedup
measurement, and the reading of the committed benchmarks/bench.json (notebook 05 reads it).
The Markdown documents rendered from the committed JSON are docs.py's."""

import json
from pathlib import Path

import numpy as np

from ..errors import PicoGPTError
from ..io.atomic import atomic_write, write_text_atomically
from ..io.registry import SOURCE_TREE, in_source_checkout, user_cache_dir
from ..perf import speedup

BENCH_DIR = SOURCE_TREE / "benchmarks"  # the committed results: written only by `bench --save`
BENCH_JSON = BENCH_DIR / "bench.json"


def scratch_dir():
    """Where `python -m picogpt bench` writes unless told to save: build/bench/ of the source
    checkout (git ignores build/), else the user's cache folder. A measurement never changes
    the repository's files unless asked to (`--save`)."""
    if in_source_checkout():
        return SOURCE_TREE / "build" / "bench"
    return user_cache_dir("bench", "the bench's --out")


def committed_dir():
    """benchmarks/ of the source checkout, where `--save` writes; an error for an installed wheel."""
    if not in_source_checkout():
        raise PicoGPTError("bench --save writes the repository's benchmarks/ folder, and picogpt runs from an "
                           "installed package here: run it from a clone (pip install -e .), or use --out DIR")
    return BENCH_DIR


def results_path(name, save=False, out=None):
    """Where a measuring tool writes its results file `name`: `out` if given, else benchmarks/
    when the user asks to commit it (`save`), else the scratch folder (nothing committed changes)."""
    if out:
        return Path(out)
    return (committed_dir() if save else scratch_dir()) / name


def to_json(results):
    def keys_to_str(node):
        if isinstance(node, dict):
            return {str(k): keys_to_str(v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [keys_to_str(v) for v in node]
        if isinstance(node, np.generic):
            return node.item()
        return node
    return json.dumps(keys_to_str(results), indent=1)


def save(results, folder=None, stem="bench"):
    """Write <stem>.json and (with matplotlib) <stem>.png into folder (default: scratch_dir()),
    each atomically (io/atomic.py: a full disk or a kill leaves the previous file whole);
    returns their paths."""
    folder = Path(folder or scratch_dir())
    folder.mkdir(parents=True, exist_ok=True)
    paths = [write_text_atomically(folder / f"{stem}.json", to_json(results) + "\n")]
    try:
        with atomic_write(folder / f"{stem}.png") as png:
            plot(results, png)
        paths.append(folder / f"{stem}.png")
    except ImportError:
        results["notes"].append("matplotlib not installed: no figure")
    return paths


# ---------------------------------------------------------------------------------------------
# The figure
# ---------------------------------------------------------------------------------------------

ENGINES = {"picogpt": ("-o", "C0"), "picogpt-in-memory": ("-.D", "C2"), "picogpt-plain": (":s", "C7"),
           "torch": ("--^", "C1")}  # engine: (line style, colour) in the figure


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_score, ax_bw, ax_pred) = plt.subplots(1, 3, figsize=(16, 4.8))
    for label, m in results["models"].items():
        for engine, (style, _) in ENGINES.items():
            if engine in m["engines"] and m["engines"][engine]["score"]:
                score = m["engines"][engine]["score"]
                ax_score.plot([1, *score], [1, *(v["ratio_to_decode"] for v in score.values())], style,
                              label=f"{label} {engine}")
    ax_score.axhline(1, color="grey", lw=0.8)  # the price of one decoding step
    ax_score.set(xlabel="positions scored in one cached call (K + 1)", ylabel="time / one-token decode",
                 title="Scoring K+1 positions")
    ax_score.legend(fontsize=7)

    names, values, colors = [], [], []
    for label, m in results["models"].items():
        for engine, (_, color) in ENGINES.items():
            if engine in m["engines"]:
                decode = m["engines"][engine]["decode"]
                names.append(f"{label}\n{engine}")
                values.append(decode[min(decode)]["gb_per_s"])
                colors.append(color)
    ax_bw.bar(range(len(values)), values, color=colors)
    ceilings = [m["ceiling"]["gb_per_s"] for m in results["models"].values()
                for engine in ENGINES if engine in m["engines"]]
    ax_bw.plot(range(len(ceilings)), ceilings, "k_", ms=20, label="ceiling, measured beside it")
    ax_bw.set_xticks(range(len(values)), names, fontsize=6)
    ax_bw.set(ylabel="weight GB/s while decoding", title="Decode bandwidth (context 128)")
    ax_bw.legend(fontsize=7)

    for (label, m), color in zip(measurements(results), ("C0", "C1", "C2", "C3", "C4", "C5")):
        Ks = m.Ks
        # the ratio of the medians, with the IQR of the repeat-by-repeat ratios (which need not
        # contain it: a bar is drawn from the ratio to the far end of that range)
        speedups = [m.by_K[K].speedup for K in Ks]
        low = [max(0.0, s - m.by_K[K].speedup_runs.q1) for s, K in zip(speedups, Ks)]
        high = [max(0.0, m.by_K[K].speedup_runs.q3 - s) for s, K in zip(speedups, Ks)]
        ax_pred.errorbar(Ks, speedups, fmt="-o", color=color, yerr=[low, high], label=f"{label}: measured")
        ax_pred.plot(Ks, [m.by_K[K].predicted for K in Ks], "--", color=color,
                     label=f"{label}: predicted from in-loop costs")
        ax_pred.set_xticks(Ks)
    ax_pred.axhline(1, color="grey", lw=0.8)
    ax_pred.set(xlabel="K (drafted tokens per loop)", ylabel="speedup over autoregressive (x)",
                title="Speculative sampling, measured (IQR) vs predicted")
    if ax_pred.get_legend_handles_labels()[0]:
        ax_pred.legend(fontsize=6)
    fig.suptitle(f"picogpt bench, {results['date_utc']}, {results['machine']['cpu']}, "
                 f"{results['machine']['threads_used']} threads, {results['machine'].get('kernel', 'numpy')} kernel", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------
# The text `python -m picogpt bench` prints
# ---------------------------------------------------------------------------------------------

def table(results):
    """The figures as text lines (what `python -m picogpt bench` prints)."""
    machine, c = results["machine"], results["ceiling"]
    lines = [f"machine: {machine['cpu']}, {machine['threads_used']} threads, "
             f"{machine.get('kernel', 'numpy')} kernel for a few rows (perf/compiled.py), numpy "
             f"{machine['versions']['numpy']}, BLAS {machine['blas'].get('name')} "
             f"({machine['blas'].get('runtime core')}); load average "
             f"{results['load_average_before']} -> {results['load_average_after']}",
             f"bandwidth ceiling, one-row products over {c['bytes'] / 1e9:.2f} GB: " + ceiling_text(c), ""]
    for label, m in results["models"].items():
        r = m["ready"]
        made = f"; {r['bytes_written_beside_checkpoint']:,} bytes written beside the checkpoint"
        if "in_memory_copy_s" in r:
            made += (f"; in_memory='background': ready {r['in_memory_ready_s']:.2f} s, "
                     f"copy done {r['in_memory_copy_s']:.1f} s")
        lines += [f"{label} ({m['source']}): {m['weight_bytes_per_token'] / 1e9:.2f} GB read per token; "
                  f"ceiling beside it {ceiling_text(m['ceiling'])}; floor {m['floor_s'] * 1e3:.1f} ms",
                  f"  ready: load {r['load_s']:.2f} s + prepare {r['prepare_s']:.2f} s = {r['ready_s']:.2f} s{made}; "
                  f"first token {r['first_token_s']:.2f} s; "
                  f"plain path first token {r['plain_first_token_s']:.2f} s"]
        for engine, e in m["engines"].items():
            decode = ", ".join(f"ctx {ctx}: {d['median_s'] * 1e3:.1f} ms = {d['gb_per_s']:.1f} GB/s "
                               f"({d['vs_floor']:.2f}x floor)" for ctx, d in e["decode"].items())
            huge = e.get("huge_page_fraction")
            pages = f"; {huge:.0%} of its weights in 2 MB pages" if huge is not None else ""
            lines.append(f"  {engine:17s} decode {decode}{pages}")
            if e["score"]:
                score = " ".join(f"{n}:{v['ratio_to_decode']:.2f}" for n, v in e["score"].items())
                lines.append(f"  {'':17s} K+1 positions: time / decode  {score}")
            first = e["decode"][min(e["decode"])]
            if "after_pause" in first:
                five = e["score"].get(5, {}).get("after_pause")
                lines.append(f"  {'':17s} first call after the pause: decode {first['after_pause']['median_s'] * 1e3:.1f} ms"
                             + (f", 5 positions {five['ratio_to_decode']:.2f}x that" if five else ""))
        memory = m.get("memory_while_timing")
        if memory and (memory.get("pgscan_file") or memory.get("pgmajfault")):
            lines.append(f"  while timing: {memory.get('pgscan_file', 0):,} page-cache pages scanned for reclaim, "
                         f"{memory.get('pgmajfault', 0):,} major faults (free memory at the start "
                         f"{memory['free_gb_before']:.1f} GB)")
        evicted = [file for file, fraction in m["page_cache_after"].items() if fraction is not None and fraction < 0.99]
        if evicted:
            lines.append(f"  warning: partly evicted from the page cache while measuring: {', '.join(evicted)}")
        for key in ("torch_skipped", "in_memory_skipped"):
            if key in m:
                lines.append(f"  {key.replace('_', ' ')}: {m[key]}")
    for label, m in measurements(results):
        lines += ["", *text_lines(m, label)]
    lines.append("")
    lines += [goal_line(g) for g in results["goals"] if g["met"] is not None]
    unmeasured = [g for g in results["goals"] if g["met"] is None]
    if unmeasured:
        lines.append(f"{len(unmeasured)} of {len(results['goals'])} goals not measured in this run "
                     "(benchmarks/goals.json; the bench's default models measure them all)")
    lines += [f"note: {n}" for n in results["notes"]]
    return "\n".join(lines)


def ceiling_text(ceiling):
    return f"{ceiling['gb_per_s']:.1f} GB/s (" + ", ".join(
        f"{name} {way['gb_per_s']:.1f}" for name, way in ceiling["ways"].items()) + ")"


def measurements(results):
    """[(label, SpeedupMeasurement)] of the end-to-end section, read back as notebook 05 reads them."""
    found = []
    for entry in results.get("speculative", []):
        m = speedup.from_dict(entry["measurement"])
        found.append((f"{m.draft} -> {m.target}, T={m.controls['temperature']:g}", m))
    return found


def goal_value(value, unit):
    """A goal's figure in its unit: '2.21x', '4%', '0 bytes', '0.51 s', '6.23 GB'."""
    if unit == "%":
        return f"{value * 100:.0f}%"
    if unit == "bytes":
        return f"{int(value):,} bytes"
    if not unit and abs(value) < 1:
        return f"{value:.3f}"  # a ratio below 1 (c): a third digit, so 0.085 does not print as 0.09
    return f"{value:.2f}{unit}"


def goal_line(g):
    """One scored goal in plain words, as the bench prints it."""
    unit = g.get("unit", "")
    limit = f"{g['direction'].replace('_', ' ')} {goal_value(g['limit'], unit)}"
    if g["met"] is None:
        elsewhere = f"; {g['measured_by']} measures it" if g.get("measured_by") else ""
        return f"goal not measured in this run: {g['goal']} (goal: {limit}{elsewhere})"
    source = f"; from {g['measured_by']}" if g.get("measured_by") else ""
    return f"goal {'met' if g['met'] else 'missed'}: {g['goal']}: {goal_value(g['value'], unit)} (goal: {limit}{source})"


# ---------------------------------------------------------------------------------------------
# One speedup measurement (perf/speedup.py) as text
# ---------------------------------------------------------------------------------------------

def text_lines(m, label=None):
    """One end-to-end measurement as text: costs, then per K measured vs predicted and the breakdown."""
    label = label or f"{m.draft} -> {m.target}, temperature {m.controls.get('temperature', 1.0):g}"
    lines = [f"speculative vs autoregressive sampling, {label}, N={m.N}, {m.repeats} repeats: "
             f"alpha_hat {m.alpha_hat:.2f} ({m.n_decisions} decisions); autoregressive "
             f"{m.autoregressive_s.median:.2f} s (IQR {m.autoregressive_s.q1:.2f}-{m.autoregressive_s.q3:.2f}); "
             f"load average {m.load_average_before} -> {m.load_average_after}",
             f"  in the loop: t_draft {m.t_draft_s * 1e3:.1f} ms per token, t_target {m.t_target_s * 1e3:.1f} ms",
             "  K   speculative s (IQR)    measured  predicted  t_score/t_target  "
             "per run: draft + score + decide + other s"]
    for K in m.Ks:
        at, b = m.by_K[K], m.by_K[K].breakdown_s
        lines.append(f"  {K:<3d} {at.seconds.median:6.2f} ({at.seconds.q1:.2f}-{at.seconds.q3:.2f})  "
                     f"{at.speedup:7.2f}x  {at.predicted:8.2f}x  {at.t_score_s / m.t_target_s:16.2f}  "
                     f"{b['draft_s']:.2f} + {b['score_s']:.2f} + {b['decide_s']:.3f} + {b['other_s']:.3f}")
    return lines + ["  why measured and predicted differ (gap_accounting):", *gap_lines(m)]


def gap_lines(m):
    """speedup.gap_accounting as text, one line per K."""
    lines = ["  K   predicted  measured  measured/predicted = tokens x loop time / autoregressive x rest"]
    for K, g in speedup.gap_accounting(m).items():
        lines.append(f"  {K:<3d} {g['predicted']:7.2f}x  {g['measured']:7.2f}x  {g['measured'] / g['predicted']:17.2f}"
                     f"   = {g['tokens']:.2f} x {g['loop_time']:.2f} / {g['autoregressive']:.2f} x {g['rest']:.2f}")
    return lines


def busy_warning(measurement, cores):
    """A sentence if the machine was busy while measuring (load average above its cores), else ''."""
    loads = [load[0] for load in (measurement.load_average_before, measurement.load_average_after) if load]
    if loads and max(loads) > cores:
        return (f"warning: the machine was busy (load average up to {max(loads):.1f} on {cores} cores): "
                "other programs shared the CPU, so these timings are noisier and slower than idle")
    return ""


# ---------------------------------------------------------------------------------------------
# Reading what `python -m picogpt bench --save` committed
# ---------------------------------------------------------------------------------------------

def bench_measurements(path=BENCH_JSON):
    """The speculative-sampling measurements of benchmarks/bench.json: ([(SpeedupMeasurement,
    weights source)], a line saying when and where), or ([], why there are none)."""
    path = Path(path)
    if not path.exists():
        return [], (f"{path.name} not found: speculative sampling at GPT-2's shapes is not measured yet "
                    "(run: python -m picogpt bench --save)")
    try:
        results = json.loads(path.read_text())
        entries = results.get("speculative")
        if not isinstance(entries, list) or not entries:
            return [], (f"{path.name} holds no end-to-end speculative-sampling measurement of this kind "
                        "(run: python -m picogpt bench --save)")
        found = [(speedup.from_dict(entry["measurement"]), entry["source"]) for entry in entries]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return [], f"{path.name} cannot be read as the bench's results ({type(e).__name__}: {e})"
    machine = results.get("machine", {})
    kernel = machine.get("kernel", "numpy")  # results without the field ran NumPy's tiles
    return found, (f"measured {results.get('date_utc', '(undated)')} on {machine.get('cpu', 'an unrecorded machine')}, "
                   f"{kernel} kernel for the few-row products")
