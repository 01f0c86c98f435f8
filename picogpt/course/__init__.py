"""Course helpers for the notebooks: which pair of models, figures, widgets, exercise checkers."""

from .pair import course_models, course_pair_names, speedup_run_size

__all__ = ["course_models", "course_pair_names", "speedup_run_size"]
