"""The course's matplotlib figures: next-token bars, timings and attention (notebooks 01-02),
Theorem 1 (04), the speculative loop (03) and the speedup (05, 06), each labelled (axes with units,
legend clear of the bars, title). Every `plot_…(…, ax=None)` draws on the Axes you pass (to build
a grid of panels) or on a new figure, and returns it; the numbers come from `panels`.

Needs matplotlib (the `dev` extra); `import picogpt` does not import this module. Importing it
raises the figure resolution to DPI = 110, readable on a projector.
"""

import io
import textwrap

import numpy as np

from ..errors import PicoGPTError
from ..tree import ROOT
from .panels import (
    NOTHING_REJECTED,
    TEMPERATURES,
    identity_title,
    shown_tv,
    token_label,
    tokens_per_loop_counts,
    tokens_per_loop_pmf,
    top_tokens,
)

try:
    import matplotlib
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure
except ImportError:  # pragma: no cover - the dev extra installs it
    raise PicoGPTError("picogpt.course.figures needs matplotlib: pip install -e '.[dev]'") from None

DPI = 110
matplotlib.rcParams["figure.dpi"] = max(DPI, matplotlib.rcParams["figure.dpi"])
COLOURS = {"p": "tab:blue", "q": "tab:orange", "overlap": "tab:green", "excess": "tab:red", "empirical": "tab:purple"}


# ---------------------------------------------------------------------------------------------
# Figures of notebooks 01-02: next-token bars, timings, attention
# ---------------------------------------------------------------------------------------------

def new_ax(ax, figsize):
    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def plot_top_tokens(probs, tok, k=20, ax=None, title="Next-token distribution", label="probability",
                    reference=None, reference_label="before", ylabel="probability"):
    """Bar chart of the k most probable tokens. With `reference` (another distribution over the
    same vocabulary) the bars show *its* top k, drawn behind, so a reshaping is easy to see."""
    ax = new_ax(ax, (10, 3.5))
    ids = top_tokens(probs if reference is None else reference, k)
    x = np.arange(len(ids))
    if reference is not None:
        ax.bar(x, np.asarray(reference)[ids], color="lightgray", label=reference_label)
    ax.bar(x, np.asarray(probs)[ids], width=0.6 if reference is not None else 0.8, label=label)
    ax.set_xticks(x, [token_label(tok, i) for i in ids], rotation=60, ha="right")
    ax.set(xlabel="token (␣ = space)", ylabel=ylabel, title=title)
    ax.legend()
    return ax


def plot_seconds(x, series_s, ax=None, title="Time per token", xlabel="token position",
                 ylabel="time per token (ms)", marker="o"):
    """One line per entry of `series_s` {label: seconds at each x}, drawn in milliseconds."""
    ax = new_ax(ax, (7, 3.5))
    for label, seconds in series_s.items():
        ax.plot(x, 1e3 * np.asarray(seconds), marker=marker, label=label)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.set_ylim(bottom=0)
    ax.legend()
    return ax


def plot_seconds_spread(x, series, ax=None, title="", xlabel="", ylabel="time (ms)"):
    """One line per entry of `series` {label: [Spread of seconds] at each x}: the medians in
    milliseconds, whiskers at their quartiles."""
    ax = new_ax(ax, (7, 3.5))
    for label, runs in series.items():
        ax.errorbar(x, [1e3 * r.median for r in runs], yerr=1e3 * np.array(quartile_whiskers(runs)), fmt="o-",
                    capsize=3, label=label)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.set_ylim(bottom=0)
    ax.legend()
    return ax


def plot_grouped_bars(groups, series, ax=None, title="", ylabel="time (ms)", log=False):
    """Bars side by side: one group per entry of `groups`, one bar per entry of `series`
    {label: one value per group}, each bar annotated with its value."""
    ax = new_ax(ax, (7, 3.5))
    x = np.arange(len(groups))
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series.items()):
        bars = ax.bar(x + (i - (len(series) - 1) / 2) * width, values, width, label=label)
        ax.bar_label(bars, fmt="%.3g", fontsize=8)
    ax.set_xticks(x, groups)
    ax.set(ylabel=ylabel, title=title)
    if log:
        ax.set_yscale("log")
    ax.legend()
    return ax


def plot_attention(weights, labels, ax=None, title="Attention weights"):
    """Heatmap of one head's attention [n_seq, n_seq]: row = query position, column = key."""
    ax = new_ax(ax, (5, 4.5))
    image = ax.imshow(weights, cmap="viridis", vmin=0, vmax=1)
    ticks = np.arange(len(labels))
    ax.set_xticks(ticks, labels, rotation=60, ha="right")
    ax.set_yticks(ticks, labels)
    ax.set(xlabel="key: the token attended to", ylabel="query: the token attending", title=title)
    ax.figure.colorbar(image, ax=ax, label="attention weight (each row sums to 1)")
    return ax


# ---------------------------------------------------------------------------------------------
# Theorem 1 figures (notebooks 03-04)
# ---------------------------------------------------------------------------------------------

def all_tokens(shown, n_vocab):
    return np.arange(n_vocab) if shown is None else np.asarray(shown)


def token_axis(ax, labels, shown, n_vocab, masses):
    """Token labels on the x axis (labels[i] names token shown[i]); when only some tokens are
    shown, say how much of each distribution in `masses` ({name: [n_vocab]}) the others hold."""
    ax.set_xticks(np.arange(len(shown)), list(labels)[: len(shown)], rotation=45, ha="right")
    rest = n_vocab - len(shown)
    held = ", ".join(f"{name} {1 - d[shown].sum():.2f}" for name, d in masses.items())
    space_note = " (␣ = space)" if any("␣" in label for label in labels) else ""
    ax.set_xlabel(f"next token{space_note}" + (f"\n(the other {rest:,} tokens hold {held})" if rest else ""))


def room_for_legend(ax, *heights):
    """Raise the top of the y axis so that the legend fits above the tallest bar: 15% headroom plus
    12% per legend entry (never lowering it: axes sharing y keep the largest need)."""
    tallest = max(float(np.max(h)) for h in heights)
    n_entries = len(ax.get_legend_handles_labels()[0])
    needed = tallest * (1.15 + 0.12 * n_entries) if tallest > 0 else 1.0
    ax.set_ylim(0, max(needed, ax.get_ylim()[1]))
    ax.legend(fontsize="small", loc="upper left")


def plot_overlap(panel, labels, shown=None, drafted=None, ax=None):
    """p and q side by side, with min(p, q) — the mass that survives the accept test — hatched.
    `drafted` (an index into `shown`) marks the drafted token x̃."""
    ax = new_ax(ax, (6, 3.6))
    shown = all_tokens(shown, len(panel.p))
    x = np.arange(len(shown))
    ax.bar(x - 0.2, panel.p[shown], 0.4, color=COLOURS["p"], alpha=0.6, label="p (draft)")
    ax.bar(x + 0.2, panel.q[shown], 0.4, color=COLOURS["q"], alpha=0.6, label="q (target)")
    ax.bar(x, panel.overlap[shown], 0.8, fill=False, hatch="//", edgecolor=COLOURS["overlap"],
           label=f"min(p, q): Σ = P(accept) = {panel.p_accept:.3f}")
    if drafted is not None:
        p_x, q_x = panel.p[shown][drafted], panel.q[shown][drafted]
        ax.axvspan(drafted - 0.45, drafted + 0.45, color="gold", alpha=0.35, zorder=0,
                   label=f"drafted x̃: p = {p_x:.3g}, q = {q_x:.3g}, min(1, q/p) = {min(1, q_x / p_x):.3g}")
    token_axis(ax, labels, shown, len(panel.q), {"p": panel.p, "q": panel.q})
    ax.set(ylabel="probability", title="Accept x̃ ~ p with probability min(1, q/p)")
    room_for_legend(ax, panel.p[shown], panel.q[shown])
    return ax


def plot_residual(panel, labels, shown=None, highlight=None, ax=None):
    """max(0, q − p), the mass the accept test leaves missing, and (q − p)+, that mass normalised:
    what a rejection resamples from. `highlight` (an index into `shown`) marks the resampled token."""
    ax = new_ax(ax, (6, 3.6))
    shown = all_tokens(shown, len(panel.p))
    x = np.arange(len(shown))
    ax.bar(x - 0.2, panel.excess[shown], 0.4, color=COLOURS["excess"], alpha=0.6,
           label=f"max(0, q − p): Σ = P(reject) = {1 - panel.p_accept:.3f}")
    if panel.never_rejects:  # p = q: the residual is 0/0 (the library returns q there, a choice that cannot matter)
        ax.bar(x + 0.2, np.zeros(len(shown)), 0.4, fill=False, edgecolor=COLOURS["excess"], hatch="..",
               label=f"(q − p)+: {NOTHING_REJECTED}")
    else:
        ax.bar(x + 0.2, panel.residual[shown], 0.4, fill=False, edgecolor=COLOURS["excess"], hatch="..",
               label="(q − p)+ = max(0, q − p) / Σ")
    wrong = panel.choice not in ("(q − p)+", "none") and not panel.never_rejects
    if wrong:  # the residual switch: what the wrong step draws from instead
        ax.bar(x, panel.resample_from[shown], 0.25, color="black", alpha=0.6,
               label=f"what the wrong step draws from instead: {panel.choice}")
    if highlight is not None:
        ax.annotate("resampled", (highlight + 0.2, panel.residual[shown][highlight]), xytext=(0, 14),
                    textcoords="offset points", ha="center", arrowprops=dict(arrowstyle="->"))
    token_axis(ax, labels, shown, len(panel.q), {"p": panel.p, "q": panel.q})
    ax.set(ylabel="probability", title=f"Reject: resample from {panel.choice} (wrong)" if wrong else
           "No test: nothing is rejected (wrong)" if panel.choice == "none" else
           "p = q: nothing is rejected" if panel.never_rejects else "Reject: resample from (q − p)+")
    drawn = np.zeros(len(shown)) if panel.never_rejects else panel.residual[shown]
    room_for_legend(ax, panel.excess[shown], drawn, panel.resample_from[shown] if wrong else drawn)
    return ax


def plot_identity(panel, labels, shown=None, ax=None):
    """Theorem 1 in one picture: the accepted mass stacked with the resampled mass, against q.
    With the correct residual it is exactly q; with a wrong one (panel.choice) it is not."""
    ax = new_ax(ax, (6, 3.6))
    shown = all_tokens(shown, len(panel.p))
    x = np.arange(len(shown))
    right = panel.choice == "(q − p)+"
    ax.bar(x, panel.accepted[shown], 0.6, color=COLOURS["overlap"], alpha=0.7,
           label="min(p, q): accepted" if right else "accepted")
    ax.bar(x, panel.resampled[shown], 0.6, bottom=panel.accepted[shown], color=COLOURS["excess"], alpha=0.7,
           label="max(0, q − p): resampled" if right else f"resampled ({panel.choice})")
    ax.scatter(x, panel.q[shown], marker="_", s=400, color="black", zorder=3, label="q (target)")
    token_axis(ax, labels, shown, len(panel.q), {"p": panel.p, "q": panel.q})
    ax.set(ylabel="P(output token)", title=identity_title(panel))
    room_for_legend(ax, panel.output[shown], panel.q[shown])
    return ax


def theorem1_figure(panel, labels, shown=None, drafted=None, fig=None):
    """The three panels side by side on `fig`, by default a Figure outside pyplot (the explorer
    renders it to PNG; a notebook passes plt.figure(...) and calls plt.show())."""
    fig = Figure(figsize=(14, 4.2), layout="constrained") if fig is None else fig
    axes = fig.subplots(1, 3, sharey=True)
    plot_overlap(panel, labels, shown, drafted=drafted, ax=axes[0])
    plot_residual(panel, labels, shown, ax=axes[1])
    plot_identity(panel, labels, shown, ax=axes[2])
    return fig


def plot_histogram(mc, q, labels, shown=None, ax=None):
    """What n accept/resample trials produced, next to q."""
    ax = new_ax(ax, (7, 3.6))
    q = np.asarray(q)
    shown = all_tokens(shown, len(q))
    x = np.arange(len(shown))
    ax.bar(x, mc.empirical[shown], 0.6, color=COLOURS["empirical"], alpha=0.6, label=f"empirical, {mc.n:,} trials")
    ax.scatter(x, q[shown], marker="_", s=400, color="black", zorder=3, label="q (target)")
    token_axis(ax, labels, shown, len(q), {"empirical": mc.empirical, "q": q})
    tv, over = shown_tv(mc, q, None if len(shown) == len(q) else shown)
    ax.set(ylabel="fraction of output tokens", title=f"Output of accept/resample: TV(empirical, q) = {tv:.4f}"
           + ("" if len(shown) == len(q) else f"\n{over}"))
    room_for_legend(ax, mc.empirical[shown], q[shown])
    return ax


def plot_acceptance(curves, temperature_p, temperature_q, temperatures=TEMPERATURES, axes=None):
    """panels.acceptance_curves as two panels: each exact rule's acceptance as the draft's
    temperature moves (left) and as the target's moves (right), the current setting marked."""
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True, layout="constrained")
    for ax, (which, rows), now, other in zip(axes, curves.items(), (temperature_p, temperature_q),
                                             (f"q at τ = {temperature_q:.2f}", f"p at τ = {temperature_p:.2f}")):
        ax.plot(temperatures, [a.bound for a in rows], "-", color="black", lw=3, alpha=0.3,
                label="bound: 1 − TV(p, q) = Σ min(p, q)")
        ax.plot(temperatures, [a.rejection for a in rows], "--", color=COLOURS["overlap"],
                label="rejection step: Σ p·min(1, q/p)")
        ax.plot(temperatures, [a.exact_match for a in rows], ":", color=COLOURS["excess"],
                label="exact-match test: Σ p·q")
        ax.axvline(now, color="grey", lw=0.8)
        ax.set(xlabel=f"temperature of {'p (draft)' if which == 'draft' else 'q (target)'}, {other}",
               ylabel="P(drafted token kept)", title=f"Moving the {which}'s temperature")
        ax.set_ylim(0, 1.05)
    handles, labels = axes[0].get_legend_handles_labels()
    axes[0].figure.legend(handles, labels, fontsize="small", loc="outside lower center", ncol=3)  # clear of the curves
    return axes


def plot_tv_curve(ns, tvs, ax=None):
    """TV(empirical, q) against the number of trials, log-log, with a 1/√n guide."""
    ax = new_ax(ax, (6, 3.6))
    ns, tvs = np.asarray(ns, np.float64), np.asarray(tvs, np.float64)
    ax.loglog(ns, tvs, "o-", color=COLOURS["empirical"], label="TV(empirical, q)")
    ax.loglog(ns, tvs[0] * np.sqrt(ns[0] / ns), "--", color="grey", label="∝ 1/√n (sampling noise)")
    ax.set(xlabel="number of trials n", ylabel="total-variation distance",
           title="The output of accept/resample converges to q")
    ax.legend()
    return ax


# ---------------------------------------------------------------------------------------------
# Algorithm 2 (notebook 03) and the speedup (notebooks 05 and 06)
# ---------------------------------------------------------------------------------------------

def plot_tokens_per_loop(loops, K, alpha=None, ax=None):
    """Histogram of the tokens each loop emitted, with the independent-acceptance prediction."""
    ax = new_ax(ax, (6, 3.6))
    counts = tokens_per_loop_counts(loops, K)
    n = np.arange(1, K + 2)
    ax.bar(n, counts / counts.sum(), 0.6, color=COLOURS["q"], alpha=0.7,
           label=f"measured, {counts.sum()} loops (mean {np.dot(n, counts) / counts.sum():.2f})")
    if alpha is not None:
        ax.plot(n, tokens_per_loop_pmf(alpha, K), "o--", color="black",
                label=f"independent acceptance, α = {alpha:.2f} (mean {np.dot(n, tokens_per_loop_pmf(alpha, K)):.2f})")
    ax.set_xticks(n)
    ax.set(xlabel="tokens emitted by one loop (= per target call)", ylabel="fraction of loops",
           title=f"Tokens per loop of speculative sampling, K = {K}")
    ax.legend(fontsize="small")
    return ax


def plot_loop_cost(costs, t_score_spread=None, ax=None):
    """What one loop costs against what its best case replaces, in milliseconds, for each K:
    K t_draft + t_score(K) (one loop) vs (K + 1) t_target (K + 1 autoregressive steps).
    t_score_spread {K: Spread of the scoring calls loop by loop} adds whiskers at their quartiles."""
    ax = new_ax(ax, (6, 3.6))
    Ks = np.array(sorted(costs.t_score_s))
    t_score = np.array([costs.t_score_s[K] for K in Ks])
    whiskers = None if t_score_spread is None else 1e3 * np.array(quartile_whiskers([t_score_spread[K] for K in Ks]))
    ax.errorbar(Ks, 1e3 * t_score, yerr=whiskers, fmt="o-", capsize=3, label="t_score(K): one target call on K + 1 positions"
                + (" (whiskers: quartiles of the calls)" if whiskers is not None else ""))
    ax.plot(Ks, 1e3 * (Ks * costs.t_draft_s + t_score), "s-", label="one loop: K t_draft + t_score(K)")
    ax.plot(Ks, 1e3 * (Ks + 1) * costs.t_target_s, "--", color="grey", label="(K + 1) t_target: K + 1 target steps")
    ax.axhline(1e3 * costs.t_target_s, color="black", lw=0.8, label=f"t_target = {1e3 * costs.t_target_s:.1f} ms")
    ax.set_xticks(Ks)
    ax.set(xlabel="K (tokens drafted per loop)", ylabel="time (ms)", title="What a loop costs")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    return ax


def quartile_whiskers(runs):
    """errorbar's yerr of Spreads: [distance down to q1, distance up to q3] for each."""
    return [[r.median - r.q1 for r in runs], [r.q3 - r.median for r in runs]]


def plot_speedup(xs, measured, predicted, ax=None, xlabel="K (tokens drafted per loop)",
                 title="Speculative sampling: predicted vs measured speedup"):
    """Measured speedups (one Spread of repeat-by-repeat speedups per x: its median, whiskers at its
    quartiles) against each prediction ({label: one value per x})."""
    ax = new_ax(ax, (10, 4))
    for (label, values), style in zip(predicted.items(), ("s--", "^:", "v:", "d:")):
        ax.plot(xs, values, style, label=f"predicted: {label}")
    ax.errorbar(xs, [r.median for r in measured], yerr=quartile_whiskers(measured), fmt="o-", color="black", lw=2,
                capsize=4, label="measured: median of the per-repeat ratios, whiskers at their quartiles")
    ax.axhline(1, color="grey", lw=0.8)
    ax.set_xticks(xs)
    ax.set(xlabel=xlabel, ylabel="speedup over autoregressive (×)", title=title)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the curves, not on them
    return ax


def plot_strategies(found, ax=None, title="Every draft, predicted and measured"):
    """One bar per strategy {name: course.nb06_beyond_one_draft_model.StrategyResult}: its measured speedup (the
    median of the per-repeat ratios, whiskers at their quartiles) beside its prediction."""
    ax = new_ax(ax, (12, 4.4))
    names = list(found)
    x = np.arange(len(names))
    runs = [found[name].speedup_runs for name in names]
    ax.bar(x - 0.2, [found[name].predicted for name in names], 0.4, color="lightgray", label="predicted from in-loop costs")
    bars = ax.bar(x + 0.2, [r.median for r in runs], 0.4, color=COLOURS["q"], yerr=quartile_whiskers(runs), capsize=4,
                  label="measured: median of the per-repeat ratios, whiskers at their quartiles")
    ax.bar_label(bars, [f"{r.median:.2f}" for r in runs], fontsize=8, label_type="center")  # clear of the whiskers
    ax.axhline(1, color="grey", ls=":", label="autoregressive sampling (1x)")
    ax.set_xticks(x, [textwrap.fill(name, 20) for name in names], fontsize=8)
    ax.set(xlabel="draft strategy", ylabel="speedup over autoregressive (×)", title=title)
    room_for_legend(ax, [r.q3 for r in runs], [found[name].predicted for name in names])
    return ax


def figure_png(fig, dpi=DPI):
    """A figure as PNG bytes (what the widget shows, whatever matplotlib backend is active)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def plot_sequence_fits(fits, ax=None):
    """One bar per sampler {name: model_runs.SequenceFit}: the TV distance between the joint
    distribution of the tokens it wrote and the target's exact one, with the chi-square p-value."""
    ax = new_ax(ax, (9, 3.8))
    names = list(fits)
    tvs = [fits[name].tv for name in names]
    bars = ax.bar(np.arange(len(names)), tvs, 0.6,
                  color=[COLOURS["overlap"] if fits[name].p_value > 1e-3 else COLOURS["excess"] for name in names])
    ax.bar_label(bars, [f"p = {fits[name].p_value:.1g}" if fits[name].p_value > 1e-300 else "p < 1e-300"
                        for name in names], fontsize=8)
    ax.set_xticks(np.arange(len(names)), names, rotation=20, ha="right")
    ax.set(ylabel="TV(sampled joint, exact q joint)", title="Whole sequences: which samplers write text distributed as q?")
    ax.bar(0, 0, color=COLOURS["overlap"], label="consistent with q (chi² p > 0.001)")
    ax.bar(0, 0, color=COLOURS["excess"], label="not q (chi² p < 0.001)")
    room_for_legend(ax, tvs)
    return ax


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


def finish_tree_axes(ax, xy, colours, title, right=0.8, bottom=0.6):
    """A drawn tree's axes: a legend of `colours` (name -> colour), depths as y ticks ("the text" at
    0), no x axis, `right` and `bottom` units of room beside the nodes."""
    for name, colour in colours.items():
        ax.scatter([], [], marker="s", s=80, color=colour, edgecolor="black", label=name)
    ax.set_xlim(xy[:, 0].min() - 0.8, xy[:, 0].max() + right)
    ax.set_ylim(xy[:, 1].min() - bottom, 0.6)
    depths = sorted(set(-xy[:, 1].astype(int)))
    ax.set_yticks([0] + [-d for d in depths], ["the text"] + [f"depth {d}" for d in depths])
    ax.set_xticks([])
    ax.set(title=title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    return ax
