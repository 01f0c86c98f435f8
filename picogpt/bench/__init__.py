"""`python -m picogpt bench`: decode, scoring, load speed and speculative sampling end to end on
GPT-2's real shapes. run.py runs it; the other modules are its parts (see run.py's docstring)."""

from .report import BENCH_DIR, save, scratch_dir, table, to_json  # noqa: F401
from .run import run_bench  # noqa: F401
