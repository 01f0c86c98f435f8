"""Notebook 08 (verify the block): what only it uses. Its exercise, block verification's Steps 3-4,
with the paper's rule and the realistic mistakes as values (`BlockRule`), graded by the course's one
grader (grading.check_sampler) through the chain step's contract (chain_step.py), and a question
to answer by hand; its panels (pure functions: one loop laid out position by position, the
drafts-kept explorer's exact numbers, the verifiers measured side by side); its figures; the
drafts-kept explorer; and block verification checked exactly on a toy pair.

You write `block_step(drafted, p, q, rng) -> list[int]`, with the arguments and output of
notebook 03's `speculative_step` (speculative_sampling's `verify=` runs either), and it returns
x̃_1 .. x̃_i for the largest i whose uniform passes its keep probability h_i, then one token from
the weighted residual (w_i q_{i+1} − p_{i+1})+, or from q[K] when all K are kept (Sun et al. 2025,
arXiv 2403.10444, their Algorithm 2; picogpt.speculative.block_step). `NAMED_IN_03` holds the slips
of writing the code that notebook 03's grader names too, by the same names. The figures need
matplotlib (the `dev` extra).
"""

import inspect
from dataclasses import dataclass
from itertools import product

import numpy as np
from matplotlib.figure import Figure

from .. import rejection, speculative, theory
from ..errors import PicoGPTError
from ..sampling import sample
from ..speculative import block_keep_probabilities
from .chain_step import NO_BONUS, NO_DRAFTS, WRONG_ROW, StepCase, chain_exercise, shaped
from .figures import COLOURS, figure_png, new_ax, room_for_legend
from .grading import TRIALS, check_number, check_sampler, most_likely
from .model_runs import loop_rows
from .panels import tv_distance
from .speed_panels import VERIFIER_NAMES
from .toy_models import joint_distribution
from .widgets import png_output, slider

# ---------------------------------------------------------------------------------------------
# How the kept prefix is chosen from the keep probabilities h_1 .. h_K
# ---------------------------------------------------------------------------------------------

def clipped(h):
    return np.clip(np.asarray(h, np.float64), 0.0, 1.0)


@dataclass(frozen=True)
class Choice:
    """How n_kept follows from uniforms eta [K] and keep probabilities h [K]: `pick` on one draw,
    `law` its exact distribution over n_kept = 0 .. K, `uniforms` how the eta are drawn."""
    name: str
    pick: object  # (eta, h) -> n_kept
    law: object  # h -> [K + 1]
    shared: bool = False  # one uniform for the whole block

    def uniforms(self, rng, K):
        return np.full(K, rng.random()) if self.shared and K else rng.random(K)


def largest_passing(eta, h):
    return max((i for i in range(1, len(h) + 1) if eta[i - 1] < h[i - 1]), default=0)


def largest_passing_law(h):
    """P(n_kept = i) = h_i (1 - h_{i+1}) .. (1 - h_K): i passes, no later one does (h_0 = 1)."""
    h, law, none_later = clipped(h), np.zeros(len(h) + 1), 1.0
    for i in range(len(h), -1, -1):
        h_i = 1.0 if i == 0 else h[i - 1]
        law[i], none_later = h_i * none_later, none_later * (1.0 - h_i)
    return law


def first_failing(eta, h):
    return next((i for i in range(len(h)) if not eta[i] < h[i]), len(h))


def first_failing_law(h):
    """P(n_kept = i) = h_1 .. h_i (1 - h_{i+1}): stop at the first position that fails."""
    h, law, reached = clipped(h), np.zeros(len(h) + 1), 1.0
    for i, h_i in enumerate(h):
        law[i], reached = reached * (1.0 - h_i), reached * h_i
    law[len(h)] = reached
    return law


def one_uniform_law(h):
    """One eta for every position: n_kept = i when h_i > eta >= max(h_{i+1} .. h_K)."""
    h, law, above = clipped(h), np.zeros(len(h) + 1), 0.0
    for i in range(len(h), 0, -1):
        law[i], above = max(0.0, h[i - 1] - above), max(above, h[i - 1])
    law[0] = 1.0 - above
    return law


def largest_failing(eta, h):
    return max((i for i in range(1, len(h) + 1) if not eta[i - 1] < h[i - 1]), default=0)


LARGEST_PASSING = Choice("the largest i that passes", largest_passing, largest_passing_law)
INVERTED = Choice("the largest i that fails", largest_failing, lambda h: largest_passing_law(1.0 - clipped(h)))
FIRST_FAILING = Choice("stop at the first failure", first_failing, first_failing_law)
ONE_UNIFORM = Choice("one uniform, the largest i that passes", largest_passing, one_uniform_law, shared=True)

# ---------------------------------------------------------------------------------------------
# The running weight, the keep probabilities, the last token: the paper's and the mistakes'
# ---------------------------------------------------------------------------------------------


def uncapped_weight(weight, p, q, x):
    """w_{i-1} q(x) / p(x) without min(1, ·): a plain cumulative product of the ratios."""
    return weight * float(q[x]) / float(p[x])


def paper_keep(weights, drafted, p, q):
    """h_i = Z_i / (Z_i + 1 - w_i) for i < K, h_K = w_K (rejection.block_keep_probability)."""
    K = len(drafted)
    return [rejection.block_keep_probability(weights[i], p[i], q[i]) for i in range(1, K)] + [weights[K]]


def last_like_the_others(weights, drafted, p, q):
    """h_K from the formula of the other positions, with p's last row standing in for the next one
    (there is none: no draft follows x̃_K)."""
    K = len(drafted)
    return paper_keep(weights, drafted, p, q)[:-1] + [rejection.block_keep_probability(weights[K], p[K - 1], q[K])]


def token_by_token(weights, drafted, p, q):
    """Theorem 1's min(1, q_i(x̃_i) / p_i(x̃_i)) at each position: with the first failure ending the
    block and (q − p)+ after it, this rule is Algorithm 2."""
    return [rejection.accept_probability(p[i], q[i], x) for i, x in enumerate(drafted)]


def every_like_the_last(weights, drafted, p, q):
    """h_i = w_i at every position: the running product compared with a uniform, token-wise style."""
    return list(weights[1:])


def weighted_residual(weights, p, q, n_kept, K):
    """The paper's last token: from q[K] when all K are kept, else (w_i q_{i+1} − p_{i+1})+."""
    if n_kept == K:
        return np.asarray(q[K], np.float64)
    return rejection.weighted_residual(weights[n_kept], p[n_kept], q[n_kept])


def unweighted_residual(weights, p, q, n_kept, K):
    """Theorem 1's (q_{i+1} − p_{i+1})+, the running weight left out."""
    return weighted_residual([1.0] * (K + 1), p, q, n_kept, K)


def q_row(weights, p, q, n_kept, K):
    return np.asarray(q[n_kept], np.float64)


def no_bonus(weights, p, q, n_kept, K):
    """Nothing after all K drafts are kept (None); K = 0 still gives its one token, from q[0]."""
    return None if n_kept == K and K else weighted_residual(weights, p, q, n_kept, K)


def bonus_from_q_before(weights, p, q, n_kept, K):
    """The extra token from q[K − 1], the row that judged the last draft, instead of q[K]."""
    return np.asarray(q[K - 1], np.float64) if n_kept == K else weighted_residual(weights, p, q, n_kept, K)


def residual_argmax(weights, p, q, n_kept, K):
    """The weighted residual's most likely token in place of a sample from it."""
    last = weighted_residual(weights, p, q, n_kept, K)
    return last if n_kept == K else most_likely(last)


@dataclass(frozen=True)
class BlockRule:
    """One way to write block verification's Steps 3-4 for p [K, V], q [K + 1, V]: running weights
    w_i = weight(w_{i-1}, p[i-1], q[i-1], x̃_i), keep probabilities keep(weights, p, q, K), the kept
    prefix chosen by `choice` from keep(weights, drafted, p, q) (h_1 .. h_K), then one token from
    last(weights, p, q, n_kept, K)."""
    name: str
    hint: str  # what to fix, said to the learner
    weight: object = rejection.running_weight
    keep: object = paper_keep
    choice: Choice = LARGEST_PASSING
    last: object = weighted_residual

    def weights_and_keep(self, drafted, p, q):
        K, weights = len(drafted), [1.0]
        for i, x in enumerate(drafted):
            weights.append(self.weight(weights[-1], p[i], q[i], x))
        return weights, (self.keep(weights, drafted, p, q) if K else [])

    def step(self, drafted, p, q, rng):
        """This rule as a runnable step(drafted, p, q, rng) -> list[int] (random draws in the
        library's order). The paper's is the library's speculative.block_step."""
        if self is BLOCK:
            return speculative.block_step(drafted, p, q, rng)
        K = len(drafted)
        eta = self.choice.uniforms(rng, K)
        weights, keep = self.weights_and_keep(drafted, p, q)
        n_kept = self.choice.pick(eta, keep)
        last = self.last(weights, p, q, n_kept, K)
        return [int(x) for x in drafted[:n_kept]] + ([] if last is None else [sample(last, rng)])

    def output_distribution(self, drafted, p, q):
        """The exact probability of every output for these drafts: {tuple: probability}."""
        K = len(drafted)
        weights, keep = self.weights_and_keep(drafted, p, q)
        out = {}
        for n_kept, chance in enumerate(self.choice.law(keep)):
            if chance > 0:
                last = self.last(weights, p, q, n_kept, K)
                if last is None:  # no token after the kept drafts
                    key = tuple(int(x) for x in drafted[:n_kept])
                    out[key] = out.get(key, 0.0) + chance
                    continue
                for y in np.flatnonzero(last):
                    key = tuple(int(x) for x in drafted[:n_kept]) + (int(y),)
                    out[key] = out.get(key, 0.0) + chance * float(last[y])
        return out


TOKEN_BY_TOKEN = BlockRule(
    "token by token (notebook 03's step)", "that is Algorithm 2: exact, but it judges each draft on its own ratio "
    "q/p and stops at the first rejection. Block verification carries a running weight w_i along the block, keeps "
    "position i with h_i, and keeps the longest prefix whose position passes", keep=token_by_token,
    choice=FIRST_FAILING, last=unweighted_residual)
LARGEST = ("keep x̃_1 .. x̃_i for the LARGEST i with eta_i < h_i: a position that fails does not end the block, "
           "since a later draft the target likes more than the draft did raises the running weight again")
BLOCK = BlockRule("block verification", "")
MISTAKES = {rule.name: rule for rule in (
    BlockRule("stopping at the first failing position", f"you stopped at the first i with eta_i ≥ h_i, as token by "
              f"token verification stops at its first rejection; {LARGEST}", choice=FIRST_FAILING),
    BlockRule("the residual from q", "after keeping i drafts you sampled the next token from q_{i+1}; sample it from "
              "the weighted residual (w_i q_{i+1} − p_{i+1})+: the mass the draft already gave out through the kept "
              "blocks must not be given again", last=q_row),
    BlockRule("the residual without the running weight", "after keeping i drafts you sampled from (q_{i+1} − p_{i+1})+, "
              "Theorem 1's residual; block verification's is weighted by the running weight, (w_i q_{i+1} − p_{i+1})+ "
              "(the two agree only at i = 0, where w_0 = 1)", last=unweighted_residual),
    BlockRule("the running weight not capped at 1", "the running weight is w_i = min(1, w_{i-1} q(x̃_i) / p(x̃_i)): a "
              "probability, capped at 1. A plain cumulative product of q/p banks credit beyond certainty and spends it "
              "on later drafts", weight=uncapped_weight),
    BlockRule("the last position's h computed like the others", "the last position's keep probability is h_K = w_K: "
              "no draft follows x̃_K, so there is no next row p_{K+1} to form a residual mass with (the formula of "
              "the other positions with a draft row of zeros gives w_K too)", keep=last_like_the_others),
    BlockRule("every position's h computed like the last", "for i < K the keep probability is h_i = Z_i / (Z_i + 1 − w_i), "
              "Z_i = Σ max(0, w_i q_{i+1} − p_{i+1}), not w_i: only the last position uses its running weight as is",
              keep=every_like_the_last),
    BlockRule("one uniform for the whole block", "draw one uniform eta_i per position (rng.random(K)); with one eta "
              "for the block the positions' verdicts are tied together", choice=ONE_UNIFORM),
)}


# The slips of writing the code that notebook 03's grader names too, by the same names: they are not
# ways to verify a block (section 6's table leaves them out), only ways to get the code wrong
NAMED_IN_03 = {rule.name: rule for rule in (
    BlockRule("no bonus token", NO_BONUS, last=no_bonus),
    BlockRule("the bonus token from the wrong row", WRONG_ROW, last=bonus_from_q_before),
    BlockRule("argmax of the residual", "after the kept drafts, sample the token from the weighted residual with rng "
              "(rng.choice(V, p=residual)); its most likely token, argmax, is greedy decoding: the tokens the residual "
              "gives less mass never come out, and the text is no longer distributed as q", last=residual_argmax),
    BlockRule("the comparison inverted, eta_i ≥ h_i", "keep x̃_1 .. x̃_i for the largest i with eta_i < h_i, not "
              "eta_i ≥ h_i: inverted, the test passes the positions it should fail", choice=INVERTED),
)}


# ---------------------------------------------------------------------------------------------
# The exercise: the one grader, given block verification's rule, its mistakes and its cases
# ---------------------------------------------------------------------------------------------


def grading_cases():
    """Small cases (K = 3, 3, 2 over three tokens) on which every mistake moves the law of (drafts,
    output) by a total-variation distance of 0.06 or more in some case, and every two mistakes differ
    (tests/test_block_course.py checks both); then rows as the loop makes them at temperature 0.7
    with top-p 0.9 (zeros in both), K = 4 (a slip that only shows from the fourth draft on), and
    K = 0, which the loop sends when a draft proposes nothing."""
    def rows(*r):
        return np.array(r, np.float64)
    return (
        StepCase(p=rows([0.4, 0.41, 0.19], [0.02, 0.81, 0.17], [0.68, 0.04, 0.28]),
                 q=rows([0.18, 0.21, 0.61], [0.31, 0.42, 0.27], [0.01, 0.58, 0.41], [0.7, 0.18, 0.12])),
        StepCase(p=rows([0.03, 0.91, 0.06], [0.38, 0.02, 0.6], [0.39, 0.37, 0.24]),
                 q=rows([0.1, 0.65, 0.25], [0.51, 0.46, 0.03], [0.18, 0.77, 0.05], [0.04, 0.09, 0.87])),
        StepCase(p=rows([0.3, 0.6, 0.1], [0.6, 0.3, 0.1]), q=rows([0.15, 0.45, 0.4], [0.1, 0.45, 0.45], [0.3, 0.3, 0.4])),
        StepCase(p=shaped([[2.0, 1.2, 0.9, -1.0], [0.2, 1.5, -0.5, 1.1]], temperature=0.7, top_p=0.9),
                 q=shaped([[1.0, 2.0, -1.0, 0.6], [1.5, 0.3, 1.0, -2.0], [0.0, 1.0, 1.8, 0.5]], temperature=0.7, top_p=0.9),
                 label="temperature 0.7 with top-p 0.9"),
        StepCase(p=rows([0.5, 0.3, 0.2], [0.2, 0.5, 0.3], [0.3, 0.3, 0.4], [0.4, 0.4, 0.2]),
                 q=rows([0.3, 0.5, 0.2], [0.4, 0.3, 0.3], [0.2, 0.4, 0.4], [0.5, 0.2, 0.3], [0.2, 0.2, 0.6])),
        StepCase(p=np.zeros((0, 3)), q=rows([0.2, 0.5, 0.3]), label=NO_DRAFTS),
    )


AFTER_THE_LAST_TOKEN = ("for drafts {drafts} it returned {output}: after the kept drafts x̃_1 .. x̃_i the loop emits "
                        "exactly one more token (from the weighted residual, or from q[K] when all K are kept) and stops")
BLOCK_EXERCISE = chain_exercise(
    "block verification", BLOCK, {**MISTAKES, TOKEN_BY_TOKEN.name: TOKEN_BY_TOKEN, **NAMED_IN_03}, grading_cases(),
    call="check_block_step(my_block_step)", next_token="the token drawn after keeping {i} draft(s), x̃_{t} not kept",
    walk_through="Walk through it: w_0 = 1, w_i = min(1, w_{i-1} q_i(x̃_i) / p_i(x̃_i)); h_i = Z_i / (Z_i + 1 − w_i) "
                 "with Z_i = Σ max(0, w_i q_{i+1} − p_{i+1}) for i < K, h_K = w_K; one uniform eta_i per position; keep "
                 "x̃_1 .. x̃_i for the largest i with eta_i < h_i; then one token from (w_i q_{i+1} − p_{i+1})+, or from "
                 "q[K] when all K are kept.",
    nan_hint=("A NaN comes from normalising max(0, w q − p) when its sum is 0. After keeping i drafts the token comes "
              "from (w_i q_{i+1} − p_{i+1})+, with the weight of the i drafts kept, w_i = weights[i] (w_0 = 1), and the "
              "rows q[i] and p[i]; its sum is 0 for i ≥ 1 only where h_i = 0 (or w_i = 1 and the next position keeps "
              "every draft), so the block never stops there. Either your residual is another (a weight from another "
              "position, w_{i+1} say, can leave nothing positive) or your block stopped where it cannot: check your "
              "h_i and how you choose the kept prefix (the largest i with eta_i < h_i)."),
    after_a_non_draft={"extra": AFTER_THE_LAST_TOKEN, "judged on": AFTER_THE_LAST_TOKEN})


def check_block_step(fn, trials=TRIALS, seed=0):
    """Grade a learner's block_step(drafted, p, q, rng) -> list[int] by its output distribution
    (grading.check_sampler, given BLOCK_EXERCISE); returns a Check."""
    return check_sampler(fn, BLOCK_EXERCISE, trials, seed)


def solution():
    """The library's own block verification: print it when you are stuck."""
    print(inspect.getsource(speculative.block_keep_probabilities))
    print(inspect.getsource(speculative.block_verification))


def check_both_kept(answer, p=(0.6, 0.4), q=(0.3, 0.7)):
    """Over {a, b}, draft p and target q (the same at every position), K = 2, the drafts a then b:
    the probability that block verification keeps both."""
    rows_p, rows_q = np.array([p, p], np.float64), np.array([q, q, q], np.float64)
    weights, keep = speculative.block_keep_probabilities([0, 1], rows_p, rows_q)
    token_wise = rejection.accept_probability(p, q, 0) * rejection.accept_probability(p, q, 1)
    return check_number(
        answer, keep[1],
        how="both are kept exactly when position 2 passes, with h_2 = w_2 = min(1, w_1 q(b)/p(b)) and "
            "w_1 = min(1, q(a)/p(a))",
        solution=(f"w_1 = min(1, {q[0]}/{p[0]}) = {weights[1]:g}: 'a' is over-proposed. w_2 = min(1, {weights[1]:g} × "
                  f"{q[1]}/{p[1]}) = {weights[2]:g}: 'b', under-proposed, pays part of that back. The last position "
                  f"passes with h_2 = w_2, so both are kept with {keep[1]:g}; token by token keeps both with "
                  f"{token_wise:g}."),
        mistakes=[(token_wise, "that is token by token, min(1, q(a)/p(a)) × min(1, q(b)/p(b)): block verification "
                               "carries the running weight, w_2 = min(1, w_1 q(b)/p(b))")])


# ---------------------------------------------------------------------------------------------
# The panels: one loop laid out position by position
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BlockLoop:
    """What block verification computes for one loop's drafts and uniforms."""
    drafted: tuple  # x̃_1 .. x̃_K
    ratio: np.ndarray  # q_i(x̃_i) / p_i(x̃_i) [K]
    token_wise: np.ndarray  # min(1, ratio) multiplied up to i: P(token by token keeps x̃_1 .. x̃_i) [K]
    weights: np.ndarray  # w_1 .. w_K [K]
    keep: np.ndarray  # h_1 .. h_K [K]
    eta: np.ndarray  # the uniforms [K]
    n_kept: int  # the largest i with eta_i < h_i (0: none)
    first_failure: int  # the drafts before the first i with eta_i >= h_i
    residual: np.ndarray  # what the last token is drawn from: (w q - p)+ at n_kept + 1, or q[K] [n_vocab]
    unweighted: np.ndarray  # (q - p)+ at the same position (q[K] if all kept) [n_vocab]


def block_loop(drafted, p, q, eta):
    """Lay one loop out: drafted [K], p [K, V], q [K + 1, V], eta [K] the uniforms drawn."""
    K = len(drafted)
    weights, keep = block_keep_probabilities(drafted, p, q)
    ratio = np.array([q[i][x] / p[i][x] for i, x in enumerate(drafted)])
    passes = np.asarray(eta) < np.asarray(keep)
    n_kept = max((i + 1 for i in range(K) if passes[i]), default=0)
    first_failure = next((i for i in range(K) if not passes[i]), K)
    if n_kept == K:
        residual = unweighted = np.asarray(q[K], np.float64)
    else:
        residual = rejection.weighted_residual(weights[n_kept], p[n_kept], q[n_kept])
        unweighted = rejection.residual(p[n_kept], q[n_kept])
    return BlockLoop(tuple(int(x) for x in drafted), ratio, np.cumprod(np.minimum(1.0, ratio)), np.array(weights[1:]),
                     np.array(keep), np.asarray(eta, np.float64), n_kept, first_failure, residual, unweighted)


def loop_lines(loop, labels):
    """The loop as a table, one line per position: the draft, q/p, what token by token keeps, the
    running weight, h, eta and its verdict. labels: the drafts' texts [K]."""
    lines = ["  i  draft          q/p   token-wise P(keep 1..i)   w_i    h_i    eta_i"]
    for i in range(len(loop.drafted)):
        verdict = "passes" if loop.eta[i] < loop.keep[i] else "fails"
        lines.append(f"{i + 1:>3}  {labels[i]!r:<12} {loop.ratio[i]:>6.2f}  {loop.token_wise[i]:>12.3f}"
                     f"              {loop.weights[i]:.3f}  {loop.keep[i]:.3f}  {loop.eta[i]:.3f} {verdict}")
    return lines


def instructive(loop, visible_tv=0.05):
    """A loop that shows everything block verification does differently: a position fails and a
    later one passes (the block keeps more than stopping at the first failure would), and a draft is
    left after the kept ones, whose weighted residual differs visibly from Theorem 1's (q − p)+
    (total variation above `visible_tv`)."""
    return (loop.first_failure < loop.n_kept < len(loop.drafted)
            and tv_distance(loop.residual, loop.unweighted) > visible_tv)


# ---------------------------------------------------------------------------------------------
# Drafts kept per loop on a two-token vocabulary (the explorer): token by token, block, at most
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeptPanel:
    """P(the first i drafts are kept), i = 1 .. K, for p = (p_a, 1 - p_a), q = (q_a, 1 - q_a)."""
    p: np.ndarray
    q: np.ndarray
    K: int
    kept: dict  # verifier ("token", "block", "bound") -> [K]

    def expected(self, verify):
        """Mean drafts kept per loop."""
        return float(self.kept[verify].sum())


def kept_panel(p_a, q_a, K):
    """The explorer's numbers for one slider setting (theory.KEPT_PROBABILITIES)."""
    if not (0 <= p_a <= 1 and 0 <= q_a <= 1) or int(K) != K or not 1 <= K <= 12:
        raise PicoGPTError(f"p(a) = {p_a}, q(a) = {q_a}, K = {K}: expected probabilities in [0, 1] and K in 1..12")
    p, q = np.array([p_a, 1 - p_a]), np.array([q_a, 1 - q_a])
    return KeptPanel(p, q, int(K), {name: kept(p, q, int(K)) for name, kept in theory.KEPT_PROBABILITIES.items()})


NAMES = {**VERIFIER_NAMES, "bound": "the bound (no exact verifier keeps more)"}


def kept_readout(panel):
    """The sentence the explorer shows above its figure (HTML)."""
    token, block, bound = (panel.expected(v) for v in ("token", "block", "bound"))
    gain = f"{block / token - 1:+.1%}" if token > 0 else "n/a (token by token keeps none)"
    return (f"p = ({panel.p[0]:.2f}, {panel.p[1]:.2f}), q = ({panel.q[0]:.2f}, {panel.q[1]:.2f}), K = {panel.K}: "
            f"drafts kept per loop, token by token {token:.3f}, block {block:.3f} ({gain}), "
            f"at most {bound:.3f}")


# ---------------------------------------------------------------------------------------------
# Measured: the two verifiers in the same repeats (measure.speedup.measure_chains)
# ---------------------------------------------------------------------------------------------


def bench_verifier_lines(path=None):
    """The bench's committed block-verification rows (benchmarks/bench.json, "speculative" entries
    with "block"), each pair and temperature with where its weights came from; or a line saying
    they are not measured there."""
    from ..measure import speedup
    from ..measure.results import BENCH_JSON
    from .speed_panels import bench_source, read_bench, verifier_lines
    bench = read_bench(path or BENCH_JSON)
    entries = [entry for entry in (bench or {}).get("speculative", []) if "block" in entry]
    if not entries:
        return ["block verification: not in benchmarks/bench.json, not measured there "
                "(run: python -m picogpt bench --save)"]
    lines = []
    for entry in entries:
        block = speedup.from_dict(entry["block"])
        K = block.Ks[0]
        token = speedup.from_dict(entry["measurement"])
        lines += [f"the bench, {block.target}: {bench_source(bench, block.target)}",
                  *verifier_lines({"token": token, "block": block}, K), ""]
    return lines[:-1]


# ---------------------------------------------------------------------------------------------
# The figures
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# A block judged together (notebook 08): the drafts-kept explorer
# ---------------------------------------------------------------------------------------------

def kept_update(p_a, q_a, K):
    """What the drafts-kept explorer shows for one setting: (readout HTML, figure outputs,
    KeptPanel) for p = (p_a, 1 - p_a), q = (q_a, 1 - q_a) over {a, b} and K drafts."""
    panel = kept_panel(p_a, q_a, K)
    fig = Figure(figsize=(8, 3.8), layout="constrained")
    plot_kept(panel, ax=fig.subplots())
    text = kept_readout(panel)
    return text, (png_output(figure_png(fig), text),), panel


def kept_explorer(p_a=2 / 3, q_a=1 / 3, K=2):
    """Sliders for p(a), q(a) and K: the drafts kept per loop token by token, by block verification
    and at most, exactly. Starts at Sun et al.'s example. Returns an ipywidgets.VBox."""
    import ipywidgets as w
    sliders = {"p_a": slider("p(a), the draft", p_a, 0, 1, step=0.01), "q_a": slider("q(a), the target", q_a, 0, 1, step=0.01),
               "K": w.IntSlider(value=K, min=1, max=8, description="K drafts", continuous_update=False,
                                style={"description_width": "initial"})}
    readout_html = w.HTML()
    figure_out = w.Output(layout={"min_height": "300px"})

    def redraw(_change=None):
        readout_html.value, figure_out.outputs, _ = kept_update(**{name: s.value for name, s in sliders.items()})

    for control in sliders.values():
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox(list(sliders.values())), readout_html, figure_out])


# ---------------------------------------------------------------------------------------------
# Block verification checked exactly on a toy pair
# ---------------------------------------------------------------------------------------------

def one_loop_joint(draft, target, prompt, K, law=None, **controls):
    """The exact joint [V] * (K + 1) of the first K + 1 tokens when one loop with `law(drafted, p, q)`
    ({emitted tuple: probability}; default the paper's) runs on drafts sampled from the draft (toy
    models: every drafted tuple is enumerated), and the target samples the rest — what every later
    loop does, if the step is exact. The step is exact when this is the target's own joint."""
    law = BLOCK.output_distribution if law is None else law
    V = target.config.n_vocab
    total = np.zeros((V,) * (K + 1))
    for drafted in product(range(V), repeat=K):
        p, q, chance = loop_rows(draft, target, prompt, drafted, controls)
        if chance == 0:
            continue
        for emitted, p_emit in law(list(drafted), p, q).items():
            rest = K + 1 - len(emitted)
            total[emitted] += chance * p_emit * (joint_distribution(target, list(prompt) + list(emitted), rest, **controls)
                                                 if rest else 1.0)
    return total


def running_weight_gap(draft, target, prompt, K, law=None, **controls):
    """Step 1 of the proof, checked exactly on toy models: the largest |P(at least i drafts kept |
    x̃_1 .. x̃_i) - w_i| over every drafted prefix of i = 1 .. K drafts, the later drafts averaged
    out under the draft. 0 (up to rounding) for the paper's rule; `law` another one's."""
    law = BLOCK.output_distribution if law is None else law
    V, worst = target.config.n_vocab, 0.0
    for i in range(1, K + 1):
        for prefix in product(range(V), repeat=i):
            kept = mass = 0.0
            for later in product(range(V), repeat=K - i):
                p, q, chance = loop_rows(draft, target, prompt, prefix + later, controls)
                kept += chance * sum(prob for out, prob in law(list(prefix + later), p, q).items() if len(out) > i)
                mass += chance
            if mass > 0:
                weights, _ = block_keep_probabilities(list(prefix), p[:i], q[:i + 1])
                worst = max(worst, abs(kept / mass - weights[i]))
    return worst


def mistakes_lines(draft, target, prompt, K):
    """For block verification, token by token, and each mistake (MISTAKES): TV from the
    target of the first 1 .. K + 1 tokens, computed exactly. A mistake can be exact on the first tokens only."""
    exact = joint_distribution(target, prompt, K + 1)
    lines = [f"{'TV from the target, first n tokens:':48}" + "".join(f"  n = {n}  " for n in range(1, K + 2))]
    for rule in (BLOCK, TOKEN_BY_TOKEN, *MISTAKES.values()):
        joint = one_loop_joint(draft, target, prompt, K, rule.output_distribution)
        tvs = [tv_distance(joint.sum(axis=tuple(range(n, K + 1))), exact.sum(axis=tuple(range(n, K + 1))))
               for n in range(1, K + 2)]
        lines.append(f"{rule.name:48}" + "".join(f"  {tv:7.4f}" for tv in tvs))
    return lines
