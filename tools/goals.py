"""The goals of the current work, scored against the bench's results (a development tool: the
rendered goals table of benchmarks/README.md uses it; run from the repository). The goals themselves are data
(benchmarks/goals.json: a sentence, a metric, its parameters, a limit, a unit); this module only
knows how to read each metric off the bench's results, or off the committed results of the tool
that measures it (`result_file`: a key of a JSON file beside goals.json)."""

import json
from pathlib import Path

from picogpt.errors import PicoGPTError
from picogpt.measure import results as results_files
from picogpt.measure import speedup

GOALS_JSON = Path(__file__).resolve().parents[1] / "benchmarks" / "goals.json"


def load_goals(path=GOALS_JSON):
    """(goals, alpha_within) from a goals file."""
    try:
        data = json.loads(Path(path).read_text())
        return data["goals"], data.get("alpha_within", 0.07)
    except (OSError, ValueError, KeyError) as e:
        raise PicoGPTError(f"cannot read the bench's goals from {path} ({type(e).__name__}: {e}); "
                           "restore benchmarks/goals.json from git") from None


# ---------------------------------------------------------------------------------------------
# Metrics: results -> a number, or None where this run did not measure it
# ---------------------------------------------------------------------------------------------

def pair_runs(results, pair):
    """The end-to-end SpeedupMeasurements of a pair ('main': the bench's pair, 'teaching')."""
    labels = results["pairs"].get(pair)
    return [speedup.from_dict(entry["measurement"]) for entry in results.get("speculative", [])
            if labels and entry["pair"] == list(labels)]


def at_alpha(results, alpha, within):
    """The main pair's run whose alpha_hat is nearest alpha, if within `within`."""
    runs = [m for m in pair_runs(results, "main") if abs(m.alpha_hat - alpha) <= within]
    return min(runs, key=lambda m: abs(m.alpha_hat - alpha)) if runs else None


def model_figures(results, model):
    """The isolated figures of the main pair's draft or target, if measured."""
    pair = results["pairs"]["main"]
    return results["models"].get(pair[0 if model == "draft" else 1]) if pair else None


def first_decode(model_results, engine="picogpt"):
    decode = model_results["engines"][engine]["decode"]
    return decode[min(decode, key=int)]


def result_file_value(folder, params):
    """params["key"] (dotted) of the JSON file params["file"] in folder, times params["scale"];
    None if the file or the key is not there."""
    try:
        node = json.loads((Path(folder) / params["file"]).read_text())
        for key in params["key"].split("."):
            node = node[key]
        return node * params.get("scale", 1)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def metric_value(results, metric, params, within, folder=GOALS_JSON.parent):
    if metric == "result_file":
        return result_file_value(folder, params)
    alpha, K = params.get("alpha"), params.get("K")
    if metric in ("speedup", "best_speedup_at_alpha", "prediction_error", "in_loop_score_ratio",
                  "in_loop_decode_vs_floor", "in_loop_cost_ratio"):
        m = at_alpha(results, alpha, within)
        if m is None or (K is not None and K not in m.by_K):
            return None
        if metric == "speedup":
            return m.by_K[K].speedup
        if metric == "best_speedup_at_alpha":  # at the K that measured best
            return max(at.speedup for at in m.by_K.values())
        if metric == "in_loop_cost_ratio":  # c = t_draft / t_target, both timed inside the loops
            return m.t_draft_s / m.t_target_s
        if metric == "prediction_error":
            return abs(m.by_K[K].speedup / m.by_K[K].predicted - 1)
        if metric == "in_loop_score_ratio":
            return m.by_K[K].t_score_s / m.t_target_s
        target = model_figures(results, "target")
        return m.t_target_s / target["floor_s"] if target else None
    if metric == "best_speedup":
        runs = pair_runs(results, params["pair"])
        return max((at.speedup for m in runs for at in m.by_K.values()), default=None)
    m = model_figures(results, params["model"])
    if m is None:
        return None
    if metric == "score_ratio":
        score = m["engines"]["picogpt"]["score"]
        found = {int(n): v for n, v in score.items()}.get(params["positions"])
        return found["ratio_to_decode"] if found else None
    if metric == "decode_vs_floor":
        return first_decode(m)["vs_floor"]
    if metric == "bytes_beside_checkpoint":
        return m["ready"]["bytes_written_beside_checkpoint"]
    if metric == "ready_minus_decode_s":
        ready = m["ready"]
        return ready["first_token_s"] - first_decode(m)["median_s"]
    raise PicoGPTError(f"benchmarks/goals.json names an unknown metric {metric!r}")


FLOOR_METRICS = ("decode_vs_floor", "in_loop_decode_vs_floor")  # a decode's time in floors: 1 at the fastest
BELOW_FLOOR = results_files.BELOW_FLOOR + ", so this run cannot judge it"


def score_goals(results, path=GOALS_JSON):
    """[{goal, value, limit, direction, stretch, unit, met, measured_by}] for every goal of the
    goals file; value and met are None for what was not measured (measured_by: the tool that does)."""
    goals, within = load_goals(path)
    scored = []
    for g in goals:
        direction = "at_least" if "at_least" in g else "at_most"
        value = (metric_value(results, g["metric"], g.get("params", {}), within, Path(path).parent)
                 if g["metric"] else None)
        unmeasured = (BELOW_FLOOR if value is not None and g["metric"] in FLOOR_METRICS and value < 1 else None)
        met = (None if value is None or unmeasured
               else bool(value >= g[direction] if direction == "at_least" else value <= g[direction]))
        scored.append({"goal": g["goal"], "value": value, "limit": g[direction], "direction": direction,
                       "stretch": g.get("stretch"), "unit": g.get("unit", ""), "met": met,
                       "measured_by": g.get("measured_by"), "unmeasured": unmeasured})
    return scored


def goal_value(value, unit):
    """A goal's figure in its unit: '2.21x', '4%', '0 bytes', '0.51 s', '6.23 GB'."""
    if unit == "%":
        return f"{value * 100:.0f}%"
    if unit == "bytes":
        return f"{int(value):,} bytes"
    if not unit and abs(value) < 1:
        return f"{value:.3f}"  # a ratio below 1 (c): a third digit, so 0.085 does not print as 0.09
    return f"{value:.2f}{unit}"


def goal_line(g):
    """One scored goal in plain words, as the documents print it."""
    unit = g.get("unit", "")
    limit = f"{g['direction'].replace('_', ' ')} {goal_value(g['limit'], unit)}"
    if g.get("unmeasured"):
        return f"goal not judged by this run: {g['goal']}: {goal_value(g['value'], unit)}, {g['unmeasured']} (goal: {limit})"
    if g["met"] is None:
        elsewhere = f"; {g['measured_by']} measures it" if g.get("measured_by") else ""
        return f"goal not measured in this run: {g['goal']} (goal: {limit}{elsewhere})"
    source = f"; from {g['measured_by']}" if g.get("measured_by") else ""
    return f"goal {'met' if g['met'] else 'missed'}: {g['goal']}: {goal_value(g['value'], unit)} (goal: {limit}{source})"


