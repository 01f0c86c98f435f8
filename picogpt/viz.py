"""The course's figures: small plotting functions, each labelled (axes with units, legend, title).

Needs matplotlib (the `dev` extra); picogpt itself does not import this module. Every function
draws on an `ax` you may pass (to build a grid of panels) and returns it, so it can be tested
without a screen. The data they plot comes from pure functions (`top_tokens`, `token_label`).
"""

import matplotlib.pyplot as plt
import numpy as np

VISIBLE_WHITESPACE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥"})


def token_label(tok, token_id):
    """A token's text with its whitespace made visible: ' Paris' -> '␣Paris'."""
    return tok.decode([int(token_id)]).translate(VISIBLE_WHITESPACE)


def top_tokens(probs, k):
    """Ids of the k most probable tokens, most probable first (ties: the lower id first)."""
    return np.argsort(-np.asarray(probs), kind="stable")[:k]


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
