"""Course helpers for the notebooks: which pair of models, figures, widgets' pure functions,
graders. One file, one kind of helper, named for it (docs/architecture.md's course row): every
grader returns a `grading.Check`; `*_exercise.py` a write-a-function exercise and its grader,
`exercises.py` the questions of every notebook's Exercises; `*figures.py` draw; `*panels.py`
compute what is shown and never run a model; `model_runs.py` and `strategies.py` run models."""

from .pair import course_models, course_pair_names, speedup_run_size

__all__ = ["course_models", "course_pair_names", "speedup_run_size"]
