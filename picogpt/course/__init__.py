"""Course helpers for the notebooks. The rule (docs/architecture.md's course row): what only one
notebook uses lives in that notebook's module, named as the notebook (`nb07_token_trees.py`);
every other module is shared by two notebooks or more, says what it holds in its first line, and
imports no notebook's module. Every grader returns a `grading.Check`; every sampler exercise is
graded by the one `grading.check_sampler`."""

from .pair import course_models, course_pair_names, repeats, speedup_run_size

__all__ = ["course_models", "course_pair_names", "repeats", "speedup_run_size"]
