"""A team of helper threads (fast/team.py) is ready for the length of one model call, and only
then: it computes the same products, leaves when the call ends, serves one thread at a time,
rests when the machine is busy, and is never started for a model too small to use it."""

import threading
import time

import numpy as np
import pytest

from helpers import random_gpt2
from picogpt.fast import compiled, kernels, threads

pytestmark = pytest.mark.skipif(compiled.compile_kernels() is None, reason="numba is not installed")


@pytest.fixture
def team(monkeypatch):
    """The team of this process, for two threads or more, never resting unless a test says so."""
    if threads.n_threads() < 2:
        monkeypatch.setenv(threads.THREADS_ENV, "2")
    module = compiled.compile_kernels()["team"]
    monkeypatch.setattr(module, "BUSY_SHARE", 0)
    ready = kernels.team()
    ready.cool_until = 0.0
    yield ready
    ready.cool_until = 0.0


def exact(x, W):
    return x.astype(np.float64) @ W.astype(np.float64)


def relative_diff(got, reference):
    return float(np.abs(got - reference).max() / np.abs(reference).max())


def wait_until(condition, seconds=5.0):
    end = time.monotonic() + seconds
    while not condition() and time.monotonic() < end:
        time.sleep(0.001)
    return condition()


def test_products_inside_a_call_go_to_the_team_and_equal_x_at_w(team):
    rng = np.random.default_rng(0)
    W, wte = rng.standard_normal((1024, 1030)).astype(np.float32), rng.standard_normal((3001, 512)).astype(np.float32)
    x, x_head = rng.standard_normal((5, 1024)).astype(np.float32), rng.standard_normal((5, 512)).astype(np.float32)
    assert kernels.route(x, W) == "compiled_rows"  # outside a model call: no team
    with kernels.call(kernels.BIG_MODEL_BYTES):
        assert (kernels.route(x, W), kernels.route(x_head, wte.T)) == ("team_rows", "team_head")
        for _ in range(50):  # many jobs back to back: each band of each one computed once
            for n_rows in (1, 2, 5, 9):
                assert relative_diff(kernels.matmul(x[:n_rows], W), exact(x[:n_rows], W)) < 1e-5
                assert relative_diff(kernels.matmul(x_head[:n_rows], wte.T), exact(x_head[:n_rows], wte.T)) < 1e-5
    assert kernels.route(x, W) == "compiled_rows" and kernels.serving() is None


def test_more_threads_than_cores_still_compute_every_band_once(team, monkeypatch):
    monkeypatch.setenv(threads.THREADS_ENV, str(threads.MAX_THREADS_PER_CORE * threads.usable_cores()))
    crowded = kernels.team()  # helpers that the OS must keep taking turns with
    rng = np.random.default_rng(1)
    W = rng.standard_normal((2048, 640)).astype(np.float32)
    x = rng.standard_normal((3, 2048)).astype(np.float32)
    with kernels.call(kernels.BIG_MODEL_BYTES):
        assert kernels.serving() is crowded
        for _ in range(200):
            assert relative_diff(kernels.matmul(x, W), exact(x, W)) < 1e-5


def test_the_helpers_leave_when_the_call_ends(team):
    module = compiled.compile_kernels()["team"]
    with kernels.call(kernels.BIG_MODEL_BYTES):
        assert wait_until(lambda: team.board[module.ACTIVE] == team.n_helpers)
    assert wait_until(lambda: team.board[module.ACTIVE] == 0)


def test_a_busy_machine_rests_the_team_for_a_while(team, monkeypatch):
    module = compiled.compile_kernels()["team"]
    monkeypatch.setattr(module, "BUSY_SHARE", 2.0)  # the calling thread never has "enough" of the CPU
    W = np.ones((1024, 1024), np.float32)
    with kernels.call(kernels.BIG_MODEL_BYTES):
        kernels.matmul(np.ones((1, 1024), np.float32), W)
    assert team.cool_until > time.monotonic()
    with kernels.call(kernels.BIG_MODEL_BYTES):  # resting: the products take threads.parallel
        assert kernels.serving() is None and kernels.route(np.ones((1, 1024), np.float32), W) != "team_rows"
    team.cool_until = 0.0
    with kernels.call(kernels.BIG_MODEL_BYTES):
        assert kernels.serving() is team


def test_another_threads_call_runs_without_the_team_meanwhile(team):
    rng = np.random.default_rng(2)
    W = rng.standard_normal((1024, 1030)).astype(np.float32)
    x = rng.standard_normal((5, 1024)).astype(np.float32)
    seen = {}

    def other_call():
        with kernels.call(kernels.BIG_MODEL_BYTES):
            seen["route"] = kernels.route(x, W)
            seen["diff"] = relative_diff(kernels.matmul(x, W), exact(x, W))

    with kernels.call(kernels.BIG_MODEL_BYTES):
        other = threading.Thread(target=other_call)
        other.start()
        assert relative_diff(kernels.matmul(x, W), exact(x, W)) < 1e-5
        other.join()
    assert seen == {"route": "compiled_rows", "diff": seen["diff"]} and seen["diff"] < 1e-5


def test_a_call_that_fails_hands_the_team_back(team):
    with pytest.raises(ZeroDivisionError):
        with kernels.call(kernels.BIG_MODEL_BYTES):
            raise ZeroDivisionError
    assert kernels.serving() is None
    with kernels.call(kernels.BIG_MODEL_BYTES):
        assert kernels.serving() is team


def test_a_model_calls_with_a_team_only_if_it_is_big_enough(team, monkeypatch):
    model = random_gpt2(3, n_layer=2, n_head=4, n_embd=512, n_ctx=64, n_vocab=2100, peaked=False)
    used = []
    real_team_rows = kernels.team_rows
    monkeypatch.setattr(kernels, "team_rows", lambda x, W: used.append(x.shape) or real_team_rows(x, W))
    ids = np.arange(5)
    reference = model.plain(ids)
    assert model.bytes_per_token < kernels.BIG_MODEL_BYTES
    assert relative_diff(model(ids), reference) < 1e-5 and used == []
    monkeypatch.setattr(kernels, "BIG_MODEL_BYTES", model.bytes_per_token)
    monkeypatch.setattr(kernels, "TEAM_MATRIX", 0)
    assert relative_diff(model(ids), reference) < 1e-5 and used


def test_a_prompt_is_read_without_the_team(team):
    """A call on more than MAX_TILED_ROWS positions shares its products with threads.parallel:
    helpers waiting beside those threads would only take turns with them."""
    with kernels.call(kernels.BIG_MODEL_BYTES, n_rows=kernels.MAX_TILED_ROWS + 1):
        assert kernels.serving() is None
    with kernels.call(kernels.BIG_MODEL_BYTES, n_rows=kernels.MAX_TILED_ROWS):
        assert kernels.serving() is team
