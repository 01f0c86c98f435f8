"""The course's one grader contract, and what every grader is built from.

Every `check_...` in picogpt/course takes what the learner wrote (a number, or a function to run)
and returns a `Check`: truthy when right, shown by a notebook as one line, "✔ right: ..." with
the worked solution, or "✘ not yet: ..." with what to fix. A wrong answer gets a hint (the
method, or the known mistake it matches) but not the number, so the exercise stays an exercise.
A grader never raises and never prints: a learner's function that raises, or returns something
unusable, is a "✘ not yet" that names the function and where it ran. A grader runs the learner's
function as the course's loops do (`on_copies`): on copies of its inputs, judging only what it returns.

A grader of a function that samples (the steps of notebooks 03, 07 and 08, 09's traversal) is
`check_sampler`, given an `Exercise` value; it compares the law of
its outputs with the right one part by part (`Part`, `compare`): the law of an output is a
product of factors (how many drafts were kept, given the drafts; then the token that follows,
given those), and the factor that differs is where the mistake is, with its expected and
observed frequencies, whether or not the mistake is one the grader knows by name.
"""

import math
from dataclasses import dataclass

import numpy as np

from ..errors import shown
from ..loop import copied
from .chi_square import chi_square_sf, chi_square_test


@dataclass(frozen=True)
class Check:
    ok: bool
    message: str

    def __bool__(self):
        return self.ok

    def __repr__(self):
        return ("✔ right: " if self.ok else "✘ not yet: ") + self.message

    __str__ = __repr__


def not_answered(answer):
    """The notebooks' placeholder is `answer = None` (or `...`)."""
    return answer is None or answer is Ellipsis


def as_number(answer):
    """The answer as a float, or None when it is not a finite number (True is not one, nor an
    integer too large for a float)."""
    try:
        value = float(answer)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) and not isinstance(answer, bool) else None


def shown_number(value):
    """A number as the student gave it, exactly: a whole number with thousands separators
    (7,087,872, never 7.08787e+06), any other float in the shortest form that reads back as it."""
    if float(value).is_integer() and abs(value) < 2**53:
        return f"{int(value):,}"
    return f"{value:,}"


def check_number(answer, expected, how, solution, mistakes=(), rel_tol=0.01):
    """Right when within rel_tol of `expected`: then show the worked `solution`. Wrong: the hint
    of a known mistake, given as (the value that mistake gives, what went wrong), else `how`.
    The answer is shown as given (shown_number): a hint about a number the student did not type
    would be about someone else's answer."""
    if not_answered(answer):
        return Check(False, "replace the placeholder None with your number, then run the cell again.")
    value = as_number(answer)
    if value is None:
        return Check(False, f"expected a number, got {answer!r}.")
    if math.isclose(value, expected, rel_tol=rel_tol):
        return Check(True, f"{shown_number(value)}. {solution}")
    for mistaken, hint in mistakes:
        if math.isclose(value, mistaken, rel_tol=rel_tol):
            return Check(False, f"{shown_number(value)}: {hint}.")
    return Check(False, f"{shown_number(value)} is not it. Hint: {how}")


# ---------------------------------------------------------------------------------------------
# The learner's function, run by a grader
# ---------------------------------------------------------------------------------------------

def function_name(fn, placeholder="your_step"):
    """The learner's function name as they would type it (a lambda has none)."""
    name = getattr(fn, "__name__", "")
    return name if name.isidentifier() else placeholder


def raised(fn, error, where, placeholder="your_step"):
    """One sentence for an exception the learner's function raised: which function, inside which
    grader or loop and on what input (`where`), and the exception."""
    return f"{function_name(fn, placeholder)} raised {type(error).__name__} {where}: {shown(error, 300).rstrip('. ')}"


def on_copies(fn, *inputs):
    """Call the learner's function as speculative_sampling and tree_sampling call it
    (loop.checked): on copies of its inputs. A grader judges only what it returns, as the
    loops do: working in its arguments' memory harms nothing there, and an edit in place that
    changes its own output shows in that output's law."""
    return fn(*map(copied, inputs))


def p_is(p_value):
    """A p-value as a message says it: "p = 0.003", or "p < 1e-16" below what double precision resolves."""
    return f"p = {p_value:.2g}" if p_value >= 1e-16 else "p < 1e-16"


# ---------------------------------------------------------------------------------------------
# Where two laws of a sampled output differ, part by part
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Part:
    """One factor of an outcome's law: given a condition, a value. `of(outcome)` is (condition,
    value) for an outcome this part describes, None for the others; `values` every value it can
    take, in the order a message lists them; `unit` what they are (said before the list)."""
    name: str  # e.g. "the token resampled after rejecting x̃_1"
    of: object
    values: tuple
    unit: str  # what the values are, before their list: "tokens", "drafts kept"
    label: object = str  # one value in words: "token 2", "c_1"
    given: object = None  # a condition in words: "the drafts (0, 2)"; None: a part with one condition

    def text(self):
        return f"{self.unit} {', '.join(str(v) for v in self.values)}"


@dataclass(frozen=True)
class Difference:
    """The observed frequencies of a part's values against the rule's, given the same conditions."""
    part: Part
    n: int  # outcomes observed that the part describes, under conditions the rule can reach
    expected: tuple  # the rule's frequency of each value of part.values, weighted as the conditions were observed
    observed: tuple
    never: tuple  # (value, condition) observed where the rule gives that value probability 0 under that condition
    dof: int
    p_value: float  # chi-square test of the conditional law, summed over the conditions; 0 when `never`

    @property
    def tv(self):
        """Total-variation distance between the observed and the expected frequencies."""
        return 0.5 * float(np.abs(np.subtract(self.observed, self.expected)).sum())


def compare(part, law, counts):
    """How the outcomes counts {outcome: n} differ from law {outcome: probability} in one part:
    the value's law given each condition observed, tested by chi-square and summed over the
    conditions (conditions the rule never reaches are left to the part that leads to them).
    None when no observed outcome falls in the part."""
    rule, seen = {}, {}  # condition -> {value: probability}, condition -> {value: count}
    for table, source in ((rule, law), (seen, counts)):
        for outcome, amount in source.items():
            found = part.of(outcome)
            if found is not None:
                by_value = table.setdefault(found[0], {})
                by_value[found[1]] = by_value.get(found[1], 0) + amount
    index = {value: i for i, value in enumerate(part.values)}
    expected, observed = np.zeros(len(index)), np.zeros(len(index))
    statistic, dof, never = 0.0, 0, {}
    for condition, counted in seen.items():
        given = rule.get(condition, {})
        total, n = sum(given.values()), sum(counted.values())
        if total <= 0:
            continue
        for value, probability in given.items():
            expected[index[value]] += n * probability / total
        for value, count in counted.items():
            observed[index[value]] += count
        missing = [value for value, count in counted.items() if count > 0 and given.get(value, 0) <= 0]
        for value in missing:
            never.setdefault(value, condition)
        if not missing:
            values = sorted(set(given) | set(counted), key=index.get)
            s, d, _ = chi_square_test([counted.get(v, 0) for v in values], [given.get(v, 0) / total for v in values])
            statistic, dof = statistic + s, dof + d
    n = int(observed.sum())
    if n == 0:
        return None
    p_value = 0.0 if never else chi_square_sf(statistic, dof)
    return Difference(part, n, tuple(expected / n), tuple(observed / n),
                      tuple(sorted(never.items(), key=lambda vc: index[vc[0]])), dof, p_value)


def frequencies(values):
    return "(" + ", ".join(f"{v:.3f}" for v in values) + ")"


def difference_text(d, rule, where=""):
    """A Difference as a sentence: which part, where, the rule's frequencies and the observed ones."""
    name = d.part.name[0].upper() + d.part.name[1:]
    text = (f"{name}{where}: over {d.part.text()}, {rule} gives the frequencies {frequencies(d.expected)}, "
            f"yours came out {frequencies(d.observed)} in {d.n:,} outputs")
    if d.never:
        value, condition = d.never[0]
        given = f" for {d.part.given(condition)}" if d.part.given else ""
        return text + f"; yours gave {d.part.label(value)}{given}, which {rule} never does"
    return text + f" (chi-square test of this part: {p_is(d.p_value)}){in_words(d, rule)}"


def in_words(d, rule):
    """What the outputs do differently in this part, said in words: the value they give most too
    often and the one they give most too rarely, each with both frequencies ("" when none moved)."""
    gaps = np.subtract(d.observed, d.expected)
    more, less = int(np.argmax(gaps)), int(np.argmin(gaps))
    if gaps[more] <= 0 or gaps[less] >= 0:
        return ""
    said = [f"{d.part.label(d.part.values[i])} {how} often ({d.observed[i]:.3f} against {d.expected[i]:.3f})"
            for i, how in ((more, "more"), (less, "less"))]
    return f"; in words, yours gives {said[0]} and {said[1]} than {rule} does"


def fit(laws, counts):
    """One chi-square test of observed outcomes against exact laws, one per case ([{outcome:
    probability}] and [{outcome: count}]), the statistics and degrees of freedom added up: (the
    p-value, an observed outcome that its law never produces or None; then the p-value is 0)."""
    statistic, dof = 0.0, 0
    for law, counted in zip(laws, counts):
        never = [outcome for outcome, count in counted.items() if count > 0 and law.get(outcome, 0.0) <= 0.0]
        if never:
            return 0.0, never[0]
        outcomes = sorted(set(law) | set(counted))
        s, d, _ = chi_square_test([counted.get(k, 0) for k in outcomes], [law.get(k, 0.0) for k in outcomes])
        statistic, dof = statistic + s, dof + d
    return chi_square_sf(statistic, dof), None


@dataclass(frozen=True)
class Verdict:
    """What the tests of one grading say: right or not, the whole law's p-value, and the parts that
    differ, (Difference, where) the most significant first."""
    ok: bool
    p_value: float
    differences: list


def judge(laws, counts, parts, significance):
    """Test observed outcomes against exact laws as a whole (`fit`) and part by part (`compare`;
    parts: for each case, [(Part, where it is, in words)]). Each test runs at significance over
    the number of tests, so a right function fails any of them with probability about
    `significance` at most, and a mistake shows most clearly in the part it changes."""
    p_value, _ = fit(laws, counts)
    differences = [(d, where) for law, counted, case_parts in zip(laws, counts, parts) for part, where in case_parts
                   for d in [compare(part, law, counted)] if d is not None]
    threshold = significance / (1 + len(differences))
    differences.sort(key=lambda dw: (dw[0].p_value, -dw[0].tv))
    ok = p_value > threshold and all(d.p_value > threshold for d, _ in differences)
    return Verdict(ok, p_value, [dw for dw in differences if dw[0].p_value <= threshold] or differences[:1])


def located(verdict, rule, n_parts):
    """Where the outputs differ from `rule`: the n_parts parts that differ most, with their frequencies."""
    return ". ".join(difference_text(d, rule, where) for d, where in verdict.differences[:n_parts])


def always_the_same(laws, counts, condition, significance):
    """True when the outcomes repeat themselves beyond chance: under every condition observed
    (`condition(outcome)`: the drafts given, say) one and the same outcome every time, where the
    exact laws would give outcomes this repetitive with probability below `significance`. The mark
    of a step whose random numbers restart at every call (a Generator seeded inside it)."""
    log_chance = 0.0
    for law, counted in zip(laws, counts):
        seen = {}
        for outcome, n in counted.items():
            if n > 0:
                seen.setdefault(condition(outcome), []).append((outcome, n))
        for given, outcomes in seen.items():
            if len(outcomes) > 1:
                return False
            n = outcomes[0][1]
            rule = [prob for outcome, prob in law.items() if prob > 0 and condition(outcome) == given]
            total = sum(rule)
            if total > 0:  # P(n draws all alike) = Σ_o P(o | given)^n, in logs
                terms = [n * math.log(prob / total) for prob in rule]
                top = max(terms)
                log_chance += top + math.log(sum(math.exp(t - top) for t in terms))
    return log_chance < math.log(significance)


def most_likely(row):
    """The point mass on the row's most likely token: what argmax in place of a sample draws."""
    return np.eye(len(row))[int(np.argmax(row))]


# ---------------------------------------------------------------------------------------------
# The one grader of a sampler: a rule and its mistakes are values, an exercise says how to run them
# ---------------------------------------------------------------------------------------------

SIGNIFICANCE = 1e-4  # a right function is refused with at most about this probability (all the tests together)
TRIALS = 2000  # calls of the learner's function per case
SEED_CHECKS = 20  # calls per case repeated twice more with Generators of one seed


SUM_TOLERANCE = float(np.sqrt(np.finfo(np.float64).eps))  # how far from 1 rng.choice lets a p's sum be


class Watched(np.random.Generator):
    """The Generator a grader hands the learner's function: the same draws as
    np.random.default_rng(seed), and it remembers the first distribution rng.choice was handed that
    is not one (`refused`, a `Refusal`), so that a grader says what was wrong with it from the
    numbers themselves, not from NumPy's words, which change between versions."""
    refused = None

    def choice(self, a, size=None, replace=True, p=None, axis=0, shuffle=True):
        try:
            return super().choice(a, size, replace, p, axis, shuffle)
        except ValueError:  # NumPy refuses what `refusal` names (same tolerance): say why only then
            if p is not None and self.refused is None:
                self.refused = refusal(a, p)
            raise


@dataclass(frozen=True)
class Refusal:
    """Why a distribution handed to rng.choice(a, p=p) is not one: "size" (a is not len(p)), "nan",
    "negative", or "sum" (it does not add up to 1); `length`: len(p), which says what it was a
    distribution of (the vocabulary, or how many drafts are kept)."""
    kind: str
    length: int


def refusal(a, p):
    """The Refusal of rng.choice(a, p=p), or None where it is a distribution of a's outcomes."""
    try:
        p = np.asarray(p, np.float64)
        n = int(a) if np.ndim(a) == 0 else len(a)
    except (TypeError, ValueError):
        return None
    if p.ndim != 1:
        return None
    kind = ("size" if len(p) != n else "nan" if np.isnan(p).any() else "negative" if (p < 0).any()
            else "sum" if abs(p.sum() - 1.0) > SUM_TOLERANCE else None)
    return Refusal(kind, len(p)) if kind else None


def watched(stream):
    return Watched(np.random.PCG64(stream))


SAME_EVERY_CALL = ("the same random numbers in every call: your step gave the same output every time it was handed "
                   "the same {inputs}, as one that makes its own Generator with a fixed seed does "
                   "(np.random.default_rng(0) inside the step starts the same numbers at every call). Draw every "
                   "random number from the rng argument (rng.random(), rng.choice); argmax in place of a sample, or "
                   "a test without a uniform, draws none at all.")
SAME_SEED = ("two calls with Generators of the same seed gave different outputs: draw every random number from the "
             "rng argument (rng.random(), rng.choice).")


@dataclass(frozen=True)
class Exercise:
    """A sampler exercise as a value, all the one grader (`check_sampler`) needs. An outcome is
    (condition, output): the condition is what the function was handed that varies (the drafts),
    () when a case is fixed. A rule (the right one, `rule`, and each of `mistakes`) has a `name`, a
    `hint` (what to fix) and is turned into its exact law over outcomes by `law(rule, case)`."""
    name: str  # the rule, as the learner knows it: "Algorithm 2"
    rule: object
    mistakes: dict  # name -> rule
    cases: tuple
    call: str  # how the learner calls the grader: "check_speculative_step(my_speculative_step)"
    run_in: str  # what to do next with a right function, a sentence: "Run it inside the real loop: ...(verify={name})."
    inputs: object  # (case, trials, rng) -> [what the function is handed in each trial, rng aside]
    outcome: object  # (output, inputs, case) -> (outcome, None) or (None, Problem)
    law: object  # (rule, case) -> {outcome: probability}
    parts: object  # (case, number) -> [(Part, where it is in words)]
    explain: object  # (error, refused, inputs, case) -> (what it means, the mistake it likely is or "")
    walk_through: str  # said when the outputs fit neither the rule nor a mistake
    judged_on: str  # the parts, in words, for the message of a right function
    noun: str  # what varies between calls, in words: "drafts", "candidates"
    cases_text: str  # the cases in words

    @property
    def grader(self):
        return self.call.split("(")[0]


@dataclass(frozen=True)
class Problem:
    """An output, or an exception, that no law can explain. `rank` 0 stops the grader at once; a
    higher one is said after every trial, the highest first (one output of K = 1 cannot tell two such
    mistakes apart); `guess`: the mistake that likely made it, said only when none is named first."""
    message: str
    rank: int = 0
    guess: str = ""


def attempt(fn, exercise, inputs, case, rng):
    """Call the learner's function on copies of its inputs, as the loops do (`on_copies`):
    (outcome, None), or (None, Problem) when it raised or returned what the rule never does."""
    rng.refused = None
    try:
        output = on_copies(fn, *inputs, rng)
    except Exception as error:  # the learner's code: report it, don't crash the notebook
        said = raised(fn, error, f"inside {exercise.grader}, for the {exercise.noun} {shown(repr(inputs[0]), 120)}")
        meaning, guess = exercise.explain(error, rng.refused, inputs, case)
        return None, Problem(f"{said}. {meaning}" if meaning else f"{said}.", guess=guess)
    return exercise.outcome(output, inputs, case)


def run_case(fn, exercise, case, trials, inputs_rng, rng, seed_checks, deferred):
    """Call the learner's function `trials` times in one case: ({outcome: count}, the Problem that
    stopped it or None). Problems of a higher rank go to `deferred` {rank: message}; the first
    SEED_CHECKS calls are repeated with two Generators of one seed, which must agree."""
    counts = {}
    for trial, inputs in enumerate(exercise.inputs(case, trials, inputs_rng)):
        outcome, problem = attempt(fn, exercise, inputs, case, rng)
        if problem and not problem.rank:
            return counts, problem
        if problem:
            deferred.setdefault(problem.rank, problem.message)
            continue
        if trial < SEED_CHECKS:  # several: a function with its own unseeded rng may agree once by chance
            same_seed = seed_checks.spawn(1)[0]
            (first, error), (again, error_again) = (attempt(fn, exercise, inputs, case, watched(same_seed))
                                                    for _ in range(2))
            stops = [e for e in (error, error_again) if e and not e.rank]
            if stops:
                return counts, stops[0]
            if (first, error) != (again, error_again):
                return counts, Problem(SAME_SEED)
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts, None


def judged(exercise, counts, cases):
    """The outcomes tested against the rule's exact law, as a whole and part by part (`judge`)."""
    return judge([exercise.law(exercise.rule, case) for case in cases], counts,
                 [exercise.parts(case, number) for number, case in enumerate(cases, 1)], SIGNIFICANCE)


def not_the_rule(exercise, counts, cases):
    """What to say about outcomes that are not the rule's: where they differ, and the mistake whose
    exact law they fit if there is one (or, when the same inputs always gave the same output, the
    random numbers that restart at every call); else the two parts that differ most, and the rule
    in words."""
    name, verdict = exercise.name, judged(exercise, counts, cases)
    fits = [(fit([exercise.law(rule, case) for case in cases], counts)[0], rule) for rule in exercise.mistakes.values()]
    best_p, best = max(fits, key=lambda pr: pr[0])
    said = f"your outputs are not distributed as {name}'s. Where they differ: "
    if best_p > SIGNIFICANCE:
        return (f"{said}{located(verdict, name, 1)}. That is a classic mistake, {best.name} (its exact distribution "
                f"fits yours: p = {best_p:.2g}): {best.hint}.")
    laws = [exercise.law(exercise.rule, case) for case in cases]
    if always_the_same(laws, counts, lambda outcome: outcome[0], SIGNIFICANCE):
        return f"{said}{located(verdict, name, 1)}. That is a classic mistake, {SAME_EVERY_CALL.format(inputs=exercise.noun)}"
    return f"{said}{located(verdict, name, 2)}. That is none of the classic mistakes I know by name. {exercise.walk_through}"


def check_sampler(fn, exercise, trials=TRIALS, seed=0):
    """The one grader of a function that samples (notebook 03's step, 07's multi-candidate step,
    08's block step): returns a Check. It runs fn `trials` times per case of the exercise, on copies
    of its inputs and with a Generator of its own (the inputs, each case's draws and the same-seed
    checks come from independent streams of one SeedSequence); an output no law explains, or an
    exception, is named at once, with the inputs; then the histogram of outcomes is tested against
    the rule's exact law, as a whole and part by part. A right function is refused with probability
    about SIGNIFICANCE at most; a wrong one is told which part differs, with its frequencies, and
    the mistake whose law fits."""
    if not_answered(fn) or not callable(fn):
        return Check(False, f"write your function, then pass the function itself: {exercise.call}.")
    cases = exercise.cases
    inputs_stream, seed_checks, *streams = np.random.SeedSequence(seed).spawn(2 + len(cases))
    inputs_rng, counts, deferred, stopped = np.random.default_rng(inputs_stream), [], {}, None
    for case, stream in zip(cases, streams):
        case_counts, stopped = run_case(fn, exercise, case, trials, inputs_rng, watched(stream), seed_checks, deferred)
        if stopped:
            break
        counts.append(case_counts)
    if deferred:
        return Check(False, deferred[max(deferred)])
    done = cases[: len(counts)]  # the cases the function ran through
    if stopped:  # what it did before it stopped, if that was wrong already, comes first (and no guess after it)
        if done and not judged(exercise, counts, done).ok:
            return Check(False, f"{not_the_rule(exercise, counts, done)} Then, in case {len(done) + 1}: {stopped.message}")
        return Check(False, f"{stopped.message} {stopped.guess}".rstrip())
    verdict = judged(exercise, counts, cases)
    if verdict.ok:
        return Check(True, f"over {len(cases)} cases ({exercise.cases_text}), {len(cases) * trials:,} calls, your "
                           f"outputs fit {exercise.name}'s exact distribution, as a whole (chi-square p = "
                           f"{verdict.p_value:.2g}) and part by part: {exercise.judged_on}. "
                           f"{exercise.run_in.format(name=function_name(fn))}")
    return Check(False, not_the_rule(exercise, counts, cases))
