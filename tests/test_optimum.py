"""The linear programs of course/optimum.py: the best exact verifier of each kind, against the
library's verifiers and theory's bound."""

import numpy as np
import pytest

from picogpt import PicoGPTError, theory
from picogpt.course.optimum import (
    best_block_coupling,
    best_candidates_verifier,
    best_chain_verifier,
    drawings,
    multi_candidate_acceptance,
)

P, Q = np.array([2 / 3, 1 / 3]), np.array([1 / 3, 2 / 3])  # Sun et al.'s example


def random_rows(seed, V):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(V, 0.8)), rng.dirichlet(np.full(V, 0.8))


def test_at_the_papers_example_the_best_chain_verifier_keeps_11_9_and_15_9_below_the_bound():
    assert best_chain_verifier(P, Q, 2) == pytest.approx(11 / 9, abs=1e-9)
    assert best_chain_verifier(P, Q, 3) == pytest.approx(15 / 9, abs=1e-9)
    assert theory.expected_accepted_drafts(P, Q, 2, "bound") == pytest.approx(12 / 9)
    assert best_chain_verifier(P, Q, 2) < 12 / 9 - 0.1


@pytest.mark.parametrize("seed, V, K", [(0, 2, 2), (1, 3, 2), (2, 2, 3), (3, 3, 2), (4, 4, 1)])
def test_the_best_prefix_then_one_token_verifier_is_block_verification(seed, V, K):
    """Sun et al.'s optimality theorem, checked against every exact verifier of the kind."""
    p, q = random_rows(seed, V)
    best = best_chain_verifier(p, q, K)
    assert best == pytest.approx(theory.expected_accepted_drafts(p, q, K, "block"), abs=1e-8)
    assert best >= theory.expected_accepted_drafts(p, q, K, "token") - 1e-9


@pytest.mark.parametrize("seed, V, K", [(0, 2, 2), (1, 3, 2), (2, 2, 3)])
def test_a_loop_that_emits_a_whole_coupled_text_reaches_the_bound(seed, V, K):
    p, q = random_rows(seed, V)
    assert best_block_coupling(p, q, K) == pytest.approx(theory.expected_accepted_drafts(p, q, K, "bound"), abs=1e-8)
    assert best_block_coupling(P, Q, 2) == pytest.approx(12 / 9, abs=1e-9)


def test_with_one_draft_all_three_are_alpha():
    p, q = random_rows(5, 3)
    alpha = theory.acceptance_rate(p, q)
    assert best_chain_verifier(p, q, 1) == pytest.approx(alpha, abs=1e-9)
    assert best_block_coupling(p, q, 1) == pytest.approx(alpha, abs=1e-9)
    assert best_candidates_verifier(p, q, 1, replace=True) == pytest.approx(alpha, abs=1e-9)


@pytest.mark.parametrize("replace", [True, False])
@pytest.mark.parametrize("seed, V, m", [(0, 3, 2), (1, 4, 2), (2, 4, 3), (3, 3, 2)])
def test_the_optimal_acceptance_of_m_candidates_bounds_the_multi_candidate_step(replace, seed, V, m):
    p, q = random_rows(seed, V)
    best, step = best_candidates_verifier(p, q, m, replace), multi_candidate_acceptance(p, q, m, replace)
    assert step <= best + 1e-9 and best <= 1 + 1e-9
    if replace:
        assert step == pytest.approx(theory.acceptance_with_candidates(p, q, m), abs=1e-12)


def test_for_some_rows_the_multi_candidate_step_is_strictly_below_the_optimum():
    gaps = [best_candidates_verifier(*random_rows(seed, 3), 2, r) - multi_candidate_acceptance(*random_rows(seed, 3), 2, r)
            for seed in range(4) for r in (True, False)]
    assert max(gaps) > 1e-3


def test_drawings_are_distributions_and_without_replacement_has_distinct_candidates():
    p, _ = random_rows(6, 4)
    for replace in (True, False):
        draws = drawings(p, 3, replace)
        assert sum(prob for _, _, prob in draws) == pytest.approx(1.0)
    assert all(len(set(c)) == len(c) for c, _, _ in drawings(p, 3, False))


def test_rows_too_large_to_enumerate_are_one_readable_error():
    with pytest.raises(PicoGPTError, match="at most 6 tokens"):
        best_chain_verifier(np.full(10, 0.1), np.full(10, 0.1), 2)
