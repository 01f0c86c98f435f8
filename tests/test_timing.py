"""Timing helpers: medians of real runs, the right work timed, the caller's order kept."""

import time

import numpy as np
import pytest

from helpers import random_gpt2
from picogpt.errors import PicoGPTError
from picogpt.perf.machine import measure_bandwidth_gbs, measure_matmul_gflops
from picogpt.perf.timing import median_seconds, time_per_token_s


@pytest.fixture(scope="module")
def small_model():
    return random_gpt2(n_layer=2, n_head=2, n_embd=16, n_ctx=32, n_vocab=50)


class CountingModel:
    """Wraps a model and records the length of every call, to see what was timed."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def new_cache(self):
        return self.model.new_cache()

    def __call__(self, ids, cache=None):
        self.calls.append((len(ids), None if cache is None else len(cache)))
        return self.model(ids, cache)


def test_median_seconds_is_the_median_of_the_runs():
    durations = iter([0.0, 0.02, 0.0])
    result = median_seconds(lambda: time.sleep(next(durations)), repeats=3)
    assert 0 <= result < 0.01  # the one slow run does not move the median
    with pytest.raises(PicoGPTError):
        median_seconds(lambda: None, repeats=0)


def test_without_cache_each_position_reruns_the_whole_prefix(small_model):
    model = CountingModel(small_model)
    times_s = time_per_token_s(model, np.arange(10), [0, 4, 9], use_cache=False, repeats=2)
    assert times_s.shape == (3,) and np.all(times_s > 0)
    assert model.calls == [(1, None)] * 2 + [(5, None)] * 2 + [(10, None)] * 2


def test_with_cache_each_timed_step_is_one_position_on_a_cache_of_n(small_model):
    model = CountingModel(small_model)
    times_s = time_per_token_s(model, np.arange(10), [9, 0, 4], use_cache=True, repeats=2)
    assert times_s.shape == (3,) and np.all(times_s > 0)
    timed = [call for call in model.calls if call[0] == 1]
    assert timed == [(1, 0)] * 2 + [(1, 4)] * 2 + [(1, 9)] * 2  # the cache is rolled back
    with pytest.raises(PicoGPTError):
        time_per_token_s(model, np.arange(10), [10])


def test_hardware_numbers_are_positive_rates():
    assert measure_bandwidth_gbs(n_bytes=2**20, repeats=2) > 0
    assert measure_matmul_gflops(n=64, repeats=2) > 0
    with pytest.raises(PicoGPTError):
        measure_bandwidth_gbs(n_bytes=16)
