"""Notebook 09's matplotlib figures: one traversal drawn on its tree (which node was tested when,
with which w, passed or not, and where the next token came from), and the walk against the
traversal on a toy setting. Each `plot_…(…, ax=None)` draws on the Axes passed or a new figure and
returns it; the numbers come from course/traversal_panels.py.
"""

import numpy as np

from .figures import new_ax
from .tree_panels import tree_layout

PASSED, FAILED, UNTESTED = "tested: kept", "tested: rejected", "not tested"
COLOURS = {PASSED: "tab:green", FAILED: "tab:red", UNTESTED: "lightgrey"}


def plot_traversal(tree, t, labels, root_label, ax=None, title="One traversal: the order of the tests, and each w"):
    """The tree top-down from the text's last token; each tested node labelled 'order. token' and
    'w = ..', coloured by its test; the kept branch drawn thick; the token after it below its end.
    `t` is a traversal_panels.Traversal, `labels` [n_nodes] the nodes' token texts."""
    ax = new_ax(ax, (10, 4.2))
    xy, (root_x, root_y) = tree_layout(tree)
    order = {node: i for i, node in enumerate(t.tested, start=1)}
    status = [UNTESTED] * len(tree)
    for node, ok in zip(t.tested, t.passed):
        status[node] = PASSED if ok else FAILED
    kept_edges = set(t.branch)
    for node, parent in enumerate(tree.parents):
        x0, y0 = (root_x, root_y) if parent < 0 else xy[parent]
        ax.plot([x0, xy[node, 0]], [y0, xy[node, 1]], color="black" if node in kept_edges else "grey",
                lw=2.5 if node in kept_edges else 1, zorder=1)
    ax.text(root_x, root_y, root_label, ha="center", va="center", fontsize=9, zorder=3,
            bbox=dict(boxstyle="round", facecolor="white", edgecolor="black"))
    for node, (x, y) in enumerate(xy):
        text = f"{order[node]}. {labels[node]}" if node in order else labels[node]
        ax.text(x, y, text, ha="center", va="center", fontsize=9, zorder=3,
                bbox=dict(boxstyle="round", facecolor=COLOURS[status[node]], edgecolor="black", alpha=0.9))
        if node in order:
            ax.text(x, y - 0.28, f"w = {t.weights[order[node] - 1]:.2f}", ha="center", va="top", fontsize=8)
    x0, y0 = xy[t.branch[-1]] if t.branch else (root_x, root_y)
    ax.annotate(f"next token from\n{t.source}", xy=(x0, y0), xytext=(x0 + 0.5, y0 - 0.75), fontsize=8,
                ha="left", arrowprops=dict(arrowstyle="->", ls="--"))
    for name, colour in COLOURS.items():
        ax.scatter([], [], marker="s", s=80, color=colour, edgecolor="black", label=name)
    ax.set_xlim(xy[:, 0].min() - 0.8, xy[:, 0].max() + 1.6)
    ax.set_ylim(xy[:, 1].min() - 1.2, 0.6)
    depths = sorted(set(-xy[:, 1].astype(int)))
    ax.set_yticks([0] + [-d for d in depths], ["the text"] + [f"depth {d}" for d in depths])
    ax.set_xticks([])
    ax.set(title=title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    return ax


def plot_tree_kept(panel, ax=None):
    """P(at least d drafts kept), d = 1 .. D, by the walk and by the traversal (traversal_panels.TreeKeptPanel)."""
    ax = new_ax(ax, (7, 3.6))
    depths = np.arange(1, len(panel.shape) + 1)
    width = 0.38
    for i, (name, kept) in enumerate(panel.kept.items()):
        ax.bar(depths + (i - 0.5) * width, kept, width, label=f"{name}: {panel.tokens_per_call[name]:.3f} tokens per call")
    ax.set_xticks(depths)
    ax.set(xlabel="d (depth in the tree)", ylabel="P(at least d drafts kept)", ylim=(0, 1.05),
           title=f"Tree {panel.shape}: exact over every drafted tree")
    ax.legend(fontsize="small")
    return ax
