"""The speed-up formulas: acceptance rate, tokens per loop, predicted speed-ups, the best K."""

from itertools import product

import numpy as np
import pytest

from picogpt import PicoGPTError, theory
from picogpt.rejection import output_distribution_among
from picogpt.theory import acceptance_rate, best_K, expected_tokens_per_loop, predicted_speedup, predicted_speedup_leviathan


def test_acceptance_rate_is_the_overlap_of_p_and_q():
    p, q = np.array([0.5, 0.3, 0.2, 0.0]), np.array([0.2, 0.3, 0.1, 0.4])
    assert acceptance_rate(p, q) == pytest.approx(0.2 + 0.3 + 0.1)
    assert acceptance_rate(q, q) == pytest.approx(1.0)
    assert acceptance_rate(np.eye(3)[0], np.eye(3)[2]) == 0.0
    np.testing.assert_allclose(acceptance_rate(np.stack([p, q]), np.stack([q, q])), [0.6, 1.0])


def test_acceptance_rate_is_the_mean_accept_probability_under_the_draft():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    assert acceptance_rate(p, q) == pytest.approx(np.sum(p * np.minimum(1, q / p)), abs=1e-15)


def test_expected_tokens_per_loop_is_a_truncated_geometric_sum():
    for alpha in (0.0, 0.3, 0.8, 0.999):
        for K in (1, 4, 7):
            assert expected_tokens_per_loop(alpha, K) == pytest.approx(sum(alpha**i for i in range(K + 1)))


def test_at_alpha_1_every_draft_is_kept_and_each_loop_emits_K_plus_1():
    assert expected_tokens_per_loop(1.0, 4) == 5.0
    np.testing.assert_allclose(expected_tokens_per_loop(np.array([0.0, 0.5, 1.0]), 2), [1.0, 1.75, 3.0])
    assert expected_tokens_per_loop(1 - 1e-9, 4) == pytest.approx(5.0)
    assert predicted_speedup_leviathan(1.0, 4, 0.0) == 5.0


def test_the_papers_chinchilla_example():
    """Chen et al.: t_draft 1.8 ms, t_target 14.1 ms, K = 4; r = tokens per loop / (K + 1)."""
    timings = dict(K=4, t_draft_s=1.8e-3, t_target_s=14.1e-3)
    assert predicted_speedup(tokens_per_loop=0.8 * 5, **timings) == pytest.approx(2.65, abs=0.005)
    assert predicted_speedup(tokens_per_loop=0.62 * 5, **timings) == pytest.approx(2.05, abs=0.005)


def test_paper_and_leviathan_agree_when_scoring_costs_one_target_step():
    alpha, K, t_draft_s, t_target_s = 0.7, 3, 2e-3, 10e-3
    assert predicted_speedup(alpha, K, t_draft_s, t_target_s) == pytest.approx(
        predicted_speedup_leviathan(alpha, K, t_draft_s / t_target_s))
    slower_scoring = predicted_speedup(alpha, K, t_draft_s, t_target_s, t_score_s=2 * t_target_s)
    assert slower_scoring == pytest.approx(expected_tokens_per_loop(alpha, K) * t_target_s / (K * t_draft_s + 2 * t_target_s))


def test_predicted_speedup_needs_exactly_one_of_alpha_and_tokens_per_loop():
    with pytest.raises(PicoGPTError, match="exactly one"):
        predicted_speedup(0.5, 4, 1e-3, 1e-2, tokens_per_loop=3.0)
    with pytest.raises(PicoGPTError, match="exactly one"):
        predicted_speedup(K=4, t_draft_s=1e-3, t_target_s=1e-2)


def test_leviathan_formula_and_vectorisation():
    assert predicted_speedup_leviathan(0.5, 2, 0.1) == pytest.approx(1.75 / 1.2)
    grid = predicted_speedup_leviathan(np.array([[0.5], [0.9]]), np.array([1, 2, 3]), 0.05)
    assert grid.shape == (2, 3)
    assert grid[1, 2] == pytest.approx((1 - 0.9**4) / (0.1 * 1.15))


def test_best_K_maximises_the_predicted_speedup():
    for alpha, c in [(0.5, 0.1), (0.8, 0.05), (0.9, 0.2), (0.95, 0.01)]:
        K = best_K(alpha, c, K_max=40)
        speedups = [predicted_speedup_leviathan(alpha, k, c) for k in range(1, 41)]
        assert K == 1 + int(np.argmax(speedups))
    assert best_K(0.8, 0.05) > best_K(0.5, 0.05) > 0  # a better draft is worth more lookahead
    assert best_K(1.0, 0.0, K_max=12) == 12  # a free, perfect draft: as far as allowed
    assert best_K(0.0, 0.5) == 1  # a useless draft: the smallest K
    assert list(best_K(np.array([0.5, 0.8, 0.9]), 0.05)) == [best_K(a, 0.05) for a in (0.5, 0.8, 0.9)]


# ---------------------------------------------------------------------------------------------
# Token trees
# ---------------------------------------------------------------------------------------------

def test_acceptance_with_m_independent_candidates_is_the_enumerated_chance_one_is_kept():
    rng = np.random.default_rng(3)
    for _ in range(10):
        p, q = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
        for m in (1, 2, 3):
            kept = sum(np.prod(p[list(c)]) * sum(output_distribution_among(list(c), [p] * m, q)[x] for x in set(c))
                       for c in product(range(4), repeat=m))  # P(the emitted token is a candidate)
            assert theory.acceptance_with_candidates(p, q, m) == pytest.approx(kept, abs=1e-12)
        assert theory.acceptance_with_candidates(p, q, 1) == pytest.approx(theory.acceptance_rate(p, q))
    np.testing.assert_allclose(theory.acceptance_with_candidates(np.eye(3)[[0, 1]], np.eye(3)[[1, 1]], 2), [0, 1])


def test_a_chain_shaped_tree_expects_leviathans_eq_1():
    for alpha, K in [(0.3, 1), (0.8, 4), (0.95, 7), (1.0, 3)]:
        assert theory.expected_tokens_per_tree_loop([alpha] * K) == pytest.approx(theory.expected_tokens_per_loop(alpha, K))
    assert theory.expected_tokens_per_tree_loop([0.9, 0.5]) == pytest.approx(1 + 0.9 + 0.45)
