"""Notebook 08's matplotlib figures: one loop of block verification (running weights, keep
probabilities, uniforms, the position chosen, the residual sampled) and the drafts kept per loop
by each verifier. Each `plot_…(…, ax=None)` draws on the Axes passed or a new figure and returns
it; the numbers come from course/block_panels.py.
"""

import numpy as np

from .block_panels import NAMES
from .figures import COLOURS, new_ax, room_for_legend

VERIFIER_COLOURS = {"token": "tab:orange", "block": "tab:blue", "bound": "grey"}


def plot_block_loop(loop, labels, ax=None, title="One loop of block verification"):
    """Position by position: the running weight w_i, what token by token keeps (the product of
    min(1, q/p)), the keep probability h_i (bars), each uniform eta_i (green: passes, red: fails),
    and the drafts kept (shaded). labels: the drafts' texts [K]."""
    ax = new_ax(ax, (8, 4))
    K = len(loop.drafted)
    i = np.arange(1, K + 1)
    ax.bar(i, loop.keep, width=0.5, color="lightsteelblue", label="h_i: keep x̃_1..x̃_i, given no longer prefix is kept")
    ax.plot(i, loop.weights, "o-", color=VERIFIER_COLOURS["block"], label="w_i: the running weight")
    ax.plot(i, loop.token_wise, "s--", color=VERIFIER_COLOURS["token"], label="token by token: P(keeps x̃_1..x̃_i)")
    passes = loop.eta < loop.keep
    ax.scatter(i[passes], loop.eta[passes], marker="D", s=60, color="tab:green", zorder=3, label="eta_i < h_i: passes")
    ax.scatter(i[~passes], loop.eta[~passes], marker="X", s=80, color="tab:red", zorder=3, label="eta_i ≥ h_i: fails")
    if loop.n_kept:
        ax.axvspan(0.5, loop.n_kept + 0.5, color="tab:green", alpha=0.08, label="kept")
    kept = f"x̃_1..x̃_{loop.n_kept} kept, the largest i that passes" if loop.n_kept else "no position passes: no draft kept"
    ax.set_xticks(i, [f"{n}: {label}" for n, label in zip(i, labels)])
    ax.set(xlim=(0.5, K + 0.5), ylim=(0, 1.02), xlabel="position i: the draft x̃_i", ylabel="probability",
           title=f"{title}: {kept}")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return ax


def plot_last_token(loop, label, k=10, ax=None):
    """What the loop's last token is drawn from: the weighted residual (w q − p)+ at the position after
    the kept drafts (or q[K] when all are kept), beside Theorem 1's (q − p)+ there, over the k most
    likely tokens of either. label(token_id) -> its text."""
    ax = new_ax(ax, (7, 3.6))
    shown = np.argsort(-np.maximum(loop.residual, loop.unweighted), kind="stable")[:k]
    x = np.arange(len(shown))
    w = loop.weights[loop.n_kept - 1] if loop.n_kept else 1.0
    after = f"after x̃_{loop.n_kept}" if loop.n_kept else "after the text"
    if loop.n_kept == len(loop.drafted):
        ax.bar(x, loop.residual[shown], color=COLOURS["q"], label="q_{K+1}: every draft kept, the extra token")
    else:
        ax.bar(x - 0.2, loop.residual[shown], width=0.4, color=VERIFIER_COLOURS["block"],
               label=f"(w q − p)+ with w = {w:.3f}: drawn from")
        ax.bar(x + 0.2, loop.unweighted[shown], width=0.4, color=VERIFIER_COLOURS["token"], alpha=0.6,
               label="(q − p)+: Theorem 1's, not used here")
    ax.set_xticks(x, [label(int(t)) for t in shown], rotation=45, ha="right")
    ax.set(ylabel="probability", title=f"The token {after}")
    room_for_legend(ax, loop.residual[shown], loop.unweighted[shown])
    return ax


def plot_kept(panel, ax=None):
    """P(the first i drafts are kept), i = 1 .. K, token by token, by block verification and at most
    (blocks.KeptPanel), each with its mean drafts kept per loop in the legend."""
    ax = new_ax(ax, (7, 3.8))
    i = np.arange(1, panel.K + 1)
    for verify, marker in (("bound", "^:"), ("block", "o-"), ("token", "s--")):
        ax.plot(i, panel.kept[verify], marker, color=VERIFIER_COLOURS[verify],
                label=f"{NAMES[verify]}: {panel.expected(verify):.3f} drafts kept per loop")
    ax.set_xticks(i)
    ax.set(xlabel="i (drafts)", ylabel="P(the first i drafts are kept)", ylim=(0, 1.05),
           title=f"p = ({panel.p[0]:.2f}, {panel.p[1]:.2f}), q = ({panel.q[0]:.2f}, {panel.q[1]:.2f}) over {{a, b}}")
    ax.legend(fontsize="small", loc="upper right")
    return ax
