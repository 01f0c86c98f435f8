"""The numbers behind the pictures of notebooks 01-06, as pure functions of the numbers handed in
(no matplotlib, no widgets, no model run: model_runs.py runs the models): toy next-token
distributions and a model's at a chosen position and temperature, Theorem 1's panel, the
Monte-Carlo of one accept/resample step (with a switch to wrong residuals), and the speculative
loop's trace as tables and marked text (notebooks 03-04), how far a scoring call's logits land
from one-row calls', loops whose acceptance varies and what a scoring call pays once (05).
Tested headless in tests/test_figures*.py, tests/test_theorem1_widget.py and, for every
sentence they print, tests/test_readouts.py.

Notation (Chen et al. 2023): p is the draft model's distribution, q the target's, x̃ a drafted
token, (f)+ = max(0, f) / Σ max(0, f).
"""

import functools
from dataclasses import dataclass

import numpy as np

from .. import theory
from ..errors import PicoGPTError
from ..rejection import RESIDUAL_MASS_EPS, accept_or_resample_many, accept_probabilities, output_distribution, residual
from ..sampling import distribution
from ..theory import acceptance_rate

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


def toy_distributions(centre_p=2.0, width_p=1.5, centre_q=4.0, width_q=1.0, n_vocab=None):
    """(p, q): a draft and a target over a toy vocabulary, shaped by four slider values.
    Moving the centres apart makes the models disagree; P(accept) = Σ min(p, q) falls."""
    n_vocab = len(TOY_VOCAB) if n_vocab is None else n_vocab
    return bump(centre_p, width_p, n_vocab), bump(centre_q, width_q, n_vocab)


def distributions_at(logits_p, logits_q, position, temperature_p=1.0, temperature_q=1.0, top_k=None, top_p=None):
    """(p, q) for the token after prompt position `position` (0-based), at the given temperatures."""
    n_seq = len(logits_p)
    if not 0 <= position < n_seq or len(logits_q) != n_seq:
        raise PicoGPTError(f"position {position} is outside the prompt's {n_seq} positions (0..{n_seq - 1})")
    p = distribution(logits_p[position], temperature_p, top_k, top_p)
    q = distribution(logits_q[position], temperature_q, top_k, top_p)
    return p, q


@functools.cache
def drawable_codepoints():
    """The characters matplotlib's default font (DejaVu Sans) can draw."""
    from matplotlib.font_manager import FontProperties, findfont
    from matplotlib.ft2font import FT2Font
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

RESIDUALS = {  # the explorer's switch: what a rejection resamples from (only the first is right)
    "(q − p)+": "correct: the residual (q − p)+",
    "q": "wrong: resample from q",
    "p": "wrong: resample from p",
    "none": "wrong: no test, always accept the draft",
}


def resample_choice(p, q, choice):
    """(q used by the accept test, distribution a rejection draws from) for a RESIDUALS choice.
    "none" keeps every draft: the accept test then compares p with itself (min(1, p/p) = 1)."""
    if choice not in RESIDUALS:
        raise PicoGPTError(f"residual choice {choice!r}: expected one of {', '.join(RESIDUALS)}")
    return {"(q − p)+": (q, residual(p, q)), "q": (q, q), "p": (q, p), "none": (p, p)}[choice]


@dataclass(frozen=True)
class Theorem1Panel:
    p: np.ndarray  # draft distribution [n_vocab]
    q: np.ndarray  # target distribution [n_vocab]
    overlap: np.ndarray  # min(p, q): P(draft x̃ = x and accept it) [n_vocab]
    excess: np.ndarray  # max(0, q - p): P(reject, then resample x) [n_vocab]
    residual: np.ndarray  # (q - p)+ = excess / Σ excess: what a rejection resamples from [n_vocab]
    p_accept: float  # Σ min(p, q)
    p_accept_naive: float  # Σ p q: keep the draft only if the target's own sample equals it
    identity_error: float  # max |min(p, q) + max(0, q - p) - q|: zero up to rounding
    choice: str = "(q − p)+"  # the residual switch (RESIDUALS)
    accepted: np.ndarray = None  # with this choice: P(x drafted and kept) [n_vocab]
    resampled: np.ndarray = None  # with this choice: P(reject, then x drawn) [n_vocab]
    resample_from: np.ndarray = None  # with this choice: what a rejection draws from [n_vocab]

    @property
    def output(self):
        """What the step emits with this choice: accepted + resampled. q when the choice is right."""
        return self.accepted + self.resampled

    @property
    def output_tv(self):
        """TV(output, q): 0 for the correct residual, the size of the error for a wrong one."""
        return tv_distance(self.output, self.q)

    @property
    def never_rejects(self):
        """p = q (within rejection.RESIDUAL_MASS_EPS): P(reject) = 0, and (q - p)+ is 0/0, never used."""
        return float(self.excess.sum()) <= RESIDUAL_MASS_EPS


def validate_pair(p, q):
    """p and q as float64 probability vectors over the same vocabulary, or a readable error."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    if p.ndim != 1 or p.shape != q.shape:
        raise PicoGPTError(f"p and q must be 1-D distributions over the same vocabulary, got shapes {p.shape} and {q.shape}")
    for name, d in (("p", p), ("q", q)):
        if np.any(d < 0) or abs(d.sum() - 1) > 1e-6:
            raise PicoGPTError(f"{name} is not a probability distribution (sum {d.sum():.6f}, min {d.min():.3g})")
    return p, q


def theorem1_panel(p, q, choice="(q − p)+"):
    """Everything the proof of Theorem 1 adds up, for one pair of distributions; `choice` picks
    what a rejection resamples from (RESIDUALS), to see a wrong residual break the identity."""
    p, q = validate_pair(p, q)
    overlap, excess = np.minimum(p, q), np.maximum(0.0, q - p)
    q_test, fallback = resample_choice(p, q, choice)
    output = output_distribution(p, q_test, resample_from=fallback)  # exact, enumerated
    accepted = np.minimum(p, q_test)
    return Theorem1Panel(p=p, q=q, overlap=overlap, excess=excess, residual=residual(p, q),
                         p_accept=acceptance_rate(p, q), p_accept_naive=float(p @ q),
                         identity_error=float(np.max(np.abs(overlap + excess - q))),
                         choice=choice, accepted=accepted, resampled=output - accepted, resample_from=fallback)


NOTHING_REJECTED = "undefined, never used: nothing is rejected"
VISIBLE_TV = 5e-4  # a TV below this prints as 0.000 and moves no bar visibly
ROUNDING_TV = 1e-12  # a TV below this is floating-point rounding: the output is q


def residual_is_q(panel):
    """(q - p)+ equals q itself (up to rounding): when q is a point mass, when p and q share no token,
    and in general when p is the same fraction of q on every token of q's."""
    return tv_distance(panel.residual, panel.q) <= ROUNDING_TV


def why_exact(panel):
    """Why a wrong choice of residual gives exactly q for this pair (a phrase), or None when it does
    not. The output of a wrong choice is min(p, q) + P(reject) x (what it draws from), which is q
    only where nothing is rejected or where what it draws from is (q - p)+ itself."""
    if panel.choice == "(q − p)+":
        return None
    if panel.never_rejects:
        return ("p = q here, so keeping every draft gives q" if panel.choice == "none" else
                "p = q here: nothing is rejected, so what a rejection would draw from is never used")
    if panel.choice != "q" or not residual_is_q(panel):
        return None
    if np.count_nonzero(panel.q) == 1:
        return ("q is a point mass, so (q − p)+ = q whatever p is: resampling from q is the right step here, "
                "and no p can tell the two apart; only a q with mass on more than one token can")
    if panel.p_accept <= RESIDUAL_MASS_EPS:
        return ("p and q share no token, so (q − p)+ = q: every draft is rejected, and a fresh draw from q is q; "
                "only a p that overlaps q can tell the two apart")
    return "on every token of q's, p is the same fraction of q, so (q − p)+ = q: resampling from q is the right step here"


def error_factors(panel):
    """TV(output, q) of a wrong choice, as the two numbers it is the product of: (P(reject),
    TV(what a rejection draws from, (q - p)+)); for "none" (no test, output p): (TV(p, q), 1)."""
    if panel.choice == "none":
        return 1.0 - panel.p_accept, 1.0
    return float(panel.excess.sum()), tv_distance(panel.resample_from, panel.residual)


def wrong_choice_text(panel):
    """What a wrong residual does to the output here: how far from q it lands, or why it gives exactly
    q for this pair. '' for the right residual."""
    if panel.choice == "(q − p)+":
        return ""
    why = why_exact(panel)
    if why:
        return f"{RESIDUALS[panel.choice]}, which gives exactly q for this pair: {why}"
    if panel.output_tv >= VISIBLE_TV:
        return f"{RESIDUALS[panel.choice]}: the output is not q, TV(output, q) = {panel.output_tv:.3f}"
    rejected, apart = error_factors(panel)
    if panel.choice == "none":
        return (f"{RESIDUALS[panel.choice]}: the output is p, not q, but TV(output, q) = TV(p, q) = {rejected:.1g} "
                "is too small to show: p is nearly q")
    return (f"{RESIDUALS[panel.choice]}: the output is not q, but TV(output, q) = P(reject) × TV(what it draws from, "
            f"(q − p)+) = {rejected:.2g} × {apart:.2g} = {rejected * apart:.1g} is too small to show; it grows with both factors")


def identity_title(panel):
    """The title over the accepted + resampled bars: the identity for the right residual; for a
    wrong one, whether its output is q for this pair, and how far from q it lands."""
    if panel.choice == "(q − p)+":
        return "min(p, q) + max(0, q − p) = q"
    if why_exact(panel):
        return "Wrong residual, yet output = q for this pair"
    if panel.output_tv >= VISIBLE_TV:
        return f"Wrong residual: output ≠ q, TV = {panel.output_tv:.3f}"
    return f"Wrong residual: output ≠ q, TV = {panel.output_tv:.1g} (too small to see)"


def readout(panel):
    """The sentence the explorer shows above its figure."""
    text = (f"P(accept) = Σ min(p, q) = {panel.p_accept:.3f} &nbsp;·&nbsp; "
            f"P(reject) = Σ max(0, q − p) = {1 - panel.p_accept:.3f} &nbsp;·&nbsp; "
            f"exact-match test (keep x̃ only if the target's own sample equals it): Σ p·q = {panel.p_accept_naive:.3f}")
    if panel.choice != "(q − p)+":
        text += f"<br><b>{wrong_choice_text(panel)}</b>"
    elif panel.never_rejects:
        text += f"<br>p = q: (q − p)+ is {NOTHING_REJECTED}"
    return text


# ---------------------------------------------------------------------------------------------
# No exact rule accepts more: the rejection step against the exact-match test and the bound
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Acceptance:
    """How often a drafted token x̃ ~ p is kept by exact rules (rules whose output is distributed as q)."""
    rejection: float  # Σ_x p(x) min(1, q(x)/p(x)): Algorithm 2's test, computed with the library's
    exact_match: float  # Σ_x p(x) q(x): keep x̃ only if the target's own sample equals it
    bound: float  # 1 - TV(p, q) = Σ_x min(p(x), q(x)): no exact rule keeps x̃ more often


def acceptance(p, q):
    """The three acceptance probabilities of one pair of distributions."""
    p, q = validate_pair(p, q)
    return Acceptance(rejection=float(p @ accept_probabilities(p, q)), exact_match=float(p @ q),
                      bound=1.0 - tv_distance(p, q))


TEMPERATURES = np.round(np.linspace(0.0, 2.0, 41), 2)  # the grid the acceptance curves are drawn on


def acceptance_curves(logits_p, logits_q, temperature_p=1.0, temperature_q=1.0, temperatures=TEMPERATURES):
    """The three acceptances as each model's temperature moves and the other's stays put:
    {"draft": [Acceptance per temperature of p, q at temperature_q],
     "target": [Acceptance per temperature of q, p at temperature_p]}. logits_* [n_vocab]."""
    def at(tau_p, tau_q):
        return acceptance(distribution(logits_p, tau_p), distribution(logits_q, tau_q))
    return {"draft": [at(tau, temperature_q) for tau in temperatures],
            "target": [at(temperature_p, tau) for tau in temperatures]}


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


def monte_carlo(p, q, n, seed=0, choice="(q − p)+"):
    """n accept/resample trials (the library's rejection.accept_or_resample_many): the empirical
    distribution of the output token, and its TV to q. `choice` (RESIDUALS) swaps in a wrong residual."""
    p, q = validate_pair(p, q)
    if int(n) < 1:
        raise PicoGPTError(f"the number of Monte-Carlo trials n must be at least 1, got {n}")
    q_test, fallback = resample_choice(p, q, choice)
    tokens, accepted = accept_or_resample_many(p, q_test, int(n), np.random.default_rng(seed), resample_from=fallback)
    counts = np.bincount(tokens, minlength=len(q))
    return MonteCarlo(counts=counts, n_accepted=int(accepted.sum()), tv=tv_distance(counts / n, q))


def shown_tv(mc, q, shown=None):
    """The TV distance a histogram of `shown` tokens can show: over those tokens plus one bucket
    holding all the others (with a large vocabulary, TV over every token is dominated by the
    sampling noise of the thousands of rare ones until n is far larger than the vocabulary).
    Returns (tv, what it is over)."""
    if shown is None or len(shown) >= len(q):
        return mc.tv, f"over all {len(q):,} tokens"
    return tv_distance(lump(mc.empirical, shown), lump(q, shown)), f"over the {len(shown)} tokens shown + the rest lumped"


def monte_carlo_text(panel, mc):
    """What a Monte-Carlo run of `panel`'s step did: how many trials kept the draft, what became of
    the rest, and (for a wrong residual) whether the output is q."""
    text = f"n = {mc.n:,} trial{'s' if mc.n > 1 else ''}: {mc.n_accepted / mc.n:.1%} accepted the drafted token, "
    if mc.n_accepted == mc.n:
        text += "none was rejected, so nothing was resampled"
    else:
        text += f"the rest resampled from {panel.choice}"
    if panel.choice == "(q − p)+":
        return text
    if why_exact(panel):
        return f"{text}; {wrong_choice_text(panel)}"
    if panel.output_tv >= VISIBLE_TV:
        return (f"{text}; {RESIDUALS[panel.choice]}: the output is not q: exactly, TV(output, q) = {panel.output_tv:.4f}, "
                "however large n is")
    return f"{text}; {wrong_choice_text(panel)}; exactly so, however large n is"


def tv_by_n(p, q, ns, seed=0):
    """TV(empirical, q) after the first n trials of one long run, for each n in ns."""
    p, q = validate_pair(p, q)
    tokens, _ = accept_or_resample_many(p, q, int(max(ns)), np.random.default_rng(seed))
    return np.array([tv_distance(np.bincount(tokens[:n], minlength=len(q)) / n, q) for n in ns])


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
                    "rejected" if i == loop.n_accepted else "not judged (after a rejection)")
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
    their labels, the index of the resampled token among them, and that of the rejected draft."""
    if not loop.resampled or loop.p is None:
        raise PicoGPTError("rejection_view needs a loop that ended in a rejection, traced with "
                           "speculative_sampling(..., keep_distributions=True)")
    t = loop.n_accepted  # 0-based: the first rejected draft
    panel = theorem1_panel(loop.p[t], loop.q[t])
    shown = shown_tokens(panel.p, panel.q, n_show, include=(loop.drafted[t], loop.new_token))
    labels = [token_label(tok, x) for x in shown]
    return panel, shown, labels, list(shown).index(loop.new_token), list(shown).index(loop.drafted[t])


def tokens_per_loop_counts(loops, K):
    """How many loops emitted 1, 2, ..., K + 1 tokens: [K + 1]."""
    return np.bincount([len(loop.tokens) for loop in loops], minlength=K + 2)[1: K + 2]


def tokens_per_loop_pmf(alpha, K):
    """P(a loop emits n tokens), n = 1..K+1, if each draft is accepted independently with
    probability alpha: alpha^(n-1) (1 - alpha) for n <= K, and alpha^K for n = K + 1. [K + 1]"""
    n = np.arange(1, K + 2)
    return np.where(n <= K, alpha ** (n - 1) * (1 - alpha), alpha**K)


@dataclass(frozen=True)
class PooledAcceptance:
    """Loops whose acceptance rate differs from loop to loop, simulated (notebook 05)."""
    K: int
    tokens_per_loop: float  # measured: mean tokens emitted per loop
    mean_alpha: float  # the loops' own rates, averaged
    alpha_hat: float  # pooled, as the sampler reports it: accepted / judged, over every loop

    @property
    def at_mean_alpha(self):
        """1 + a + ... + a^K at the mean rate: below the measured mean, since the sum is convex in a."""
        return float(theory.expected_tokens_per_loop(self.mean_alpha, self.K))

    @property
    def at_alpha_hat(self):
        """1 + a + ... + a^K at the pooled rate: what notebook 05's 'tokens' factor divides by."""
        return float(theory.expected_tokens_per_loop(self.alpha_hat, self.K))


def pooled_acceptance(alphas, K, n_loops=100_000, seed=0):
    """n_loops loops, each drawing its acceptance rate from `alphas` (equally likely) and then
    accepting each draft independently at that rate; returns the measured tokens per loop, the
    mean rate and the pooled estimate accepted / judged. Easy loops judge up to K drafts, hard
    ones about 1, so the pooled estimate leans towards the easy loops' rate."""
    rng = np.random.default_rng(seed)
    alpha = rng.choice(np.asarray(alphas, np.float64), size=n_loops)  # [n_loops]
    accepted = rng.random((n_loops, K)) < alpha[:, None]  # [n_loops, K] each draft's verdict
    n_accepted = np.where(accepted.all(axis=1), K, np.argmin(accepted, axis=1))  # up to the first rejection
    judged = np.minimum(n_accepted + 1, K)  # the accepted drafts and the rejected one, if any
    return PooledAcceptance(K=K, tokens_per_loop=float(np.mean(n_accepted + 1)), mean_alpha=float(alpha.mean()),
                            alpha_hat=float(n_accepted.sum() / judged.sum()))


def scoring_cost_line(Ks, score_ratios):
    """A straight line through t_score(K) / t_target against the K + 1 positions scored, as a
    sentence: what a call pays once and what each position adds, in target steps, and how much of a
    one-position call the once-per-call part is; or, when the fit puts either part at or below zero,
    that these timings are too noisy to split a call so."""
    positions = np.asarray(Ks, np.float64) + 1
    per_position, per_call = np.polyfit(positions, np.asarray(score_ratios, np.float64), 1)
    said = (f"t_score ≈ {per_call:.2f} {'−' if per_position < 0 else '+'} {abs(per_position):.2f} × (positions scored), "
            f"in t_target (a least-squares line over K + 1 = {positions.min():.0f}..{positions.max():.0f} positions)")
    if round(per_call, 2) <= 0 or round(per_position, 2) <= 0:
        return f"{said}: a part at or below zero, so these timings are too noisy to split a call that way"
    share = round(100 * per_call / (per_call + per_position))  # of a call on one position
    most = "most" if share > 50 else "half" if share == 50 else "less than half"
    return f"{said}: {most} of a one-position call ({share}%) is paid once per call"


# ---------------------------------------------------------------------------------------------
# Where floating point enters (notebook 03): a scoring call's logits against one-row calls'
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rounding:
    """A scoring call's logits against one-row calls' logits for the same positions."""
    max_abs_diff: float  # max |logit(scoring call) - logit(one-row calls)|
    max_relative_diff: float  # the same, over the largest |logit| of its row
    smallest_gap: float  # the smallest distance between a row's two largest logits (one-row calls)
    n_positions: int

    @property
    def could_flip_greedy(self):
        """A greedy choice can differ only where the two largest logits are nearer than the rounding."""
        return self.smallest_gap <= 2 * self.max_abs_diff


def rounding(scored, one_row):
    """How far a scoring call's logits [n_positions, n_vocab] land from one-row calls' for the same
    positions, and how near a tie the one-row calls' two largest logits come."""
    scored, one_row = np.asarray(scored, np.float64), np.asarray(one_row, np.float64)
    diff = np.abs(scored - one_row)  # [n_positions, n_vocab]
    top_two = np.sort(one_row, axis=-1)[:, -2:]  # [n_positions, 2]
    return Rounding(max_abs_diff=float(diff.max()),
                    max_relative_diff=float((diff.max(axis=-1) / np.abs(one_row).max(axis=-1)).max()),
                    smallest_gap=float((top_two[:, 1] - top_two[:, 0]).min()), n_positions=len(one_row))
