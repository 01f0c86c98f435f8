"""The exercise checkers accept the right answer, reject wrong ones, and explain both."""

import numpy as np
import pytest

from picogpt.course.grading import Check, check_number
from picogpt.course.nb01_gpt2_in_numpy import (
    block_params,
    check_block_params,
    check_kv_cache_bytes,
    check_kv_cache_saving,
    kv_cache_bytes,
    positions_processed,
)
from picogpt.course.nb02_autoregressive_sampling import check_arithmetic_intensity, check_min_time_per_token_ms, check_top_k
from picogpt.gpt2 import GPT2Config
from picogpt.io.params import expected_shapes


def test_check_is_truthy_only_when_right_and_says_so():
    assert Check(True, "x") and not Check(False, "x")
    assert repr(Check(True, "because")) == "✔ right: because"
    assert str(Check(False, "because")) == "✘ not yet: because"


def test_placeholder_and_non_numbers_are_not_yet_answers():
    for answer in (None, ...):
        result = check_block_params(answer)
        assert not result and "placeholder None" in result.message
    result = check_block_params("seven million")
    assert not result and "expected a number" in result.message
    for answer in (True, 10**400, float("nan")):  # 10**400 used to raise OverflowError, True to count as 1
        result = check_number(answer, expected=1.0, how="method", solution="worked")
        assert not result and "expected a number" in result.message


def test_a_wrong_answer_gets_a_hint_but_not_the_number():
    expected = block_params(768)
    result = check_block_params(1234)
    assert not result and "Hint" in result.message
    assert f"{expected:,}" not in result.message
    assert f"{expected:,}" in check_block_params(expected).message  # the solution, once right


def test_a_known_mistake_gets_its_own_hint():
    result = check_number(0.5, expected=1.0, how="method", solution="worked",
                          mistakes=[(0.5, "half of it")])
    assert not result and "half of it" in result.message


def block_params_counted(n_embd):
    """Count one block's parameters from the checkpoint shapes the model loader requires."""
    config = GPT2Config(n_layer=1, n_head=1, n_embd=n_embd, n_ctx=1, n_vocab=1)
    return sum(int(np.prod(shape)) for name, shape in expected_shapes(config).items()
               if name.startswith("h.0."))


@pytest.mark.parametrize("n_embd", [8, 768, 1600])
def test_block_params_matches_the_checkpoint_shapes(n_embd):
    assert block_params(n_embd) == block_params_counted(n_embd) == 12 * n_embd**2 + 13 * n_embd
    assert check_block_params(block_params_counted(n_embd), n_embd=n_embd)
    assert not check_block_params(12 * n_embd**2, n_embd=n_embd)


def test_gpt2_xl_parameter_count_used_by_the_bandwidth_exercise():
    config = GPT2Config(n_layer=48, n_head=25, n_embd=1600, n_ctx=1024, n_vocab=50257)
    n_params = sum(int(np.prod(shape)) for shape in expected_shapes(config).values())
    assert n_params == 1_557_611_200
    # 6.23 GB at 10 GB/s is 623 ms
    assert check_min_time_per_token_ms(n_params * 4 / 10e9 * 1e3, bandwidth_gbs=10)


def test_positions_processed_by_brute_force():
    n_prompt, N = 10, 100
    runs_without = [n_prompt + t for t in range(N)]  # each step reruns the whole sequence so far
    runs_with = [n_prompt] + [1] * (N - 1)  # the prompt, then one new position per step
    assert positions_processed(n_prompt, N, use_cache=False) == sum(runs_without) == 5950
    assert positions_processed(n_prompt, N, use_cache=True) == sum(runs_with) == 109


def test_kv_cache_saving():
    assert check_kv_cache_saving(5950 / 109)
    assert check_kv_cache_saving(54.6)  # rounded is fine
    inverted = check_kv_cache_saving(109 / 5950)
    assert not inverted and "without/with" in inverted.message
    assert not check_kv_cache_saving(100)
    off_by_one = check_kv_cache_saving(5950 / 110)  # 54.09: counted n_prompt + N positions with the cache
    assert not off_by_one and "n_prompt + N − 1" in off_by_one.message
    assert not check_kv_cache_saving(6050 / 109)  # 55.5: counted 1..N instead of 0..N-1 without it


def test_kv_cache_bytes_for_gpt2_xl():
    expected = 2 * 48 * 1024 * 1600 * 4  # keys + values, layers, positions, n_embd, float32
    assert kv_cache_bytes(48, 1600, 1024) == expected == 629_145_600
    assert check_kv_cache_bytes(expected)
    half = check_kv_cache_bytes(expected // 2)  # keys only, or float16: the hint names both
    assert not half and "keys or values but not both" in half.message and "float16" in half.message
    counted_numbers = check_kv_cache_bytes(expected // 4)
    assert not counted_numbers and "4 bytes" in counted_numbers.message


def test_min_time_per_token_units():
    right_ms = 1_557_611_200 * 4 / 20e9 * 1e3  # at 20 GB/s
    assert check_min_time_per_token_ms(right_ms, bandwidth_gbs=20)
    in_seconds = check_min_time_per_token_ms(right_ms / 1e3, bandwidth_gbs=20)
    assert not in_seconds and "seconds" in in_seconds.message
    assert not check_min_time_per_token_ms(right_ms, bandwidth_gbs=40)


def test_arithmetic_intensity():
    assert check_arithmetic_intensity(0.5)
    assert "4 bytes" in check_arithmetic_intensity(2).message
    assert not check_arithmetic_intensity(1)
    measured = check_arithmetic_intensity(0.5, machine_flops_per_byte=2.5).message
    assert "2.5 FLOPs" in measured and "5 times" in measured and "tens" not in measured
    assert "arithmetic, not memory" in check_arithmetic_intensity(0.5, machine_flops_per_byte=0.4).message


def reference_top_k(logits, k):
    """Written independently of picogpt.sampling: softmax over the k largest logits."""
    keep = np.argsort(logits)[-k:]
    probs = np.zeros(len(logits))
    probs[keep] = np.exp(logits[keep] - logits[keep].max())
    return probs / probs.sum()


def test_check_top_k_accepts_a_right_function_and_explains_wrong_ones():
    assert check_top_k(reference_top_k)
    not_renormalised = check_top_k(lambda logits, k: reference_top_k(logits, k) * 0.5)
    assert not not_renormalised and "sum to" in not_renormalised.message
    smallest_k = check_top_k(lambda logits, k: reference_top_k(-logits, k))
    assert not smallest_k and "largest" in smallest_k.message
    one_too_many = check_top_k(lambda logits, k: reference_top_k(logits, k + 1))
    assert not one_too_many and "exactly k" in one_too_many.message
    crashes = check_top_k(lambda logits, k: 1 / 0)
    assert not crashes and "ZeroDivisionError" in crashes.message
    assert not check_top_k(None) and not check_top_k(42)
