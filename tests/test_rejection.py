"""Theorem 1 (Chen et al. 2023): the modified rejection step emits tokens distributed exactly as q."""

from itertools import permutations, product

import numpy as np
import pytest
from helpers_sampling import chi_square_test

from picogpt.rejection import (
    accept_among,
    accept_or_resample,
    accept_probability,
    output_distribution,
    output_distribution_among,
    residual,
)
from picogpt.sampling import sample


def random_distribution(rng, n_vocab, n_zeros=0):
    probs = rng.dirichlet(np.full(n_vocab, 0.5))
    probs[rng.choice(n_vocab, n_zeros, replace=False)] = 0
    return probs / probs.sum()


def distribution_pairs():
    """(p, q) pairs on small vocabularies, including the edge cases of Theorem 1."""
    rng = np.random.default_rng(0)
    pairs = [(random_distribution(rng, n), random_distribution(rng, n)) for n in (2, 3, 5, 8, 16) for _ in range(4)]
    pairs += [(random_distribution(rng, 8, n_zeros=3), random_distribution(rng, 8)) for _ in range(4)]  # p=0 where q>0
    pairs += [(random_distribution(rng, 8), random_distribution(rng, 8, n_zeros=3)) for _ in range(4)]  # q=0 where p>0
    same = random_distribution(rng, 8)
    pairs += [(same, same.copy())]  # p == q: nothing is ever rejected
    pairs += [(np.eye(5)[1], np.eye(5)[3])]  # disjoint one-hots: always rejected
    pairs += [(np.eye(5)[2], random_distribution(rng, 5))]  # a greedy draft
    return pairs


@pytest.mark.parametrize("p, q", distribution_pairs())
def test_theorem_1_the_emitted_token_is_distributed_as_q(p, q):
    emitted = output_distribution(p, q)
    assert np.max(np.abs(emitted - q)) <= 1e-12


def test_the_residual_is_the_normalised_positive_part_of_q_minus_p():
    p, q = np.array([0.5, 0.3, 0.2, 0.0]), np.array([0.2, 0.3, 0.1, 0.4])
    np.testing.assert_allclose(residual(p, q), [0, 0, 0, 1.0])
    p, q = np.array([0.6, 0.2, 0.2]), np.array([0.2, 0.4, 0.4])
    np.testing.assert_allclose(residual(p, q), [0, 0.5, 0.5])
    assert np.array_equal(residual(q, q), q)  # no mass left: q itself


def test_accept_probability_is_min_1_q_over_p():
    p, q = np.array([0.5, 0.25, 0.25, 0.0]), np.array([0.25, 0.5, 0.25, 0.0])
    assert [accept_probability(p, q, x) for x in range(3)] == [0.5, 1.0, 1.0]
    assert accept_probability(np.array([0.0, 1.0]), np.array([0.5, 0.5]), 0) == 1.0
    assert accept_probability(np.array([0.0, 1.0]), np.array([0.0, 1.0]), 0) == 0.0


def test_a_zero_probability_token_is_never_sampled():
    rng = np.random.default_rng(1)
    probs = np.array([0.0, 0.5, 0.0, 0.5, 0.0])
    assert {sample(probs, rng) for _ in range(2000)} == {1, 3}


def test_accept_or_resample_empirically_emits_q():
    rng = np.random.default_rng(2)
    p, q = np.array([0.4, 0.3, 0.2, 0.1, 0.0]), np.array([0.1, 0.1, 0.3, 0.2, 0.3])
    counts = np.zeros(5)
    n_accepted = 0
    for _ in range(20_000):
        accepted, token, r = accept_or_resample(p, q, sample(p, rng), rng)
        counts[token] += 1
        n_accepted += accepted
    statistic, dof, p_value = chi_square_test(counts, q)
    assert p_value > 1e-3, (statistic, dof, counts)
    alpha = np.minimum(p, q).sum()  # the acceptance rate, 0.4 here
    assert abs(n_accepted / 20_000 - alpha) < 4 * np.sqrt(alpha * (1 - alpha) / 20_000)


def test_accept_or_resample_returns_the_uniform_it_compared():
    rng = np.random.default_rng(3)
    p, q = np.array([0.5, 0.5]), np.array([0.25, 0.75])
    for _ in range(200):
        accepted, token, r = accept_or_resample(p, q, 0, rng)
        assert 0 <= r < 1 and accepted == (r < 0.5)
        assert token == (0 if accepted else 1)  # (q - p)+ is all on token 1


# ---------------------------------------------------------------------------------------------
# Many candidates: exact under independent draws and under draws without replacement
# ---------------------------------------------------------------------------------------------

def drawings(p, m, replacement):
    """Every way to draw m candidates from p: [(candidates, rows [m, V] each was drawn from, probability)].
    With replacement every row is p; without, row i is p without the candidates before it, renormalised."""
    V = len(p)
    if replacement:
        return [(c, np.array([p] * m), float(np.prod(p[list(c)]))) for c in product(range(V), repeat=m)]
    out = []
    for c in permutations(range(V), m):
        rows, prob, left = [], 1.0, np.array(p, np.float64)
        for x in c:
            if left.sum() <= 0:
                break
            rows.append(left / left.sum())
            prob *= rows[-1][x]
            left[x] = 0.0
        if len(rows) == m and prob > 0:
            out.append((c, np.array(rows), prob))
    return out


def emitted_over_drawings(p, q, m, replacement, step_distribution=output_distribution_among):
    return sum(prob * step_distribution(list(c), rows, q) for c, rows, prob in drawings(p, m, replacement))


MULTI_PAIRS = [pair for pair in distribution_pairs() if len(pair[0]) <= 8]


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("m", [1, 2, 3])
@pytest.mark.parametrize("p, q", MULTI_PAIRS)
def test_the_multi_candidate_step_emits_q_averaged_over_the_candidates_drawing(p, q, m, replacement):
    emitted = emitted_over_drawings(p, q, m, replacement)
    if not replacement and np.count_nonzero(p) < m:
        return  # fewer tokens than candidates: this drawing cannot make m
    assert np.max(np.abs(emitted - q)) <= 1e-12


def test_with_one_candidate_it_is_theorem_1s_step():
    for p, q in MULTI_PAIRS:
        np.testing.assert_allclose(emitted_over_drawings(p, q, 1, True), output_distribution(p, q), atol=1e-15)


def judged_against_q(candidates, p, q):
    """A broken rule: every candidate judged against q itself (the residual never updated)."""
    emitted, reached = np.zeros_like(q), 1.0
    for x, p_i in zip(candidates, p):
        kept = accept_probability(p_i, q, x)
        emitted[x] += reached * kept
        reached *= 1 - kept
    return emitted + reached * residual(p[0], q)


def fallback_from_q(candidates, p, q):
    """A broken rule: the residual updated between candidates, but the fallback drawn from q."""
    emitted, reached, q_i = np.zeros_like(q), 1.0, q
    for x, p_i in zip(candidates, p):
        kept = accept_probability(p_i, q_i, x)
        emitted[x] += reached * kept
        reached *= 1 - kept
        q_i = residual(p_i, q_i)
    return emitted + reached * q


@pytest.mark.parametrize("broken", [judged_against_q, fallback_from_q])
@pytest.mark.parametrize("replacement", [True, False])
def test_the_same_enumeration_catches_a_broken_multi_candidate_step(broken, replacement):
    p, q = np.array([0.5, 0.3, 0.1, 0.1]), np.array([0.1, 0.2, 0.3, 0.4])
    tv = 0.5 * np.abs(emitted_over_drawings(p, q, 2, replacement, broken) - q).sum()
    print(f"{broken.__name__}, replacement={replacement}: TV(output, q) = {tv:.3f}")
    assert tv > 0.02


def test_stopping_at_the_first_rejection_is_exact_but_keeps_fewer_candidates():
    p, q = np.array([0.5, 0.3, 0.1, 0.1]), np.array([0.1, 0.2, 0.3, 0.4])
    def first_only(c, rows, q):
        return output_distribution_among(c[:1], rows[:1], q)

    np.testing.assert_allclose(emitted_over_drawings(p, q, 3, False, first_only), q, atol=1e-12)
    def kept(step):  # P(a candidate comes out)
        return sum(prob * sum(step(list(c), rows, q)[x] for x in set(c)) for c, rows, prob in drawings(p, 3, False))

    assert kept(first_only) < kept(output_distribution_among) - 0.1


@pytest.mark.parametrize("candidates", [[0, 1], [3, 0, 2], [], [1]])
def test_accept_among_samples_its_exact_distribution(candidates):
    rng = np.random.default_rng(1)
    p, q = np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.1, 0.2, 0.3, 0.4])
    rows, left = [], p.copy()
    for x in candidates:  # drawn without replacement: each row is p without the candidates before it
        rows.append(left / left.sum())
        left[x] = 0
    rows = np.array(rows).reshape(len(candidates), 4)
    counts = np.bincount([accept_among(candidates, rows, q, rng) for _ in range(20_000)], minlength=4)
    assert chi_square_test(counts, output_distribution_among(candidates, rows, q))[2] > 1e-3
