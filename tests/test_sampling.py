"""Sampling controls (temperature, top-k, top-p), argument checks, and Algorithm 1."""

import numpy as np
import pytest
from helpers import random_gpt2
from helpers_sampling import InstrumentedModel, chi_square_test, joint_distribution
from hypothesis import given, settings
from hypothesis import strategies as st

from picogpt import PicoGPTError, autoregressive_sampling
from picogpt.sampling import (
    TOP_P_ROUNDING,
    distribution,
    kth_largest,
    sample,
    softmax64,
    top_k_filter,
    top_p_filter,
    validate_sampling_args,
)

# ---------------------------------------------------------------------------------------------
# distribution(): temperature, then top-k, then top-p
# ---------------------------------------------------------------------------------------------

def test_temperature_1_is_the_softmax_in_float64():
    logits = np.array([1.0, 2.0, 3.0], np.float32)
    probs = distribution(logits)
    assert probs.dtype == np.float64
    np.testing.assert_allclose(probs, np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum(), rtol=1e-12)


def test_temperature_divides_the_logits():
    logits = np.array([0.0, 1.0, 3.0])
    np.testing.assert_allclose(distribution(logits, temperature=0.5), distribution(2 * logits), rtol=1e-12)


def test_temperature_0_is_a_one_hot_on_the_argmax_with_ties_to_the_lowest_id():
    assert distribution(np.array([0.0, 5.0, 1.0, 5.0]), temperature=0).tolist() == [0, 1, 0, 0]
    rows = distribution(np.array([[3.0, 3.0, 1.0], [0.0, 1.0, 2.0]]), temperature=0, top_p=0.5, top_k=2)
    assert rows.tolist() == [[1, 0, 0], [0, 0, 1]]


def test_top_k_keeps_the_k_most_probable_and_renormalises():
    probs = distribution(np.log([0.1, 0.4, 0.2, 0.3]), top_k=2)
    np.testing.assert_allclose(probs, [0, 4 / 7, 0, 3 / 7], rtol=1e-12)
    np.testing.assert_allclose(distribution(np.log([0.1, 0.9]), top_k=5), [0.1, 0.9], rtol=1e-12)


def test_top_k_breaks_ties_at_the_boundary_towards_the_lowest_ids():
    probs = distribution(np.log([0.1, 0.2, 0.2, 0.2, 0.3]), top_k=3)
    np.testing.assert_allclose(probs, [0, 2 / 7, 2 / 7, 0, 3 / 7], rtol=1e-12)


def test_top_p_keeps_the_token_that_crosses_the_threshold():
    logits = np.log([0.5, 0.3, 0.15, 0.05])
    np.testing.assert_allclose(distribution(logits, top_p=0.6), [0.625, 0.375, 0, 0], rtol=1e-12)
    np.testing.assert_allclose(distribution(logits, top_p=0.5), [1, 0, 0, 0], rtol=1e-12)  # 0.5 reaches 0.5
    np.testing.assert_allclose(distribution(logits, top_p=0.8), [0.625, 0.375, 0, 0], rtol=1e-12)  # 0.5+0.3 reaches 0.8
    np.testing.assert_allclose(distribution(logits, top_p=0.81), [0.5, 0.3, 0.15, 0] / np.float64(0.95), rtol=1e-12)
    np.testing.assert_allclose(distribution(logits, top_p=1.0), [0.5, 0.3, 0.15, 0.05], rtol=1e-12)
    np.testing.assert_allclose(distribution(logits, top_p=1e-9), [1, 0, 0, 0])  # the top token always stays


def test_top_p_ranks_equal_probabilities_by_id():
    probs = distribution(np.log([0.2, 0.4, 0.2, 0.2]), top_p=0.55)  # 0.4 + one of the 0.2s
    np.testing.assert_allclose(probs, [1 / 3, 2 / 3, 0, 0], rtol=1e-12)
    probs = distribution(np.log([0.2, 0.4, 0.2, 0.2]), top_p=0.7)  # 0.4 + two of them
    np.testing.assert_allclose(probs, [0.25, 0.5, 0.25, 0], rtol=1e-12)


def test_top_p_applies_after_top_k_and_temperature():
    logits = np.log([0.05, 0.35, 0.25, 0.2, 0.15])
    # top-k=3 keeps 0.35, 0.25, 0.2 -> 0.4375, 0.3125, 0.25; top-p=0.7 then keeps the first two
    np.testing.assert_allclose(distribution(logits, top_k=3, top_p=0.7), [0, 0.35 / 0.6, 0.25 / 0.6, 0, 0], rtol=1e-12)
    hot = distribution(logits, temperature=2.0, top_k=3)
    expected = np.sqrt([0.35, 0.25, 0.2])
    np.testing.assert_allclose(hot, [0, *expected / expected.sum(), 0], rtol=1e-12)


def test_rows_are_filtered_independently():
    logits = np.log([[0.1, 0.2, 0.7], [0.6, 0.3, 0.1]])
    rows = distribution(logits, top_p=0.65)
    np.testing.assert_allclose(rows, [[0, 0, 1], [2 / 3, 1 / 3, 0]], rtol=1e-12)
    np.testing.assert_allclose(rows[1], distribution(logits[1], top_p=0.65), rtol=1e-15)


# Truncation's definition, on one sort of the whole row: tokens ranked by probability, ties by id
# (lowest first). The filters must give exactly these bits whatever the row's values, however they
# find the k-th largest and the nucleus without sorting.

def ranked(row):
    return np.lexsort((np.arange(len(row)), -row))  # [n]: most probable first, ties by id


def keep_first(row, order, k):
    kept = np.zeros(len(row), bool)
    kept[order[:k]] = True
    kept_probs = np.where(kept, row, 0.0)
    return kept_probs / kept_probs.sum()


def top_k_by_sorting(row, k):
    return keep_first(row, ranked(row), k) if k < len(row) else row


def top_p_by_sorting(row, top_p):
    if top_p >= 1:
        return row
    order = ranked(row)
    mass_before = np.concatenate([[0.0], row[order].cumsum()[:-1]])
    return keep_first(row, order, max(1, int((mass_before < top_p - TOP_P_ROUNDING).sum())))


# logits of few distinct values (ties everywhere), constant rows, wide and narrow ranges
logit_rows = st.tuples(st.integers(1, 300), st.integers(1, 40), st.floats(0.01, 30), st.integers(0, 2**32 - 1)).map(
    lambda a: softmax64(np.random.default_rng(a[3]).integers(0, a[1], a[0]) * a[2] / a[1]))


@settings(max_examples=300)
@given(logit_rows, st.integers(1, 320), st.floats(1e-9, 1.0))
def test_top_k_and_top_p_give_the_bits_of_one_sort_of_the_row_whatever_its_values(probs, k, top_p):
    assert np.array_equal(top_k_filter(probs, k), top_k_by_sorting(probs, k))
    assert np.array_equal(top_p_filter(probs, top_p), top_p_by_sorting(probs, top_p))
    rows = np.stack([probs, probs[::-1]])  # [2, n]: each row filtered on its own
    assert np.array_equal(top_k_filter(rows, k), [top_k_by_sorting(row, k) for row in rows])
    assert np.array_equal(top_p_filter(rows, top_p), [top_p_by_sorting(row, top_p) for row in rows])


@settings(max_examples=200)
@given(logit_rows, st.data())
def test_kth_largest_is_the_kth_value_of_the_row_sorted(probs, data):
    k = data.draw(st.integers(1, len(probs)))
    assert kth_largest(probs, k) == np.sort(probs)[-k]


@pytest.mark.parametrize("kind", ["constant", "50 distinct values", "random"])
def test_a_vocabulary_sized_row_is_truncated_as_one_sort_of_it_says(kind):
    rng = np.random.default_rng(0)
    logits = {"constant": np.zeros(50257), "50 distinct values": rng.integers(0, 50, 50257) * 0.3,
              "random": rng.standard_normal(50257)}[kind]
    probs = softmax64(logits)
    for k in (1, 5, 50, 1000):
        assert np.array_equal(top_k_filter(probs, k), top_k_by_sorting(probs, k))
    for top_p in (1e-9, 0.5, 0.9, 0.999):
        assert np.array_equal(top_p_filter(probs, top_p), top_p_by_sorting(probs, top_p))
    assert np.flatnonzero(top_k_filter(softmax64(np.zeros(50257)), 5)).tolist() == [0, 1, 2, 3, 4]  # ties: lowest ids


def test_sampling_is_reproducible_and_follows_the_distribution():
    probs = np.array([0.1, 0.0, 0.6, 0.3])
    draws = [sample(probs, np.random.default_rng(7)) for _ in range(3)]
    assert len(set(draws)) == 1
    rng = np.random.default_rng(8)
    counts = np.bincount([sample(probs, rng) for _ in range(20_000)], minlength=4)
    assert chi_square_test(counts, probs)[2] > 1e-3


class FixedUniform:
    """A generator whose uniform draws are the numbers given, in turn."""

    def __init__(self, *u):
        self.u = list(u)

    def random(self):
        return self.u.pop(0)


def one_cumsum_inverse_cdf(probs, u):
    """The textbook inverse CDF over one cumulative sum: the first id whose cdf exceeds u * total."""
    cdf = np.cumsum(probs)
    return int(np.searchsorted(cdf, u * cdf[-1], side="right")), cdf


@pytest.mark.parametrize("n_vocab", [1, 5, 255, 256, 257, 1000, 50257])
def test_sample_finds_the_token_of_one_cumulative_sum(n_vocab):
    rng = np.random.default_rng(n_vocab)
    for zeros in (0.0, 0.5):  # dense, and half the tokens at probability 0 (as after top-k)
        probs = rng.random(n_vocab) ** 4 * (rng.random(n_vocab) >= zeros)
        probs[rng.integers(n_vocab)] += 1.0
        probs /= probs.sum()
        for u in rng.random(500):
            token = sample(probs, FixedUniform(u))
            expected, cdf = one_cumsum_inverse_cdf(probs, u)
            # the two ways round apart only when u * total lies within rounding of a cdf value
            assert token == expected or abs(cdf[min(token, expected)] - u) < 1e-12, (n_vocab, u, token, expected)
            assert probs[token] > 0


def test_sample_never_returns_a_zero_probability_token_even_at_u_0_and_u_near_1():
    below_1 = np.nextafter(1.0, 0)
    for n_vocab, positive in [(7, [3]), (600, [0]), (600, [599]), (600, [10, 300]), (50257, [50256]), (50257, [1, 2])]:
        probs = np.zeros(n_vocab)
        probs[positive] = 1.0 / len(positive)
        assert sample(probs, FixedUniform(0.0)) == positive[0]
        assert sample(probs, FixedUniform(below_1)) == positive[-1]
    # block 0 holds a, block 1 holds b: u * total lands where (a + b) rounded up, and u * total - a
    # is then b itself, past block 1's own cumulative sum: still token 256, the only one there
    probs = np.zeros(512)
    probs[0], probs[256] = 0.03284456985493208, 0.06948155789785682
    assert sample(probs, FixedUniform(below_1)) == 256


# ---------------------------------------------------------------------------------------------
# Argument checks: one readable PicoGPTError before any model runs
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_pair():
    return random_gpt2(1, n_ctx=16), random_gpt2(2, n_ctx=24)


@pytest.mark.parametrize("kwargs, words", [
    (dict(N=0), "N"), (dict(N=2.5), "N"), (dict(K=0), "K"), (dict(temperature=-0.1), "temperature"),
    (dict(temperature=float("nan")), "temperature"), (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"),
    (dict(top_k=0), "top_k"), (dict(top_k=1.5), "top_k"), (dict(ids=[]), "empty"),
    (dict(ids=[1, 99]), "vocabulary"), (dict(N=14), "context of 16"),
])
def test_bad_arguments_raise_one_readable_error(small_pair, kwargs, words):
    args = dict(ids=[1, 2, 3], N=5, K=4, temperature=1.0, top_k=None, top_p=None) | kwargs
    ids, N = args.pop("ids"), args.pop("N")
    with pytest.raises(PicoGPTError, match=words):
        validate_sampling_args(ids, N, small_pair, **args)


def test_the_context_limit_counts_the_prompt_and_N(small_pair):
    assert validate_sampling_args([1, 2, 3], 13, small_pair[1:]) == [1, 2, 3]  # 16 <= 24
    assert validate_sampling_args([1, 2, 3], 13, small_pair) == [1, 2, 3]  # 16 <= 16: fits exactly
    with pytest.raises(PicoGPTError, match="17 positions exceed random-1's context of 16"):
        validate_sampling_args([1, 2, 3], 14, small_pair)


def test_draft_and_target_must_share_a_vocabulary():
    with pytest.raises(PicoGPTError, match="vocabularies differ"):
        validate_sampling_args([1], 2, (random_gpt2(1, n_vocab=8), random_gpt2(2, n_vocab=9)))


def test_bad_sampling_controls_are_rejected_by_distribution_too():
    with pytest.raises(PicoGPTError, match="temperature"):
        distribution(np.zeros(3), temperature=-1)


# ---------------------------------------------------------------------------------------------
# Algorithm 1: autoregressive sampling
# ---------------------------------------------------------------------------------------------

def test_autoregressive_sampling_makes_one_cached_call_per_token():
    log = []
    model = InstrumentedModel(random_gpt2(3), "target", log)
    result = autoregressive_sampling(model, [1, 2, 3], 10, seed=0)
    assert len(result.tokens) == 10 and len(result.token_times_s) == 10
    assert [len(ids) for _, _, ids in log] == [3] + [1] * 9  # the prefill, then one token per call
    assert [n_past for _, n_past, _ in log] == [0] + list(range(3, 12))  # positions already cached
    assert model.caches[0].tokens == [1, 2, 3] + result.tokens[:-1]
    assert result.seconds >= sum(result.token_times_s) * 0.99


def test_autoregressive_sampling_same_seed_same_output():
    model = random_gpt2(3)
    first = autoregressive_sampling(model, [1, 2], 12, seed=5, top_p=0.9).tokens
    assert autoregressive_sampling(model, [1, 2], 12, seed=5, top_p=0.9).tokens == first
    assert any(autoregressive_sampling(model, [1, 2], 12, seed=s, top_p=0.9).tokens != first for s in range(6, 9))


def test_autoregressive_sampling_streams_each_token():
    seen = []
    result = autoregressive_sampling(random_gpt2(3), [1], 6, seed=1, on_token=seen.append)
    assert seen == result.tokens


@pytest.mark.slow
def test_autoregressive_sampling_samples_the_models_distribution():
    model = random_gpt2(4)
    prompt = [5, 2]
    exact = joint_distribution(model, prompt, 2, temperature=0.8)
    rng = np.random.default_rng(0)
    counts = np.zeros_like(exact)
    for _ in range(3000):
        counts[tuple(autoregressive_sampling(model, prompt, 2, temperature=0.8, seed=rng).tokens)] += 1
    statistic, dof, p_value = chi_square_test(counts, exact)
    assert p_value > 1e-3, (statistic, dof)
