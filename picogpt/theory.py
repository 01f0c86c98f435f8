"""How much faster speculative sampling should be: the formulas, pure and vectorised.

alpha is the acceptance rate, the chance that one drafted token is kept:
alpha = E_x~p[min(1, q(x)/p(x))] = sum_x min(p(x), q(x)) (Leviathan, Kalman, Matias 2023,
"Fast Inference from Transformers via Speculative Decoding", arXiv 2211.17192, Section 3;
they call the target p and the draft q, the reverse of Chen et al.; min is symmetric).
If each of the K drafts is kept with probability alpha independently, one loop emits
1 + alpha + ... + alpha^K = (1 - alpha^(K+1)) / (1 - alpha) tokens on average (the accepted
drafts, then one resampled or extra token).

Every function accepts numbers or numpy arrays (broadcast together) and returns the same.
"""

import math

import numpy as np

from .errors import PicoGPTError, echo
from .sampling import is_whole


def as_result(x):
    """A 0-d array back to a plain float, arrays unchanged."""
    x = np.asarray(x)
    return x.item() if x.ndim == 0 else x


def acceptance_rate(p, q):
    """alpha = sum_x min(p(x), q(x)): the chance a token drafted from p is kept when the target
    is q. p, q [..., n_vocab] -> [...]."""
    return as_result(np.sum(np.minimum(np.asarray(p, np.float64), np.asarray(q, np.float64)), axis=-1))


def expected_tokens_per_loop(alpha, K):
    """(1 - alpha^(K+1)) / (1 - alpha): the mean tokens one loop (one target call) emits;
    K + 1 when alpha = 1."""
    alpha, K = np.asarray(alpha, np.float64), np.asarray(K)
    one = alpha == 1
    safe = np.where(one, 0.5, alpha)  # any value != 1: the formula is not used where alpha = 1
    return as_result(np.where(one, K + 1.0, (1 - safe ** (K + 1)) / (1 - safe)))


def predicted_speedup(alpha=None, K=None, t_draft_s=None, t_target_s=None, t_score_s=None, *,
                      tokens_per_loop=None):
    """Tokens per loop / loop time, against one token per t_target_s: the arithmetic of Jay Mody's
    post "Speculative Sampling" (Chen et al. write down no speedup formula).

        speedup = tokens_per_loop / (K t_draft_s + t_score_s)  /  (1 / t_target_s)

    t_score_s is the time of one target call scoring K + 1 positions (defaults to t_target_s,
    the time of one decoding step: memory-bound models score a few positions for about the
    price of one). Give either alpha (tokens_per_loop is then expected_tokens_per_loop(alpha, K))
    or the observed tokens_per_loop.

    Mody's worked example, on the paper's measured costs (Chinchilla 70B, 4B draft: t_draft
    1.8 ms, t_target 14.1 ms, K = 4) with tokens_per_loop = r (K + 1) for r = 0.8 and 0.62:

        predicted_speedup(K=4, t_draft_s=1.8e-3, t_target_s=14.1e-3, tokens_per_loop=0.8 * 5)
        -> 2.65   (and 2.05 for 0.62 * 5)
    """
    if (alpha is None) == (tokens_per_loop is None):
        raise PicoGPTError("give exactly one of alpha (acceptance rate) or tokens_per_loop")
    if K is None or t_draft_s is None or t_target_s is None:
        raise PicoGPTError("predicted_speedup needs K, t_draft_s and t_target_s")
    if tokens_per_loop is None:
        tokens_per_loop = expected_tokens_per_loop(alpha, K)
    t_score_s = t_target_s if t_score_s is None else t_score_s
    t_loop_s = np.asarray(K) * np.asarray(t_draft_s) + np.asarray(t_score_s)
    return as_result(np.asarray(tokens_per_loop) / t_loop_s * np.asarray(t_target_s))


def predicted_speedup_leviathan(alpha, K, c):
    """Leviathan et al.'s expected walltime improvement (Section 3): (1 - alpha^(K+1)) / ((1 - alpha)(K c + 1)), with
    c = t_draft / t_target (the draft's cost per token relative to the target's), assuming
    scoring K + 1 positions costs one target step."""
    return as_result(np.asarray(expected_tokens_per_loop(alpha, K)) / (np.asarray(K) * np.asarray(c) + 1))


def best_K(alpha, c, K_max=32):
    """The K in 1..K_max with the highest predicted_speedup_leviathan(alpha, K, c) (the smallest
    such K at a tie). alpha, c: numbers or arrays (broadcast) -> an int or an array of ints."""
    Ks = np.arange(1, K_max + 1)
    alpha, c = np.asarray(alpha, np.float64), np.asarray(c, np.float64)
    shape = np.broadcast_shapes(alpha.shape, c.shape)
    Ks_grid = Ks.reshape((-1,) + (1,) * len(shape))  # [K_max, 1, ...] against [...]
    speedups = np.asarray(predicted_speedup_leviathan(alpha, Ks_grid, c))  # [K_max, ...]
    return as_result(Ks[np.argmax(speedups, axis=0)])


# ---------------------------------------------------------------------------------------------
# Token trees (picogpt/tree.py, notebook 07)
# ---------------------------------------------------------------------------------------------

def acceptance_with_candidates(p, q, m):
    """alpha_m: the chance that the multi-candidate step (rejection.accept_among) keeps one of m
    candidates drawn independently from p, when the target is q:
        alpha_m = 1 - prod_{i=1..m} (1 - sum_x min(p(x), q_i(x))),  q_1 = q, q_{i+1} = (q_i - p)+.
    Round i rejects with probability 1 - sum min(p, q_i) whatever was drawn before, and q_{i+1}
    does not depend on which candidate it rejected, so the rounds' rejections multiply. alpha_1 is
    acceptance_rate. (Candidates drawn without replacement, as picogpt/tree.py's draft draws them,
    have no such product: their rows change with each candidate.) p, q [..., n_vocab] -> [...]."""
    p, q_i = np.asarray(p, np.float64), np.asarray(q, np.float64)
    rejected = np.ones(np.broadcast_shapes(p.shape, q_i.shape)[:-1])
    for _ in range(m):
        rejected = rejected * (1 - np.sum(np.minimum(p, q_i), axis=-1))
        positive = np.maximum(0.0, q_i - p)
        mass = positive.sum(axis=-1, keepdims=True)
        q_i = np.where(mass > 0, positive / np.where(mass > 0, mass, 1.0), q_i)  # mass 0: never rejected again
    return as_result(1 - rejected)


def expected_tokens_per_tree_loop(alphas):
    """1 + a_1 + a_1 a_2 + ... + a_1 a_2 ... a_D: the mean tokens one loop of tree sampling emits
    when the walk goes past level d with probability a_d, the same at every node of that level
    (alphas [..., D]; a level of m candidates per node: acceptance_with_candidates(p, q, m)). With
    a_d = alpha at every level it is Leviathan et al.'s Eq. 1 for a chain of D drafts,
    (1 - alpha^(D+1)) / (1 - alpha), under the same assumption: the acceptances do not depend on the text."""
    return as_result(1 + np.sum(np.cumprod(np.asarray(alphas, np.float64), axis=-1), axis=-1))


# ---------------------------------------------------------------------------------------------
# A block judged together (speculative.block_step, notebook 08)
# ---------------------------------------------------------------------------------------------
#
# The drafts kept per loop, for a draft p and a target q that do not depend on the text (the
# setting of Leviathan et al.'s Eq. 1 and of Sun et al.'s two-token example, arXiv 2403.10444).
# Token by token, the first i drafts are all kept with probability alpha^i. Block verification
# keeps them with probability E[w_i], the mean running weight over drafts x~_1 .. x~_i ~ p
# (rejection.running_weight; averaged over the later drafts, P(at least i kept | x~_1 .. x~_i) = w_i,
# the identity its proof of exactness rests on). No verifier that emits q can keep the first i
# drafts with probability more than sum over x_1 .. x_i of min(p(x_1) .. p(x_i), q(x_1) .. q(x_i)):
# the kept prefix must have been drafted (at most p's mass) and emitted (at most q's).
# The sum over i = 1 .. K of each is the expected drafts kept per loop; tokens per loop are 1 more.
# These enumerate n_vocab^K sequences: for small vocabularies.

MAX_ENUMERATED = 2**22  # sequences (times the leading rows) an enumeration below may hold: 32 MB per float64 array


def checked_K(K, p, q, enumerates=True):
    """K as the functions below take it: a whole number >= 0 whose work fits in MAX_ENUMERATED
    entries (n_vocab^K sequences for each leading row when the function `enumerates` them, else
    K per row); one readable error otherwise, before any array is made."""
    if not is_whole(K) or K < 0:
        raise PicoGPTError(f"K, the drafts per loop, must be a whole number >= 0, got {echo(K, 40)}")
    shape = np.broadcast_shapes(np.shape(p), np.shape(q))
    rows, n_vocab = math.prod(shape[:-1]), shape[-1] if shape else 1
    per_row = math.log(n_vocab) * K if enumerates else math.log(max(K, 1))  # log of the entries per row
    if per_row + math.log(max(rows, 1)) > math.log(MAX_ENUMERATED):
        what = f"{n_vocab}^{K} sequences" if enumerates else f"{K} positions"
        raise PicoGPTError(f"K = {K} would enumerate {what} for each of {rows} row(s), more than {MAX_ENUMERATED:,}: "
                           "these formulas enumerate every drafted sequence, so give a smaller K or vocabulary")
    return K


def kept_probabilities_token_wise(p, q, K):
    """P(the first i drafts are all kept) by Theorem 1's step, i = 1 .. K: alpha^i.
    p, q [..., n_vocab] -> [..., K]."""
    K = checked_K(K, p, q, enumerates=False)
    alpha = np.asarray(acceptance_rate(p, q), np.float64)[..., None]
    return alpha ** np.arange(1, K + 1)


def kept_probabilities_block(p, q, K):
    """P(block verification keeps at least i drafts) = E[w_i], i = 1 .. K, the running weight
    w_i = min(1, w_{i-1} q(x~_i) / p(x~_i)) averaged over x~_1 .. x~_i ~ p by enumeration.
    p, q [..., n_vocab] -> [..., K]."""
    K = checked_K(K, p, q)
    p, q = np.broadcast_arrays(np.asarray(p, np.float64), np.asarray(q, np.float64))
    ratio = np.divide(q, p, out=np.zeros_like(q), where=p > 0)  # q(x) / p(x); 0 where p never drafts x
    weight, mass = np.ones(p.shape[:-1] + (1,)), np.ones(p.shape[:-1] + (1,))  # w_0 = 1 on the empty prefix
    kept = []
    for _ in range(K):
        weight = np.minimum(1.0, weight[..., :, None] * ratio[..., None, :]).reshape(p.shape[:-1] + (-1,))
        mass = (mass[..., :, None] * p[..., None, :]).reshape(p.shape[:-1] + (-1,))  # p(x~_1 .. x~_i)
        kept.append(np.sum(mass * weight, axis=-1))
    return np.stack(kept, axis=-1) if kept else np.zeros(p.shape[:-1] + (0,))


def kept_probabilities_bound(p, q, K):
    """No exact verifier keeps the first i drafts more often than sum over x_1 .. x_i of
    min(p(x_1)..p(x_i), q(x_1)..q(x_i)), the overlap of the i-fold products, i = 1 .. K.
    p, q [..., n_vocab] -> [..., K]."""
    K = checked_K(K, p, q)
    p, q = np.broadcast_arrays(np.asarray(p, np.float64), np.asarray(q, np.float64))
    p_joint, q_joint = np.ones(p.shape[:-1] + (1,)), np.ones(p.shape[:-1] + (1,))  # of the empty prefix
    kept = []
    for _ in range(K):  # the i-fold products, [..., n_vocab^i]
        p_joint = (p_joint[..., :, None] * p[..., None, :]).reshape(p.shape[:-1] + (-1,))
        q_joint = (q_joint[..., :, None] * q[..., None, :]).reshape(p.shape[:-1] + (-1,))
        kept.append(np.sum(np.minimum(p_joint, q_joint), axis=-1))
    return np.stack(kept, axis=-1) if kept else np.zeros(p.shape[:-1] + (0,))


KEPT_PROBABILITIES = {"token": kept_probabilities_token_wise, "block": kept_probabilities_block,
                      "bound": kept_probabilities_bound}


def expected_accepted_drafts(p, q, K, verify="token"):
    """Mean drafts kept per loop, the sum over i of P(the first i are kept): verify="token" (Theorem
    1's step: (1 - alpha^(K+1)) / (1 - alpha) - 1), "block" (block verification) or "bound" (no exact
    verifier keeps more). Sun et al.'s example, p = (2/3, 1/3), q = (1/3, 2/3), K = 2:
    10/9, 11/9, 12/9. p, q [..., n_vocab] -> [...]."""
    if not isinstance(verify, str) or verify not in KEPT_PROBABILITIES:
        raise PicoGPTError(f"verify={echo(verify, 40)}: expected one of {', '.join(map(repr, KEPT_PROBABILITIES))}")
    return as_result(np.sum(KEPT_PROBABILITIES[verify](p, q, K), axis=-1))
