"""tools/loop_costs.py times every part of the sampling loops it names, the parts add up to the
runs' wall time, and the library is left exactly as it was. A fake clock that moves one tick at
each reading makes every duration a count of clock readings: the test asserts no timing, only
what is counted where."""

import itertools
import time

import loop_costs

from picogpt import speculative


def test_the_parts_of_the_loops_are_timed_and_add_up_and_the_library_is_left_as_it_was(monkeypatch):
    ticks = itertools.count()
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(ticks)))  # every reader of the clock, one tick each
    originals = [(owner, name, vars(owner)[name]) for owner, name, _ in loop_costs.PARTS]
    default_step = speculative.VERIFIERS["token"]
    results = loop_costs.measure(repeats=1)
    run = results["runs"][0]
    timed = set(run["exclusive_s"])
    for label, _, paths in loop_costs.ROWS:  # each row's main part was seen running
        assert paths[0] in timed, (label, sorted(timed))
    for algorithm, seconds in (("speculative", run["speculative_s"]), ("autoregressive", run["autoregressive_s"])):
        inside = sum(s for path, s in run["exclusive_s"].items() if path.split("/")[0] == algorithm)
        # the parts add up to the region, which holds the run (its own clock's readings) and its set-up:
        # a few readings, not a share of the run's
        assert seconds <= inside <= 1.01 * seconds, (algorithm, seconds, inside)
    assert run["calls"]["speculative/score/call"] == run["loops"]  # one scoring call per loop
    assert run["calls"]["speculative/draft/call"] == run["drafted"]  # one draft call per drafted token
    assert [(owner, name, vars(owner)[name]) for owner, name, _ in loop_costs.PARTS] == originals
    assert speculative.VERIFIERS["token"] is default_step
    assert [row["part"] for row in results["rows"]] == [label for label, _, _ in loop_costs.ROWS]
