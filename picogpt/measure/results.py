"""Where measurements live: the committed results of the repository (benchmarks/, written only
when asked: `--save`), a scratch folder otherwise, and reading back the bench's committed
speculative-sampling measurements (notebooks 05 and 06 quote them)."""

import json
from pathlib import Path

from ..errors import PicoGPTError
from ..io.registry import SOURCE_TREE, in_source_checkout, user_cache_dir

BENCH_DIR = SOURCE_TREE / "benchmarks"  # the committed results: written only by `bench --save`
BENCH_JSON = BENCH_DIR / "bench.json"
# why a decode's time in floors can come out under 1, said wherever such a multiple is printed
BELOW_FLOOR = ("a decode faster than its floor: the memory bandwidth moved between the ceiling's "
               "measurement and the decode's")


def scratch_dir():
    """Where `python -m picogpt bench` writes unless told to save: build/bench/ of the source
    checkout (git ignores build/), else the user's cache folder. A measurement never changes
    the repository's files unless asked to (`--save`)."""
    if in_source_checkout():
        return SOURCE_TREE / "build" / "bench"
    return user_cache_dir("bench", "the bench's --out")


def committed_dir():
    """benchmarks/ of the source checkout, where `--save` writes; an error for an installed wheel."""
    if not in_source_checkout():
        raise PicoGPTError("bench --save writes the repository's benchmarks/ folder, and picogpt runs from an "
                           "installed package here: run it from a clone (pip install -e .), or use --out DIR")
    return BENCH_DIR


def results_path(name, save=False, out=None):
    """Where a measuring tool writes its results file `name`: `out` if given, else benchmarks/
    when the user asks to commit it (`save`), else the scratch folder (nothing committed changes)."""
    if out:
        return Path(out)
    return (committed_dir() if save else scratch_dir()) / name




def bench_seconds(path=BENCH_JSON):
    """(seconds, cores) of the committed full bench run (benchmarks/bench.json), or None where
    there is none (an installed package, or a file without them)."""
    try:
        results = json.loads(Path(path).read_text())
        return float(results["seconds"]), int(results["machine"]["cores"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def bench_measurements(path=BENCH_JSON):
    """The speculative-sampling measurements of benchmarks/bench.json: ([(SpeedupMeasurement,
    weights source)], a line saying when and where), or ([], why there are none)."""
    from . import speedup  # here, so that the command line's --help reads bench_seconds without the samplers

    path = Path(path)
    if not path.exists():
        return [], (f"{path.name} not found: speculative sampling at GPT-2's shapes is not measured yet "
                    "(run: python -m picogpt bench --save)")
    try:
        results = json.loads(path.read_text())
        entries = results.get("speculative")
        if not isinstance(entries, list) or not entries:
            return [], (f"{path.name} holds no end-to-end speculative-sampling measurement of this kind "
                        "(run: python -m picogpt bench --save)")
        found = [(speedup.from_dict(entry["measurement"]), entry["source"]) for entry in entries]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return [], f"{path.name} cannot be read as the bench's results ({type(e).__name__}: {e})"
    machine = results.get("machine", {})
    kernel = machine.get("kernel", "numpy")  # results without the field ran NumPy's tiles
    return found, (f"measured {results.get('date_utc', '(undated)')} on {machine.get('cpu', 'an unrecorded machine')}, "
                   f"{kernel} kernel for the few-row products")
