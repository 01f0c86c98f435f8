"""The course's figures and widgets: next-token distributions and timings (notebooks 01-02),
Theorem 1, the speculative loop and the speedup (03-05), each labelled (axes with units, legend, title).

Needs matplotlib and ipywidgets (the `dev` extra); `import picogpt` does not import this module.
The data of every picture comes from a pure function (tested headless in tests/test_viz*.py);
every `plot_…(…, ax=None)` draws on the Axes you pass (to build a grid of panels) or on a new
figure, and returns it. The Theorem 1 explorer of notebook 04 only wires sliders to
`explorer_update` and a button to `monte_carlo_update`, two pure functions a test can call
without a browser.

Notation (Chen et al. 2023): p is the draft model's distribution, q the target's, x̃ a drafted
token, (f)+ = max(0, f) / Σ max(0, f).
"""

import base64
import functools
import io
from dataclasses import dataclass

import numpy as np

from ..errors import PicoGPTError
from ..rejection import accept_or_resample_many, residual
from ..sampling import distribution
from ..theory import acceptance_rate

try:
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure
    from matplotlib.font_manager import FontProperties, findfont
    from matplotlib.ft2font import FT2Font
except ImportError:  # pragma: no cover - the dev extra installs it
    raise PicoGPTError("picogpt.viz needs matplotlib and ipywidgets: pip install -e '.[dev]'") from None

COLOURS = {"p": "tab:blue", "q": "tab:orange", "overlap": "tab:green", "excess": "tab:red", "empirical": "tab:purple"}
TOY_VOCAB = ("the", "a", "cat", "dog", "sat", "ran", "on", "mat")
VISIBLE_WHITESPACE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥"})


# ---------------------------------------------------------------------------------------------
# Distributions: hand-shaped toys, and the real models' next-token distributions
# ---------------------------------------------------------------------------------------------

def bump(centre, width, n_vocab):
    """A discretised bell curve over tokens 0..n_vocab-1: softmax(-(i - centre)² / (2 width²))."""
    if not width > 0:
        raise PicoGPTError(f"a toy distribution's width must be positive, got {width}")
    logits = -((np.arange(n_vocab) - centre) ** 2) / (2 * width**2)  # [n_vocab]
    return distribution(logits)


def toy_distributions(centre_p=2.0, width_p=1.5, centre_q=4.0, width_q=1.0, n_vocab=len(TOY_VOCAB)):
    """(p, q): a draft and a target over a toy vocabulary, shaped by four slider values.
    Moving the centres apart makes the models disagree; P(accept) = Σ min(p, q) falls."""
    return bump(centre_p, width_p, n_vocab), bump(centre_q, width_q, n_vocab)


def prompt_logits(model, ids):
    """Next-token logits after every prefix of the prompt, one forward pass: [n_seq, n_vocab]."""
    return np.asarray(model(ids), np.float64)


def distributions_at(logits_p, logits_q, position, temperature_p=1.0, temperature_q=1.0, top_k=None, top_p=None):
    """(p, q) for the token after prompt position `position` (0-based), at the given temperatures."""
    n_seq = len(logits_p)
    if not 0 <= position < n_seq or len(logits_q) != n_seq:
        raise PicoGPTError(f"position {position} is outside the prompt's {n_seq} positions (0..{n_seq - 1})")
    p = distribution(logits_p[position], temperature_p, top_k, top_p)
    q = distribution(logits_q[position], temperature_q, top_k, top_p)
    return p, q


@functools.lru_cache(maxsize=None)
def drawable_codepoints():
    """The characters matplotlib's default font (DejaVu Sans) can draw."""
    return frozenset(FT2Font(findfont(FontProperties(family="DejaVu Sans"))).get_charmap())


def token_label(tok, token_id):
    """A token's text with its whitespace made visible (' Paris' -> '␣Paris'), and whatever a plot
    cannot draw escaped: a byte that is only part of a UTF-8 character as '\\xe3', a character
    missing from the plot font (CJK, emoji) as '\\u3060'."""
    text = tok.decode_single_token_bytes(int(token_id)).decode("utf-8", errors="backslashreplace")
    drawable = drawable_codepoints()
    return "".join(c if ord(c) in drawable else c.encode("unicode_escape").decode("ascii")
                   for c in text.translate(VISIBLE_WHITESPACE))


def top_tokens(probs, k):
    """Ids of the k most probable tokens, most probable first (ties: the lower id first)."""
    return np.argsort(-np.asarray(probs), kind="stable")[:k]


def shown_tokens(p, q, n_show, include=()):
    """The tokens a plot of p and q shows: all of a small vocabulary in order, else the n_show
    with the most mass under either model, plus any token in `include` (e.g. the drafted one)."""
    if len(p) <= n_show:
        return np.arange(len(p))
    top = list(top_tokens(np.maximum(p, q), n_show))
    return np.array(top + [int(t) for t in include if int(t) not in top])


# ---------------------------------------------------------------------------------------------
# Theorem 1 in numbers: what one accept/resample step does to each token's probability
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Theorem1Panel:
    p: np.ndarray  # draft distribution [n_vocab]
    q: np.ndarray  # target distribution [n_vocab]
    overlap: np.ndarray  # min(p, q): P(draft x̃ = x and accept it) [n_vocab]
    excess: np.ndarray  # max(0, q - p): P(reject, then resample x) [n_vocab]
    residual: np.ndarray  # (q - p)+ = excess / Σ excess: what a rejection resamples from [n_vocab]
    p_accept: float  # Σ min(p, q)
    identity_error: float  # max |min(p, q) + max(0, q - p) - q|: zero up to rounding


def validate_pair(p, q):
    """p and q as float64 probability vectors over the same vocabulary, or a readable error."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    if p.ndim != 1 or p.shape != q.shape:
        raise PicoGPTError(f"p and q must be 1-D distributions over the same vocabulary, got shapes {p.shape} and {q.shape}")
    for name, d in (("p", p), ("q", q)):
        if np.any(d < 0) or abs(d.sum() - 1) > 1e-6:
            raise PicoGPTError(f"{name} is not a probability distribution (sum {d.sum():.6f}, min {d.min():.3g})")
    return p, q


def theorem1_panel(p, q):
    """Everything the proof of Theorem 1 adds up, for one pair of distributions."""
    p, q = validate_pair(p, q)
    overlap, excess = np.minimum(p, q), np.maximum(0.0, q - p)
    return Theorem1Panel(p=p, q=q, overlap=overlap, excess=excess, residual=residual(p, q),
                         p_accept=acceptance_rate(p, q),
                         identity_error=float(np.max(np.abs(overlap + excess - q))))


def readout(panel):
    """The sentence the explorer shows above its figure."""
    return (f"P(accept) = Σ min(p, q) = {panel.p_accept:.3f} &nbsp;·&nbsp; "
            f"P(reject) = Σ max(0, q − p) = {1 - panel.p_accept:.3f}")


# ---------------------------------------------------------------------------------------------
# Monte-Carlo: run the accept/resample step n times and compare what comes out with q
# ---------------------------------------------------------------------------------------------

def tv_distance(a, b):
    """Total-variation distance ½ Σ |a - b|: the largest difference in probability any event can get."""
    return 0.5 * float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).sum())


def lump(d, shown):
    """A distribution over the tokens `shown` plus one last bucket holding all the others."""
    d = np.asarray(d, np.float64)
    return np.append(d[shown], 1.0 - d[shown].sum())  # [len(shown) + 1]


@dataclass(frozen=True)
class MonteCarlo:
    counts: np.ndarray  # how often each token came out [n_vocab]
    n_accepted: int  # trials that kept the drafted token
    tv: float  # TV(empirical, q)

    @property
    def n(self):
        return int(self.counts.sum())

    @property
    def empirical(self):
        return self.counts / self.n


def monte_carlo(p, q, n, seed=0):
    """n accept/resample trials: the empirical distribution of the output token, and its TV to q."""
    p, q = validate_pair(p, q)
    if int(n) < 1:
        raise PicoGPTError(f"the number of Monte-Carlo trials n must be at least 1, got {n}")
    tokens, accepted = accept_or_resample_many(p, q, int(n), np.random.default_rng(seed))
    counts = np.bincount(tokens, minlength=len(q))
    return MonteCarlo(counts=counts, n_accepted=int(accepted.sum()), tv=tv_distance(counts / n, q))


def tv_by_n(p, q, ns, seed=0):
    """TV(empirical, q) after the first n trials of one long run, for each n in ns."""
    p, q = validate_pair(p, q)
    tokens, _ = accept_or_resample_many(p, q, int(max(ns)), np.random.default_rng(seed))
    return np.array([tv_distance(np.bincount(tokens[:n], minlength=len(q)) / n, q) for n in ns])


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
# Theorem 1 figures (notebook 04)
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


def plot_overlap(panel, labels, shown=None, ax=None):
    """p and q side by side, with min(p, q) — the mass that survives the accept test — hatched."""
    ax = new_ax(ax, (6, 3.6))
    shown = all_tokens(shown, len(panel.p))
    x = np.arange(len(shown))
    ax.bar(x - 0.2, panel.p[shown], 0.4, color=COLOURS["p"], alpha=0.6, label="p (draft)")
    ax.bar(x + 0.2, panel.q[shown], 0.4, color=COLOURS["q"], alpha=0.6, label="q (target)")
    ax.bar(x, panel.overlap[shown], 0.8, fill=False, hatch="//", edgecolor=COLOURS["overlap"],
           label=f"min(p, q): Σ = P(accept) = {panel.p_accept:.3f}")
    token_axis(ax, labels, shown, len(panel.q), {"p": panel.p, "q": panel.q})
    ax.set(ylabel="probability", title="Accept x̃ ~ p with probability min(1, q/p)")
    ax.legend(fontsize="small")
    return ax


def plot_residual(panel, labels, shown=None, highlight=None, ax=None):
    """max(0, q − p), the mass the accept test leaves missing, and (q − p)+, that mass normalised:
    what a rejection resamples from. `highlight` (an index into `shown`) marks the resampled token."""
    ax = new_ax(ax, (6, 3.6))
    shown = all_tokens(shown, len(panel.p))
    x = np.arange(len(shown))
    ax.bar(x - 0.2, panel.excess[shown], 0.4, color=COLOURS["excess"], alpha=0.6,
           label=f"max(0, q − p): Σ = P(reject) = {1 - panel.p_accept:.3f}")
    ax.bar(x + 0.2, panel.residual[shown], 0.4, fill=False, edgecolor=COLOURS["excess"], hatch="..",
           label="(q − p)+ = max(0, q − p) / Σ")
    if highlight is not None:
        ax.annotate("resampled", (highlight + 0.2, panel.residual[shown][highlight]), xytext=(0, 14),
                    textcoords="offset points", ha="center", arrowprops=dict(arrowstyle="->"))
    token_axis(ax, labels, shown, len(panel.q), {"p": panel.p, "q": panel.q})
    ax.set(ylabel="probability", title="Reject: resample from (q − p)+")
    ax.legend(fontsize="small")
    return ax


def plot_identity(panel, labels, shown=None, ax=None):
    """Theorem 1 in one picture: the accepted mass min(p, q) stacked with the resampled mass
    max(0, q − p) is exactly q."""
    ax = new_ax(ax, (6, 3.6))
    shown = all_tokens(shown, len(panel.p))
    x = np.arange(len(shown))
    ax.bar(x, panel.overlap[shown], 0.6, color=COLOURS["overlap"], alpha=0.7, label="min(p, q): accepted")
    ax.bar(x, panel.excess[shown], 0.6, bottom=panel.overlap[shown], color=COLOURS["excess"], alpha=0.7,
           label="max(0, q − p): resampled")
    ax.scatter(x, panel.q[shown], marker="_", s=400, color="black", zorder=3, label="q (target)")
    token_axis(ax, labels, shown, len(panel.q), {"p": panel.p, "q": panel.q})
    ax.set(ylabel="P(output token)", title="min(p, q) + max(0, q − p) = q")
    ax.legend(fontsize="small")
    return ax


def theorem1_figure(panel, labels, shown=None):
    """The three panels side by side, as a Figure outside pyplot (the explorer renders it to PNG)."""
    fig = Figure(figsize=(14, 4), layout="constrained")
    axes = fig.subplots(1, 3, sharey=True)
    plot_overlap(panel, labels, shown, ax=axes[0])
    plot_residual(panel, labels, shown, ax=axes[1])
    plot_identity(panel, labels, shown, ax=axes[2])
    shown = all_tokens(shown, len(panel.p))
    tallest = max(panel.p[shown].max(), panel.q[shown].max(), panel.residual[shown].max())
    axes[0].set_ylim(0, 1.4 * tallest)  # shared: room for the legends above the bars
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
    ax.set_ylim(0, 1.4 * max(mc.empirical[shown].max(), q[shown].max()))
    ax.set(ylabel="fraction of output tokens", title=f"Output of accept/resample: TV(empirical, q) = {mc.tv:.4f}")
    ax.legend(fontsize="small")
    return ax


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
# Algorithm 2, one loop at a time (notebook 03): the speculative sampler's trace as a table
# ---------------------------------------------------------------------------------------------

def loop_rows(loop, tok):
    """One row per drafted token of a LoopTrace: (t, x̃_t, p(x̃_t), q(x̃_t), min(1, q/p), r or None,
    decision). t counts from 1, as in the paper."""
    rows = []
    for i, (x, p_x, q_x) in enumerate(zip(loop.drafted, loop.p_drafted, loop.q_drafted)):
        r = loop.r[i] if i < len(loop.r) else None
        decision = ("accepted" if i < loop.n_accepted else
                    "rejected" if r is not None else "not judged (after a rejection)")
        rows.append((i + 1, token_label(tok, x), p_x, q_x, min(1.0, q_x / p_x), r, decision))
    return rows


def probability(x):
    """A probability in 8 characters: 0.0831, or 2.1e-05 when it would print as 0.0000."""
    return f"{x:8.4f}" if x >= 1e-4 or x == 0 else f"{x:8.1e}"


def loop_table(loop, tok):
    """The loop as a text table, then what it emitted: the accepted drafts and the new token."""
    rows = loop_rows(loop, tok)
    width = max(8, *(len(row[1]) for row in rows))
    lines = [f"{'t':>2}  {'x̃_t':<{width}}  {'p(x̃_t)':>8}  {'q(x̃_t)':>8}  {'min(1, q/p)':>11}  {'r':>6}  decision"]
    for t, label, p_x, q_x, ratio, r, decision in rows:
        r_text = f"{r:6.3f}" if r is not None else f"{'–':>6}"
        lines.append(f"{t:>2}  {label:<{width}}  {probability(p_x)}  {probability(q_x)}  {ratio:11.3f}  {r_text}  {decision}")
    new = token_label(tok, loop.new_token)
    lines.append(f"→ x̃_{loop.n_accepted + 1} rejected; in its place, from (q − p)+: {new}" if loop.resampled else
                 f"→ all K = {loop.K} accepted: extra token from q_{loop.K + 1}: {new}")
    lines.append(f"→ this loop emitted {len(loop.tokens)} token(s): " + " ".join(token_label(tok, x) for x in loop.tokens))
    return "\n".join(lines)


def marked_text(loops, tok, N=None):
    """The generated text, marked with where each token came from: plain = a draft the target
    accepted, [x] = resampled from (q − p)+ after a rejection, {x} = the extra token from q_{K+1}
    after all K drafts were accepted. N cuts it to the first N tokens, as the sampler does."""
    pieces = []
    for loop in loops:
        pieces += [tok.decode([x]) for x in loop.drafted[: loop.n_accepted]]
        new = tok.decode([loop.new_token])
        pieces.append(f"[{new}]" if loop.resampled else f"{{{new}}}")
    return "".join(pieces[:N])


def rejection_view(loop, tok, n_show=10):
    """For a loop that ended in a rejection (kept with keep_distributions=True): the Theorem 1 panel
    at the rejected position, the tokens to show (the drafted and the resampled one included),
    their labels, and the index of the resampled token among them."""
    if not loop.resampled or loop.p is None:
        raise PicoGPTError("rejection_view needs a loop that ended in a rejection, traced with "
                           "speculative_sampling(..., keep_distributions=True)")
    t = loop.n_accepted  # 0-based: the first rejected draft
    panel = theorem1_panel(loop.p[t], loop.q[t])
    shown = shown_tokens(panel.p, panel.q, n_show, include=(loop.drafted[t], loop.new_token))
    labels = [token_label(tok, x) for x in shown]
    return panel, shown, labels, list(shown).index(loop.new_token)


def tokens_per_loop_counts(loops, K):
    """How many loops emitted 1, 2, ..., K + 1 tokens: [K + 1]."""
    return np.bincount([len(loop.tokens) for loop in loops], minlength=K + 2)[1: K + 2]


def tokens_per_loop_pmf(alpha, K):
    """P(a loop emits n tokens), n = 1..K+1, if each draft is accepted independently with
    probability alpha: alpha^(n-1) (1 - alpha) for n <= K, and alpha^K for n = K + 1. [K + 1]"""
    n = np.arange(1, K + 2)
    return np.where(n <= K, alpha ** (n - 1) * (1 - alpha), alpha**K)


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


# ---------------------------------------------------------------------------------------------
# Speedup (notebook 05)
# ---------------------------------------------------------------------------------------------

def plot_loop_cost(costs, ax=None):
    """What one loop costs against what its best case replaces, in milliseconds, for each K:
    K t_draft + t_score(K) (one loop) vs (K + 1) t_target (K + 1 autoregressive steps)."""
    ax = new_ax(ax, (6, 3.6))
    Ks = np.array(sorted(costs.t_score_s))
    t_score = np.array([costs.t_score_s[K] for K in Ks])
    ax.plot(Ks, 1e3 * t_score, "o-", label="t_score(K): one target call on K + 1 positions")
    ax.plot(Ks, 1e3 * (Ks * costs.t_draft_s + t_score), "s-", label="one loop: K t_draft + t_score(K)")
    ax.plot(Ks, 1e3 * (Ks + 1) * costs.t_target_s, "--", color="grey", label="(K + 1) t_target: K + 1 target steps")
    ax.axhline(1e3 * costs.t_target_s, color="black", lw=0.8, label=f"t_target = {1e3 * costs.t_target_s:.1f} ms")
    ax.set_xticks(Ks)
    ax.set(xlabel="K (tokens drafted per loop)", ylabel="time (ms)", title="What a loop costs")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    return ax


def plot_speedup(Ks, measured, predicted, ax=None):
    """Measured speedup (one value per K) against each prediction ({label: one value per K})."""
    ax = new_ax(ax, (10, 4))
    for (label, values), style in zip(predicted.items(), ("s--", "^:", "v:", "d:")):
        ax.plot(Ks, values, style, label=f"predicted: {label}")
    ax.plot(Ks, measured, "o-", color="black", lw=2, label="measured (median wall time)")
    ax.axhline(1, color="grey", lw=0.8)
    ax.set_xticks(Ks)
    ax.set(xlabel="K (tokens drafted per loop)", ylabel="speedup over autoregressive (×)",
           title="Speculative sampling: predicted vs measured speedup")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the curves, not on them
    return ax


def figure_png(fig, dpi=80):
    """A figure as PNG bytes (what the widget shows, whatever matplotlib backend is active)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------
# The Theorem 1 explorer (notebook 04): pure updates, then the widgets that call them
# ---------------------------------------------------------------------------------------------

def png_output(png, text):
    """An output record (nbformat display_data) showing a PNG, with a text fallback."""
    return {"output_type": "display_data", "metadata": {},
            "data": {"image/png": base64.b64encode(png).decode("ascii"), "text/plain": text}}


def text_output(text):
    return {"output_type": "stream", "name": "stdout", "text": text + "\n"}


def explorer_update(p, q, labels, shown=None, title=None):
    """What the explorer shows for one slider setting: (readout HTML, figure outputs, panel)."""
    panel = theorem1_panel(p, q)
    fig = theorem1_figure(panel, labels, shown)
    if title:
        fig.suptitle(title)
    return readout(panel), (png_output(figure_png(fig), f"Theorem 1 panels, P(accept) = {panel.p_accept:.3f}"),), panel


def monte_carlo_update(p, q, n, seed, labels, shown=None):
    """What the explorer shows after `Run Monte-Carlo`: (histogram outputs, MonteCarlo)."""
    mc = monte_carlo(p, q, n, seed)
    fig = Figure(figsize=(7, 3.6), layout="constrained")
    plot_histogram(mc, q, labels, shown, ax=fig.subplots())
    summary = (f"n = {mc.n:,} trials: {mc.n_accepted / mc.n:.1%} accepted the drafted token, "
               f"the rest resampled from (q − p)+; TV(empirical, q) = {mc.tv:.4f}")
    if shown is not None and len(shown) < len(q):
        summary += (f"\nover the {len(shown)} tokens shown plus one bucket for all others: TV = "
                    f"{tv_distance(lump(mc.empirical, shown), lump(q, shown)):.4f} (over all {len(q):,} "
                    "tokens TV only gets small once n is much larger than the vocabulary)")
    return (text_output(summary), png_output(figure_png(fig), summary)), mc


def _slider(description, value, low, high, step=0.05):
    import ipywidgets as w
    return w.FloatSlider(value=value, min=low, max=high, step=step, description=description,
                         continuous_update=False, readout_format=".2f", style={"description_width": "initial"})


@dataclass(frozen=True)
class ExplorerPair:
    """What the explorer plots for one slider setting."""
    p: np.ndarray  # draft distribution [n_vocab]
    q: np.ndarray  # target distribution [n_vocab]
    labels: list  # labels of the tokens shown
    shown: np.ndarray = None  # the tokens shown (None: all, in order)
    title: str = None


def toy_controls():
    """Sliders for toy_distributions, and the function from their values to an ExplorerPair."""
    sliders = {"centre_p": _slider("p (draft) centre", 2.0, 0, 7), "width_p": _slider("p (draft) width", 1.5, 0.3, 4),
               "centre_q": _slider("q (target) centre", 4.0, 0, 7), "width_q": _slider("q (target) width", 1.0, 0.3, 4)}

    def pair(**values):
        p, q = toy_distributions(**values)
        return ExplorerPair(p, q, list(TOY_VOCAB), title="a toy vocabulary of 8 words")

    return sliders, pair


def model_controls(draft, target, ids, tok, n_show=10):
    """Sliders for a prompt position and the two temperatures; the logits are computed once here,
    so moving a slider runs no forward pass."""
    import ipywidgets as w
    logits_p, logits_q = prompt_logits(draft, ids), prompt_logits(target, ids)
    sliders = {"position": w.IntSlider(value=len(ids) - 1, min=0, max=len(ids) - 1, description="prompt position",
                                       continuous_update=False, style={"description_width": "initial"}),
               "temperature_p": _slider("temperature of p (draft)", 1.0, 0, 2),
               "temperature_q": _slider("temperature of q (target)", 1.0, 0, 2)}

    def pair(position, temperature_p, temperature_q):
        p, q = distributions_at(logits_p, logits_q, position, temperature_p, temperature_q)
        shown = shown_tokens(p, q, n_show)
        context = tok.decode([int(t) for t in ids[: position + 1]])
        return ExplorerPair(p, q, [token_label(tok, t) for t in shown], shown,
                            title=f"next token after {context!r}: p = {draft.name} at T = {temperature_p:.2f}, "
                                  f"q = {target.name} at T = {temperature_q:.2f}")

    return sliders, pair


def theorem1_explorer(draft=None, target=None, ids=None, tok=None, n_show=10, seed=0):
    """The interactive Theorem 1 explorer: toy distributions by default, or the real models' next-token
    distributions after each position of the prompt `ids`. Returns an ipywidgets.VBox."""
    import ipywidgets as w
    if draft is None:
        sliders, make_pair = toy_controls()
    else:
        sliders, make_pair = model_controls(draft, target, ids, tok, n_show)
    readout_html = w.HTML(description="Theorem 1", style={"description_width": "initial"})
    figure_out = w.Output(layout={"min_height": "300px"})
    n_trials = w.Dropdown(options=[("100", 100), ("1,000", 1000), ("10,000", 10_000), ("100,000", 100_000)],
                          value=10_000, description="trials n")
    run_button = w.Button(description="Run Monte-Carlo", tooltip="draft x̃ ~ p, accept or resample, n times",
                          button_style="primary")
    histogram_out = w.Output(layout={"min_height": "300px"})
    rng = np.random.default_rng(seed)
    current = {}

    def redraw(_change=None):
        current["pair"] = pair = make_pair(**{name: s.value for name, s in sliders.items()})
        readout_html.value, figure_out.outputs, _ = explorer_update(pair.p, pair.q, pair.labels, pair.shown, pair.title)
        histogram_out.outputs = (text_output("Press “Run Monte-Carlo” to push n drafted tokens through accept/resample."),)

    def run_monte_carlo(_button=None):
        pair = current["pair"]
        histogram_out.outputs, _ = monte_carlo_update(pair.p, pair.q, n_trials.value, int(rng.integers(2**32)),
                                                      pair.labels, pair.shown)

    for s in sliders.values():
        s.observe(redraw, names="value")
    run_button.on_click(run_monte_carlo)
    redraw()
    return w.VBox([w.HBox(list(sliders.values())[:2]), w.HBox(list(sliders.values())[2:]), readout_html,
                   figure_out, w.HBox([n_trials, run_button]), histogram_out])
