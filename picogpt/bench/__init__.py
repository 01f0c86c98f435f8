"""`python -m picogpt bench`: decode, scoring, load speed and speculative sampling end to end on
GPT-2's real shapes. run.py runs it; the other modules are its parts (see run.py's docstring)."""

from .report import save, table, to_json
from .run import run_bench

__all__ = ["run_bench", "save", "table", "to_json"]
