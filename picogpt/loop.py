"""What both sampling loops share: the draft they ask for, the checks of what it proposes and of a
step of your own, the values that name a loop for a measurement, and what a loop records.

speculative.py (Algorithm 2: a chain of drafts) and tree.py (a token tree) each read like their
paper; what they have in common lives here, below both, so that neither imports the other. A
loop checks everything it is handed that it did not compute itself: the draft and the models
(sampling.check_model), what each model's call returns (sampling.logits_of), what the draft
proposes (`distributions`, `token_ids`), what a step of your own returns (`checked`), and a
value's options (`options_for`); each fault is one readable PicoGPTError.
"""

import inspect
import time
from typing import Protocol, runtime_checkable

import numpy as np

from .errors import PicoGPTError, echo, shown
from .sampling import Model, check_model, lacks

# ---------------------------------------------------------------------------------------------
# The draft: what a loop asks of it
# ---------------------------------------------------------------------------------------------

@runtime_checkable
class Draft(Protocol):
    """What a sampling loop asks of its draft p. The paper's draft is a smaller model
    (speculative.ModelDraft); notebook 06's drafts (picogpt/drafts.py) and a token tree's
    (tree.ModelTreeDraft) keep the same contract, and so does any object with these members:
      name, models                           its name; the models it runs (each checked as a model,
                                             their vocabulary and context checked against the target's)
      proposes                               what propose returns, a value: "chain" (speculative_sampling:
                                             up to K ids and their rows p) or "tree" (tree_sampling: a tree.Tree)
      start()                                before the first loop of every run
      propose(sequence, size, controls, rng) Step 1: drafts to follow x_1 .. x_n = sequence (the loop's
                                             text, copied: the draft may change its copy)
      keep(n, branch)                        after Steps 3-4: the loop kept x_1 .. x_n, then the drafted
                                             nodes `branch` (in a chain: the first len(branch) drafts);
                                             forget anything after them
    A class may inherit the defaults below (speculative.ChainDraft and tree.TreeDraft set proposes)."""

    name: str = "draft"
    models: tuple = ()
    proposes: str

    def start(self):
        """Before the first loop of every run: nothing to reset unless the draft keeps state."""

    def propose(self, sequence, size, controls, rng):
        """Step 1: the drafts to follow `sequence`, with the distributions they were sampled from."""
        raise PicoGPTError(f"{shown(type(self).__name__, 60)} must define propose(sequence, size, controls, rng)")

    def keep(self, n, branch):
        """The loop kept x_1 .. x_n and then `branch`: nothing to forget unless the draft keeps state."""


def draft_for(loop, proposes, draft, wrap_model):
    """The draft `loop` runs: a Draft that proposes what the loop verifies (`proposes`: "chain",
    "tree") as it is, its models checked; a model wrapped in the loop's own draft (`wrap_model`:
    speculative.ModelDraft, tree.ModelTreeDraft); anything else refused, with what it lacks."""
    if not lacks(draft, Draft):
        if draft.proposes != proposes:
            raise PicoGPTError(f"{shown(draft.name, 60)} is a draft that proposes a {echo(draft.proposes, 20)}, and "
                               f"{loop} runs one that proposes a {proposes}: pass it the draft model itself, or run "
                               "this draft with the other loop (speculative_sampling: chain, tree_sampling: tree)")
        if not isinstance(draft.models, (tuple, list)):
            raise PicoGPTError(f"the draft {shown(draft.name, 60)}'s models must be a tuple of the models it runs "
                               f"(() if none), got {echo(draft.models, 60)}")
        for model in draft.models:
            check_model(model, f"draft {shown(draft.name, 60)}'s model")
        return draft
    if not lacks(draft, Model):
        return wrap_model(draft)
    raise PicoGPTError(f"the draft must be a model (picogpt.load(...)) or a draft that proposes a {proposes} "
                       f"(loop.Draft): {echo(draft, 80)} lacks {', '.join(lacks(draft, Model))} for a model, "
                       f"{', '.join(lacks(draft, Draft))} for a draft")


# ---------------------------------------------------------------------------------------------
# What a draft proposes, checked
# ---------------------------------------------------------------------------------------------

PROBABILITY_ROUNDING = 1e-6  # a row of p may sum to 1 within this (float32 rows, renormalised sums)


def token_ids(values):
    """`values` as a tuple of Python ints, or None unless they are a list, tuple or 1-D integer
    array of whole numbers (no bool, no float, no string): token ids, or a tree's parents."""
    if isinstance(values, np.ndarray):
        values = values.tolist() if values.ndim == 1 and np.issubdtype(values.dtype, np.integer) else None
    if not isinstance(values, (list, tuple)) or not all(
            isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in values):
        return None
    return tuple(int(x) for x in values)


def distributions(rows, shape, tokens=None):
    """(rows as float64 of `shape` [n_rows, n_vocab], None), or (None, why not: a sentence); an
    n_vocab of None takes any width. Each row must be a distribution (finite, >= 0, summing to 1)
    and, given the `tokens` drawn from them, make its token possible: a NaN row would have its draft
    kept every time (Python's min(1, q / NaN) is 1), a row of 0 at its draft divides by 0."""
    try:
        array = np.asarray(rows)
    except (TypeError, ValueError, OverflowError):  # ragged rows, 10**400 in a float array
        return None, f"rows {echo(rows, 80)}"
    if array.dtype.kind not in "iuf":  # strings, bools, objects (10**400 among ints)
        return None, f"rows of {shown(array.dtype, 20)}, not numbers: {echo(rows, 80)}"
    if array.ndim != 2 or array.shape[0] != shape[0] or shape[1] not in (None, array.shape[1]):
        return None, f"rows of shape {array.shape}, not [{shape[0]}, {shape[1] or 'n_vocab'}]"
    array = array.astype(np.float64, copy=False)
    sums = array.sum(axis=-1)  # NaN or inf anywhere in a row makes its sum NaN or inf
    if not (np.all(np.abs(sums - 1) <= PROBABILITY_ROUNDING) and (array.size == 0 or array.min() >= 0)):
        return None, "rows that are not distributions (NaN, inf, negative, or not summing to 1)"
    if tokens is not None and any(array[t, x] <= 0 for t, x in enumerate(tokens)):
        return None, "a token its own row gives probability 0"
    return array, None


def checked_proposal(proposal, K, n_vocab, name):
    """A chain draft's proposal as the loop uses it: a pair (drafted, p), up to K ids in the
    vocabulary and p [len(drafted), n_vocab], rows that are distributions under which their draft
    is possible. One readable PicoGPTError naming the draft otherwise. Returns (drafted as a list
    of ints, p as float64)."""
    def refuse(problem):
        raise PicoGPTError(f"the draft {shown(name, 60)} proposed {problem}; propose(sequence, K, controls, rng) "
                           f"returns up to K = {K} token ids and p [len(drafted), {n_vocab}], one distribution per draft")

    if not isinstance(proposal, (tuple, list)) or len(proposal) != 2:
        refuse(f"{echo(proposal, 80)}, not a pair (drafted, p)")
    drafted = token_ids(proposal[0])
    if drafted is None or len(drafted) > K or any(not 0 <= x < n_vocab for x in drafted):
        refuse(f"the drafts {echo(proposal[0], 80)}")
    p, problem = distributions(proposal[1], (len(drafted), n_vocab), drafted)
    if problem:
        refuse(problem)
    return list(drafted), p


# ---------------------------------------------------------------------------------------------
# A step other than the library's, as a loop runs it
# ---------------------------------------------------------------------------------------------

def copied(x):
    """What a learner's function is handed: a copy of a list or an array (changing it in place
    cannot corrupt the loop or its trace), anything else (the Generator) as is."""
    return x.copy() if isinstance(x, np.ndarray) else list(x) if isinstance(x, (list, tuple)) else x


def step_name(step):
    """How a message names a step function: its __name__, else its type's."""
    return shown(getattr(step, "__name__", None) or type(step).__name__, 40)


def checked(step, problem, loop, noun, grader=None):
    """A step other than the library's, as a loop runs it (speculative_sampling's Steps 3-4, and
    tree_sampling's multi-candidate step): on copies of its inputs, `problem(output, *inputs)`
    (a sentence, or None) judged on every call, an exception it raises named with the step and
    the loop. Either stops the loop with one PicoGPTError that names the step's first input (the
    `noun`: drafts, candidates), and the grader to try it with if one is given."""
    name = step_name(step)
    grade = f". Grade it with {grader}" if grader else ""

    def run(*inputs):
        try:
            output = step(*map(copied, inputs))
        except Exception as error:  # the learner's code: say whose it is, and where it ran
            raise PicoGPTError(f"step={name} raised {type(error).__name__} inside {loop}: {shown(error, 200)}"
                               f"{grade}") from error
        found = problem(output, *inputs)
        if found:
            raise PicoGPTError(f"step={name} returned {echo(output)} for the {noun} {echo(list(inputs[0]))} "
                               f"inside {loop}: {found}{grade}")
        return output
    return run


def verifier_for(verify, verifiers, checked_step, contract):
    """Steps 3-4 as a loop runs them, one slot: `verify` names one of the library's `verifiers`,
    or is a step function of your own, which the loop runs through `checked_step` (its output
    judged on every call). Anything else: one line that says what `contract` a step has."""
    if isinstance(verify, str) and verify in verifiers:
        return verifiers[verify]
    if callable(verify):
        return checked_step(verify)
    raise PicoGPTError(f"verify={echo(verify, 40)}: expected one of {', '.join(map(repr, verifiers))}, or a step "
                       f"function of your own, {contract}")


# ---------------------------------------------------------------------------------------------
# A loop as a value: what a measurement runs
# ---------------------------------------------------------------------------------------------

def options_for(value, loop, options, fixed):
    """The keyword arguments a value that samples (speculative.Chain, tree.TreeShape) hands its
    `loop`: the loop's own, except the `fixed` ones the value holds. Any other is one line, not
    Python's "got multiple values" or "unexpected keyword argument"."""
    parameters = inspect.signature(loop).parameters.values()
    takes = [parameter.name for parameter in parameters if parameter.kind is parameter.KEYWORD_ONLY]
    takes_any = any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters)  # a wrapper's **options
    takes = [name for name in takes if name not in fixed]
    wrong = [name for name in options if name in fixed or not (takes_any or name in takes)]
    if wrong:
        raise PicoGPTError(f"{echo(value, 80)}.sample(...) takes {', '.join(takes)}, not {', '.join(wrong)}: the "
                           f"value holds its {' and '.join(fixed)} (make another value to change them)")
    return options


# ---------------------------------------------------------------------------------------------
# What a run records: one trace per loop, and the time of each step
# ---------------------------------------------------------------------------------------------

class LoopRecorder:
    """Everything a sampling loop measures and keeps, in one place, so that the loop shows only the
    algorithm (speculative_sampling's, and tree.tree_sampling's): the wall clock from `start` (the
    time of on_loop left out), the time of each step of each loop, and one trace per loop."""

    def __init__(self, on_loop=None):
        self.on_loop = on_loop
        self.loops, self.laps_s = [], {}
        self.callback_s = 0.0
        self.start()

    def start(self):
        """The clock starts (again: after the run's set-up)."""
        self.started = self.lap_started = time.perf_counter()

    def start_loop(self):
        self.laps_s = {}
        self.lap_started = time.perf_counter()

    def lap(self, name):
        """The time since the last lap (or the loop's start) was spent on `name`."""
        now = time.perf_counter()
        self.laps_s[name] = now - self.lap_started
        self.lap_started = now

    def end_loop(self, trace_of):
        """Steps 3-4 and the roll-back are over: time them, make the loop's trace with
        `trace_of(t_draft_s=..., t_score_s=..., t_decide_s=...)`, call on_loop with it."""
        self.lap("decide")
        trace = trace_of(t_draft_s=self.laps_s["draft"], t_score_s=self.laps_s["score"],
                         t_decide_s=self.laps_s["decide"])
        self.loops.append(trace)
        if self.on_loop is not None:
            before = time.perf_counter()
            self.on_loop(trace)
            self.callback_s += time.perf_counter() - before

    def seconds(self):
        """Wall time since the recorder started, without the time spent in on_loop."""
        return time.perf_counter() - self.started - self.callback_s
