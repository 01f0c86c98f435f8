"""Theorem 1 (Chen et al. 2023): the modified rejection step emits tokens distributed exactly as q."""

import numpy as np
import pytest

from helpers_sampling import chi_square_test
from picogpt.rejection import accept_or_resample, accept_probability, output_distribution, residual
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
