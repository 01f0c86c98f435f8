"""Notebook 07's matplotlib figures: a token tree with what the walk did to each node, the
attention mask that scores it, the multi-candidate step's output and running residuals, and
trees against chains measured. Each `plot_…(…, ax=None)` draws on the Axes passed or a new
figure and returns it; the numbers come from course/tree_panels.py.
"""

import numpy as np

from .figures import COLOURS, new_ax, room_for_legend
from .tree_panels import ACCEPTED, NOT_REACHED, REJECTED, candidates_title, tree_layout

STATUS_COLOURS = {ACCEPTED: "tab:green", REJECTED: "tab:red", NOT_REACHED: "lightgrey"}


def plot_tree(tree, status, labels, root_label, ax=None, title="A token tree and its walk", after=None):
    """The tree drawn top-down from the text's last token (the root), each node labelled with its
    token and coloured by what the walk did to it; `labels` [n_nodes] are the nodes' token texts.
    after = (branch, label): the token the walk emitted after its branch, drawn below the branch's end."""
    ax = new_ax(ax, (9, 4))
    xy, (root_x, root_y) = tree_layout(tree)
    if after is not None:
        branch, label = after
        x0, y0 = xy[branch[-1]] if branch else (root_x, root_y)
        ax.plot([x0, x0 + 0.35], [y0, y0 - 0.6], color="black", lw=1, ls="--", zorder=1)
        ax.text(x0 + 0.35, y0 - 0.6, label, ha="center", va="center", fontsize=9, zorder=3,
                bbox=dict(boxstyle="round", facecolor="white", edgecolor="black", ls="--"))
        ax.scatter([], [], marker="s", s=80, color="white", edgecolor="black", ls="--",
                   label="emitted after the branch")
    for node, parent in enumerate(tree.parents):
        x0, y0 = (root_x, root_y) if parent < 0 else xy[parent]
        ax.plot([x0, xy[node, 0]], [y0, xy[node, 1]], color="grey", lw=1, zorder=1)
    ax.text(root_x, root_y, root_label, ha="center", va="center", fontsize=9, zorder=3,
            bbox=dict(boxstyle="round", facecolor="white", edgecolor="black"))
    for node, (x, y) in enumerate(xy):
        ax.text(x, y, labels[node], ha="center", va="center", fontsize=9, zorder=3,
                bbox=dict(boxstyle="round", facecolor=STATUS_COLOURS[status[node]], edgecolor="black", alpha=0.9))
    for name, colour in STATUS_COLOURS.items():
        ax.scatter([], [], marker="s", s=80, color=colour, edgecolor="black", label=name)
    ax.set_xlim(xy[:, 0].min() - 0.8, xy[:, 0].max() + 0.8)
    ax.set_ylim(xy[:, 1].min() - (1.0 if after is not None else 0.6), 0.6)
    depths = sorted(set(-xy[:, 1].astype(int)))
    ax.set_yticks([0] + [-d for d in depths], ["the text"] + [f"depth {d}" for d in depths])
    ax.set_xticks([])
    ax.set(title=title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    return ax


def plot_mask(mask, labels, n_shown_text, ax=None, title="The mask of one tree call"):
    """The attention mask [rows, keys] of the text's last n_shown_text tokens and the tree's
    nodes: a dark cell means the row's token may attend to the column's (mask 0), white not (-inf)."""
    ax = new_ax(ax, (6.5, 5.5))
    n = len(labels)
    shown = mask[-n:, -n:] == 0  # [n, n]: the last text tokens and every node
    ax.imshow(shown, cmap="Greys", vmin=0, vmax=1.4)
    ax.set_xticks(range(n), labels, rotation=90, fontsize=8)
    ax.set_yticks(range(n), labels, fontsize=8)
    ax.axhline(n_shown_text - 0.5, color="tab:blue", lw=1)
    ax.axvline(n_shown_text - 0.5, color="tab:blue", lw=1)
    ax.set(xlabel="key: may be attended to (text | tree nodes)", ylabel="query: the token attending", title=title)
    return ax


def plot_candidates(panel, labels, ax=None):
    """The token one node emits (exact, averaged over the candidates' drawing) against q."""
    ax = new_ax(ax, (8, 3.6))
    x = np.arange(len(panel.q))
    ax.bar(x - 0.2, panel.q, 0.4, color=COLOURS["q"], label="q (target)")
    ax.bar(x + 0.2, panel.output, 0.4, color=COLOURS["overlap"] if panel.tv < 5e-4 else COLOURS["excess"],
           label=f"emitted: {panel.rule}")
    ax.step(x, panel.p, where="mid", color=COLOURS["p"], lw=1, label="p (draft)")
    ax.set_xticks(x, labels)
    ax.set(xlabel="token", ylabel="probability", title=candidates_title(panel))
    room_for_legend(ax, panel.q, panel.output, panel.p)
    return ax


def plot_running_residuals(q_rows, candidates, labels, ax=None):
    """q_1 = q, q_2, ... side by side: what each candidate is judged against, the candidates
    marked under their tokens."""
    ax = new_ax(ax, (9, 3.6))
    x, width = np.arange(q_rows.shape[1]), 0.8 / len(q_rows)
    for i, row in enumerate(q_rows):
        name = "q_1 = q" if i == 0 else f"q_{i + 1} = (q_{i} − p_{i})+"
        ax.bar(x - 0.4 + (i + 0.5) * width, row, width, label=name + (f", judges c_{i + 1}" if i < len(candidates) else
                                                                       ", the fallback"))
    marks = {c: f"\nc_{i + 1}" for i, c in enumerate(candidates)}
    ax.set_xticks(x, [label + marks.get(i, "") for i, label in enumerate(labels)])
    ax.set(xlabel="token (c_i: the i-th candidate)", ylabel="probability",
           title="What each candidate is judged against: the running residual")
    room_for_legend(ax, *q_rows)
    return ax


def plot_tree_measurement(m, axes=None):
    """Three panels of a measure/trees.py measurement: tokens per target call (measured, and by the
    formula), the target call's cost (median and interquartile range over loops) against its rows,
    and the speedup over autoregressive sampling (median of the repeats' ratios, interquartile
    whiskers) beside the predicted one."""
    import matplotlib.pyplot as plt
    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")
    variants = list(m.variants.values())
    names, x = [v.name for v in variants], np.arange(len(variants))
    ax = axes[0]
    ax.bar(x - 0.2, [v.tokens_per_call for v in variants], 0.4, color="tab:green", label="measured")
    ax.bar(x + 0.2, [v.predicted_tokens for v in variants], 0.4, color="lightgrey", edgecolor="black",
           label="formula (independent draws)")
    ax.set_xticks(x, names, rotation=25, ha="right")
    ax.set(ylabel="tokens per target call", title="Tokens per loop")
    ax.legend(fontsize="small")
    ax = axes[1]
    chains = sorted((v for v in variants if set(v.shape) == {1}), key=lambda v: v.nodes)
    for group, style, name in ((chains, "o-", "chains"), ([v for v in variants if v not in chains], "s", None)):
        for v in group:
            ax.errorbar(v.nodes + 1, v.t_score.median * 1e3, yerr=[[(v.t_score.median - v.t_score.q1) * 1e3],
                                                                   [(v.t_score.q3 - v.t_score.median) * 1e3]],
                        fmt=style[0], capsize=3, color="black" if name else None, label=None if name else v.name)
        if name and group:
            ax.plot([v.nodes + 1 for v in group], [v.t_score.median * 1e3 for v in group], "-", color="black",
                    label=", ".join(v.name for v in group))
    ax.errorbar(1, m.t_target.median * 1e3, yerr=[[(m.t_target.median - m.t_target.q1) * 1e3],
                                                   [(m.t_target.q3 - m.t_target.median) * 1e3]],
                fmt="D", color="grey", capsize=3, label="one row: an autoregressive step")
    ax.set(xlabel="rows in the target call (drafted tokens + 1)", ylabel="time (ms)",
           title="What one target call costs (median, IQR over loops)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="x-small", loc="lower right")
    ax = axes[2]
    medians = [v.speedup for v in variants]
    ax.errorbar(x, medians, yerr=[[v.speedup - v.speedup_runs.q1 for v in variants],
                                  [v.speedup_runs.q3 - v.speedup for v in variants]], fmt="o", color="black", capsize=4,
                label="measured")
    ax.plot(x, [v.predicted for v in variants], "s", mfc="none", color="tab:blue", label="predicted (in-loop costs)")
    ax.axhline(1, color="grey", lw=0.8)
    ax.legend(fontsize="small")
    ax.set_xticks(x, names, rotation=25, ha="right")
    ax.set(ylabel="speedup over autoregressive (×)",
           title=f"Wall clock: median of {m.repeats} repeats, interquartile whiskers")
    return axes
