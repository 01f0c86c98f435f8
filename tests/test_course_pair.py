"""Which pair the course runs on, and how long its notebooks measure it."""

import pytest

from picogpt.course import pair
from picogpt.errors import PicoGPTError


class Model:
    def __init__(self, bytes_per_token):
        self.bytes_per_token = bytes_per_token


@pytest.mark.parametrize("bytes_per_token, expected", [
    (22.4e6, (64, 10)),     # the teaching target
    (6.23e9, (32, 3)),      # GPT-2 XL
])
def test_notebook_05_runs_fewer_tokens_on_a_big_target(bytes_per_token, expected, monkeypatch):
    monkeypatch.delenv(pair.REPEATS_ENV, raising=False)
    assert pair.speedup_run_size(Model(bytes_per_token)) == expected


def test_the_teaching_target_is_measured_as_notebook_05_says(monkeypatch):
    monkeypatch.delenv(pair.REPEATS_ENV, raising=False)
    from picogpt import load
    assert pair.speedup_run_size(load("tiny-target")) == (64, 10)


def test_an_unknown_pair_name_is_refused(monkeypatch):
    monkeypatch.setenv(pair.ENV, "llama")
    with pytest.raises(PicoGPTError, match="expected one of gpt2, tiny"):
        pair.course_pair_names()


@pytest.mark.parametrize("cap, expected", [("", [10, 20, 3]), ("3", [3, 3, 3]), (" 12 ", [10, 12, 3])])
def test_the_repeats_cap_lowers_every_race_and_raises_none(monkeypatch, cap, expected):
    monkeypatch.setenv(pair.REPEATS_ENV, cap)
    assert [pair.repeats(n) for n in (10, 20, 3)] == expected
    assert pair.speedup_run_size(Model(22.4e6)) == (64, expected[0])


@pytest.mark.parametrize("cap", ["0", "-2", "2.5", "three", "1e3", "\u00b2"])  # superscript two: a digit to str.isdigit
def test_a_repeats_cap_that_is_not_a_count_is_one_line(monkeypatch, cap):
    monkeypatch.setenv(pair.REPEATS_ENV, cap)
    with pytest.raises(PicoGPTError, match="PICOGPT_COURSE_REPEATS=.*expected a whole number"):
        pair.repeats(10)
