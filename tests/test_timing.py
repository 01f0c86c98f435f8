"""Timing helpers: medians of real runs, the right work timed, the caller's order kept, and the
machine's rates computed as work / median time. A fake clock makes every duration exact."""

import numpy as np
import pytest
from helpers import random_gpt2

from picogpt.errors import PicoGPTError
from picogpt.measure import machine, timing
from picogpt.measure.machine import BANDWIDTH_SHAPE, measure_bandwidth_gbs, measure_matmul_gflops
from picogpt.measure.timing import median_seconds, time_per_token_s
from picogpt.model import ModelView


@pytest.fixture(scope="module")
def small_model():
    return random_gpt2(n_layer=2, n_head=2, n_embd=16, n_ctx=32, n_vocab=50, peaked=False)


class FakeClock:
    """Stands in for time.perf_counter: time only moves when `advance` is called."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", fake)
    return fake


class CountingModel(ModelView):
    """Wraps a model and records the length of every call, to see what was timed. Each call
    advances the clock by the number of positions the model attends over (cache + new ids),
    so a timing says which call was timed."""

    def __init__(self, model, clock):
        super().__init__(model)
        self.clock, self.calls = clock, []

    def __call__(self, ids, cache=None):
        self.calls.append((len(ids), None if cache is None else len(cache)))
        self.clock.advance(len(ids) + (0 if cache is None else len(cache)))
        return self.model(ids, cache)


def test_median_seconds_is_the_median_of_the_runs(clock):
    durations = iter([3.0, 100.0, 1.0, 2.0, 5.0])
    assert median_seconds(lambda: clock.advance(next(durations)), repeats=5) == 3.0  # not the mean, 22.2
    durations = iter([1.0, 4.0])
    assert median_seconds(lambda: clock.advance(next(durations)), repeats=2) == 2.5
    calls = []
    median_seconds(lambda: calls.append(1), repeats=4)
    assert len(calls) == 4
    with pytest.raises(PicoGPTError, match="repeats"):
        median_seconds(lambda: None, repeats=0)


def test_without_cache_each_position_reruns_the_whole_prefix(small_model, clock):
    model = CountingModel(small_model, clock)
    times_s = time_per_token_s(model, np.arange(10), [0, 4, 9], use_cache=False, repeats=2)
    assert times_s.tolist() == [1.0, 5.0, 10.0]  # a pass over n + 1 positions
    assert model.calls == [(1, None)] * 2 + [(5, None)] * 2 + [(10, None)] * 2


def test_with_cache_each_timed_step_is_one_position_on_a_cache_of_n(small_model, clock):
    model = CountingModel(small_model, clock)
    times_s = time_per_token_s(model, np.arange(10), [9, 0, 4], use_cache=True, repeats=2)
    assert times_s.tolist() == [10.0, 1.0, 5.0]  # the caller's order, not the order measured
    timed = [call for call in model.calls if call[0] == 1]
    assert timed == [(1, 0)] * 2 + [(1, 4)] * 2 + [(1, 9)] * 2  # the cache is rolled back
    for bad in ([10], [-1]):
        with pytest.raises(PicoGPTError, match="positions"):
            time_per_token_s(model, np.arange(10), bad)


def fake_median(seconds, timed):
    """A median_seconds that runs the timed function once, keeps what it returned, and
    reports `seconds`."""
    def median(fn, repeats):
        timed.append((fn(), repeats))
        return seconds
    return median


def test_bandwidth_is_the_weight_bytes_over_the_median_time_of_x_at_w(monkeypatch):
    timed = []
    monkeypatch.setattr(machine, "median_seconds", fake_median(0.25, timed))
    n_rows, n_cols = 64, BANDWIDTH_SHAPE[1]
    assert measure_bandwidth_gbs(n_bytes=4 * n_cols * n_rows + 3, repeats=7) == 4 * n_cols * n_rows / 0.25 / 1e9
    (products, repeats), = timed
    assert repeats == 7
    product, = products  # one [64, n_cols] matrix times a vector: one output per row
    assert product.shape == (n_rows,) and product.dtype == np.float32
    assert np.all(product == 0.5 * n_cols)  # 0.5 @ ones: every weight of every row was read
    with pytest.raises(PicoGPTError, match="n_bytes"):
        measure_bandwidth_gbs(n_bytes=4 * n_cols - 1)


def test_matmul_rate_is_2n_cubed_flops_over_the_median_time(monkeypatch):
    timed = []
    monkeypatch.setattr(machine, "median_seconds", fake_median(0.5, timed))
    assert measure_matmul_gflops(n=32, repeats=3) == 2 * 32**3 / 0.5 / 1e9
    (product, repeats), = timed
    assert repeats == 3 and product.shape == (32, 32) and np.all(product == 0.25 * 32)
    with pytest.raises(PicoGPTError, match="positive"):
        measure_matmul_gflops(n=0)


def test_scoring_seconds_times_one_call_of_n_against_n_calls_of_one(small_model, clock):
    model = CountingModel(small_model, clock)
    cache = model.new_cache()
    model(np.arange(4), cache)  # the prompt: 4 positions in the cache
    model.calls.clear()
    one_call, calls_of_one = timing.scoring_seconds(model, cache, np.arange(10, 13), [1, 3], repeats=2)
    # the clock advances by cache + new positions per call: one call of 3 on a cache of 4 takes 7,
    # three calls of one take 5 + 6 + 7 = 18; each timing starts from the same cache of 4
    assert one_call == {1: (5.0, 5.0), 3: (7.0, 7.0)}  # each repeat's seconds, in repeat order
    assert calls_of_one == {1: (5.0, 5.0), 3: (18.0, 18.0)}
    per_pass = [(1, 4), (1, 4), (3, 4), (1, 4), (1, 5), (1, 6)]  # n = 1 both ways, then n = 3 both ways
    reversed_pass = [(1, 4), (1, 4), (1, 4), (1, 5), (1, 6), (3, 4)]  # each n: n calls of one first
    assert model.calls == per_pass * 2 + reversed_pass  # one warm-up pass, then 2 repeats, the order alternated
    assert len(cache) == 4
    for bad in (dict(n_new=[0]), dict(n_new=[4]), dict(n_new=[1], repeats=0)):
        with pytest.raises(PicoGPTError, match="scoring_seconds"):
            timing.scoring_seconds(model, cache, np.arange(10, 13), **{"repeats": 1, **bad})


def test_the_floor_is_measured_beside_each_decode_in_alternating_order(monkeypatch, small_model):
    """machine.floor_beside_decode: per repeat one bandwidth measurement and one decode, the order
    reversed every other repeat, so that each pair met the same moment of the machine."""
    order = []

    def fake_median(fn, repeats=5):
        order.append("decode" if fn.__name__ == "step" else "floor")
        return 0.5

    monkeypatch.setattr(machine, "median_seconds", fake_median)
    gb_per_s, seconds = machine.floor_beside_decode(small_model, np.arange(6), repeats=3, n_bytes=4 * 1600 * 8)
    assert order == ["floor", "decode", "decode", "floor", "floor", "decode"]
    assert seconds == (0.5, 0.5, 0.5) and len(gb_per_s) == 3 and all(g > 0 for g in gb_per_s)
