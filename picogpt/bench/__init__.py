"""`python -m picogpt bench`: decode, scoring and load speed on GPT-2's real shapes."""

from .run import BENCH_DIR, run_bench, save, table, to_json  # noqa: F401
