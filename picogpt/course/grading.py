"""The course's one grader contract, and what every grader is built from.

Every `check_...` in picogpt/course takes what the learner wrote (a number, or a function to run)
and returns a `Check`: truthy when right, shown by a notebook as one line, "✔ right: ..." with
the worked solution, or "✘ not yet: ..." with what to fix. A wrong answer gets a hint (the
method, or the known mistake it matches) but not the number, so the exercise stays an exercise.
A grader never raises and never prints: a learner's function that raises, or returns something
unusable, is a "✘ not yet" that names the function and where it ran. A grader runs the learner's
function as the course's loops do (`on_copies`): on copies of its inputs, judging only what it returns.

A grader of a function that samples (the steps of notebooks 03, 07 and 08) compares the law of
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
    (speculative.checked): on copies of its inputs. A grader judges only what it returns, as the
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
    return text + f" (chi-square test of this part: {p_is(d.p_value)})"


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


def best_fitting(counts, mistakes):
    """The mistake [(name-bearing rule, its laws per case)] whose exact laws the outcomes fit best: (p-value, rule)."""
    return max(((fit(laws, counts)[0], rule) for rule, laws in mistakes), key=lambda pr: pr[0])
