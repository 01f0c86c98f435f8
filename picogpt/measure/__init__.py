"""Measuring, apart from the engine: timing (timing.py), the one speedup measurement of
speculative against autoregressive sampling (speedup.py), the one comparison behind every
verdict (compare.py), facts about this machine (machine.py)
and where results live (results.py). Used by the bench, the course and the tools."""
