"""The bench's results written out: JSON and a figure (in a scratch folder, or in benchmarks/
with `--save`: measure/results.py says where), and the text `python -m picogpt bench` prints.
The repository's documents are rendered from the committed JSON by tools/render_docs.py."""

import json
from pathlib import Path

import numpy as np

from ..io.atomic import atomic_write, write_text_atomically
from ..measure import compare, speedup, trees
from ..measure.results import scratch_dir


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

ENGINES = {"picogpt": ("-o", "C0"), "picogpt-plain": (":s", "C7")}  # engine: (line style, colour) in the figure


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
        # measure/speedup.py's statistic: the median of the repeat-by-repeat ratios, whiskers at their quartiles
        speedups = [m.by_K[K].speedup for K in Ks]
        low = [s - m.by_K[K].speedup_runs.q1 for s, K in zip(speedups, Ks)]
        high = [m.by_K[K].speedup_runs.q3 - s for s, K in zip(speedups, Ks)]
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
             f"{machine.get('kernel', 'numpy')} kernel for a few rows (fast/compiled.py), numpy "
             f"{machine['versions']['numpy']}, BLAS {machine['blas'].get('name')} "
             f"({machine['blas'].get('runtime core')}); load average "
             f"{results['load_average_before']} -> {results['load_average_after']}",
             f"bandwidth ceiling, one-row products over {c['bytes'] / 1e9:.2f} GB: " + ceiling_text(c),
             "every figure below was measured in this run (nothing is read from committed results): a model's "
             "floor is its bytes per token at the ceiling measured beside it, the fastest a decode could read "
             "them; 'x floor' is a decode's time in floors", ""]
    for label, m in results["models"].items():
        r = m["ready"]
        made = f"; {r['bytes_written_beside_checkpoint']:,} bytes written beside the checkpoint"
        lines += [f"{label} ({m['source']}): {m['weight_bytes_per_token'] / 1e9:.2f} GB read per token; "
                  f"ceiling beside it {ceiling_text(m['ceiling'])}; floor {m['floor_s'] * 1e3:.1f} ms",
                  f"  ready: load {r['load_s']:.2f} s + prepare {r['prepare_s']:.2f} s = {r['ready_s']:.2f} s{made}; "
                  f"first token {r['first_token_s']:.2f} s; "
                  f"plain path first token {r['plain_first_token_s']:.2f} s"]
        for engine, e in m["engines"].items():
            decode = ", ".join(f"ctx {ctx}: {d['median_s'] * 1e3:.1f} ms = {d['gb_per_s']:.1f} GB/s "
                               f"({d['vs_floor']:.2f}x floor)" for ctx, d in e["decode"].items())
            lines.append(f"  {engine:17s} decode {decode}")
            if e["score"]:
                score = " ".join(f"{n}:{v['ratio_to_decode']:.2f}" for n, v in e["score"].items())
                lines.append(f"  {'':17s} K+1 positions: time / decode  {score}")
            first = e["decode"][min(e["decode"])]
            if "after_pause" in first:
                five = e["score"].get(5, {}).get("after_pause")
                lines.append(f"  {'':17s} first call after the pause: decode {first['after_pause']['median_s'] * 1e3:.1f} ms"
                             + (f", 5 positions {five['ratio_to_decode']:.2f}x that" if five else ""))
    for label, m in measurements(results):
        lines += ["", *speedup.text_lines(m, label)]
    for entry in results.get("speculative", []):
        if "block" in entry:
            lines += ["", *verifier_verdicts(speedup.from_dict(entry["measurement"]), speedup.from_dict(entry["block"]))]
    for entry in results.get("trees", []):
        lines += ["", *trees.text_lines(trees.from_dict(entry["trees"]))]
    lines.append("")
    lines += [f"note: {n}" for n in results["notes"]]
    return "\n".join(lines)


def ceiling_text(ceiling):
    return f"{ceiling['gb_per_s']:.1f} GB/s (" + ", ".join(
        f"{name} {way['gb_per_s']:.1f}" for name, way in ceiling["ways"].items()) + ")"


def verifier_verdicts(token, block):
    """Block verification against token by token at the bench's block K, pair by pair
    (measure/compare.py): on tokens per target call, then on time."""
    K = block.Ks[0]
    if K not in token.by_K:
        return [f"block verification at K = {K}: token by token not measured at that K, nothing to pair it with"]
    return [f"block verification against token by token, {block.draft} -> {block.target}, "
            f"T={block.controls['temperature']:g}, K = {K}, the same repeats:",
            *("  " + compare.sentence(speedup.versus("block verification", block.by_K[K], "token by token",
                                                     token.by_K[K], words))
              for words in (compare.TOKENS_PER_CALL, compare.TIME))]


def measurements(results):
    """[(label, SpeedupMeasurement)] of the end-to-end section, read back as notebook 05 reads them."""
    found = []
    for entry in results.get("speculative", []):
        m = speedup.from_dict(entry["measurement"])
        found.append((f"{m.draft} -> {m.target}, T={m.controls['temperature']:g}", m))
    return found
