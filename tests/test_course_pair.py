"""Which pair the course runs on, and how long notebook 05 measures it."""

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
def test_notebook_05_runs_fewer_tokens_on_a_big_target(bytes_per_token, expected):
    assert pair.speedup_run_size(Model(bytes_per_token)) == expected


def test_the_teaching_target_is_measured_as_notebook_05_says():
    from picogpt import load
    assert pair.speedup_run_size(load("tiny-target")) == (64, 10)


def test_an_unknown_pair_name_is_refused(monkeypatch):
    monkeypatch.setenv(pair.ENV, "llama")
    with pytest.raises(PicoGPTError, match="expected one of gpt2, tiny"):
        pair.course_pair_names()
