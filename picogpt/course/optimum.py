"""The best any exact verifier of a given kind can do, computed as a linear program (notebooks 08, 09).

A verifier is a rule that, for each draft it may see, chooses its output at random: its
probabilities are the unknowns. "The output is distributed exactly as q" is a set of linear
equations in them, and "drafts kept on average" a linear objective, so the best exact verifier of
the kind is the solution of a linear program, solved here with scipy.optimize.linprog (HiGHS) for
vocabularies small enough to enumerate every draft. scipy is a dev/course dependency; the core
(picogpt/*.py) stays NumPy-only.

- `best_chain_verifier`: a verifier that sees K drafts from p and keeps a prefix of them, then emits
  one token (Algorithm 2's kind, and block verification's). Sun et al. (arXiv 2403.10444, their
  optimality theorem) prove block verification the best of this kind; the program finds the same
  number (11/9 at their example, K = 2), below theory's overlap bound (12/9).
- `best_candidates_verifier`: a verifier that sees m candidates for one token and emits one token,
  counted as accepted when it is one of them (the optimal acceptance of Hu et al., arXiv
  2502.18779, and Khisti et al., arXiv 2410.18234), beside `multi_candidate_acceptance`, what the
  multi-candidate step (rejection.accept_among) keeps, candidates drawn with or without replacement.
p and q are the same at every position (they do not depend on the text), as in Sun et al.'s example.
"""

from itertools import product

import numpy as np
from scipy.optimize import linprog

from ..errors import PicoGPTError
from ..rejection import output_distribution_among


def _solve(gain, equations, rhs):
    """max gain . x subject to equations x = rhs, x >= 0; returns the maximum."""
    result = linprog(-np.asarray(gain), A_eq=np.asarray(equations), b_eq=np.asarray(rhs), bounds=(0, None),
                     method="highs")
    if result.status != 0:
        raise PicoGPTError(f"the linear program found no exact verifier: {result.message}")
    return float(-result.fun)


def _rows(p, q):
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    if p.shape != q.shape or p.ndim != 1 or len(p) > 6:
        raise PicoGPTError(f"p and q are one row each over the same vocabulary of at most 6 tokens, got shapes "
                           f"{p.shape} and {q.shape}: the program enumerates every draft")
    return p, q


def best_chain_verifier(p, q, K):
    """The most drafts kept per loop, on average, by any verifier that sees K drafts x~ ~ p and
    keeps a prefix x~_1 .. x~_j, then emits one token y, with the text (continued by q) exactly q.
    Unknowns: P(j, y | x~) for every drafted block x~ [V^K], j in 0..K, y [V]. Equations: for
    each block each rule sums to 1; for every text s of K + 1 tokens, sum over j of
    P(the loop emits s_1 .. s_{j+1}) q(s_{j+2} .. s_{K+1}) = q(s_1 .. s_{K+1})."""
    p, q = _rows(p, q)
    V = len(p)
    blocks = list(product(range(V), repeat=K))
    index = {(b, j, y): i for i, (b, j, y) in enumerate(product(blocks, range(K + 1), range(V)))}
    p_block = {b: float(np.prod(p[list(b)])) for b in blocks}
    gain = np.zeros(len(index))
    for (b, j, _), i in index.items():
        gain[i] = p_block[b] * j
    equations, rhs = [], []
    for b in blocks:  # each block's rule is a distribution over (j, y)
        row = np.zeros(len(index))
        row[[index[b, j, y] for j in range(K + 1) for y in range(V)]] = 1
        equations.append(row)
        rhs.append(1.0)
    for s in product(range(V), repeat=K + 1):  # exactness on the first K + 1 tokens
        row = np.zeros(len(index))
        for b in blocks:
            for j in range(K + 1):
                if b[:j] == s[:j]:
                    row[index[b, j, s[j]]] += p_block[b] * float(np.prod(q[list(s[j + 1:])]))
        equations.append(row)
        rhs.append(float(np.prod(q[list(s)])))
    return _solve(gain, equations, rhs)


def drawings(p, m, replace):
    """Every ordered tuple of m candidates and its probability: drawn independently from p
    (`replace`), or one at a time from p without those before it (tree.draw_without_replacement).
    Returns [(candidates, rows [m, V] the distributions they were drawn from, probability)]."""
    p = np.asarray(p, np.float64)
    if m == 0 or p.sum() <= 0:
        return [((), np.zeros((0, len(p))), 1.0)]
    row = p / p.sum()
    out = []
    for x in np.flatnonzero(row):
        left = row.copy()
        if not replace:
            left[x] = 0.0
        for rest, rows, prob in drawings(left, m - 1, replace):
            out.append(((int(x),) + rest, np.vstack([row[None], rows]), float(row[x]) * prob))
    return out


def best_candidates_verifier(p, q, m, replace):
    """The highest chance that the emitted token is one of the m candidates, for any rule that sees
    the candidates and emits a token distributed exactly as q. Unknowns: P(y | candidates)."""
    p, q = _rows(p, q)
    V = len(p)
    draws = drawings(p, m, replace)
    gain, equations = np.zeros(len(draws) * V), []
    for k, (candidates, _, prob) in enumerate(draws):
        gain[[k * V + y for y in set(candidates)]] = prob
        row = np.zeros(len(draws) * V)
        row[k * V: (k + 1) * V] = 1
        equations.append(row)
    for y in range(V):
        row = np.zeros(len(draws) * V)
        row[[k * V + y for k in range(len(draws))]] = [prob for _, _, prob in draws]
        equations.append(row)
    return _solve(gain, equations, [1.0] * len(draws) + list(q))


def multi_candidate_acceptance(p, q, m, replace):
    """The chance that the multi-candidate step keeps one of m candidates, averaged over their
    drawing (rejection.output_distribution_among, summed over the candidates)."""
    p, q = _rows(p, q)
    return float(sum(prob * sum(output_distribution_among(c, rows, q)[x] for x in set(c))
                     for c, rows, prob in drawings(p, m, replace)))


def best_block_coupling(p, q, K):
    """The most drafts kept per loop by a loop that may emit K + 1 tokens of its own: it sees the
    K drafts x~ ~ p and emits a whole text y of K + 1 tokens distributed exactly as q; the drafts
    it keeps are the longest common prefix of x~ and y. Unknowns: P(y | x~)."""
    p, q = _rows(p, q)
    V = len(p)
    blocks, texts = list(product(range(V), repeat=K)), list(product(range(V), repeat=K + 1))
    p_block = [float(np.prod(p[list(b)])) for b in blocks]

    def common(b, y):
        return next((i for i in range(K) if b[i] != y[i]), K)

    gain = np.array([p_block[k] * common(b, y) for k, b in enumerate(blocks) for y in texts])
    n = len(blocks) * len(texts)
    equations = []
    for k in range(len(blocks)):
        row = np.zeros(n)
        row[k * len(texts): (k + 1) * len(texts)] = 1
        equations.append(row)
    for t in range(len(texts)):
        row = np.zeros(n)
        row[[k * len(texts) + t for k in range(len(blocks))]] = p_block
        equations.append(row)
    return _solve(gain, equations, [1.0] * len(blocks) + [float(np.prod(q[list(y)])) for y in texts])
