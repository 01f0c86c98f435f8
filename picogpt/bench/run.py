"""How fast picogpt decodes, scores and samples, measured side by side: `python -m picogpt bench`.

Speculative sampling pays only if the target scores K + 1 positions for about the price of one
decoding step. On a CPU a decoding step reads every weight once, so its floor is
    weight bytes per token / memory bandwidth,
and the questions are: how close to that floor does one token get, what do 2..9 positions
cost, and what does speculative sampling deliver end to end? Measured in one run:
- the bandwidth ceiling (measure/machine.py's one-row products, over >= 1.5 GB; rounds.py);
- per model (decode.py): time to ready, one-token decode and K + 1 positions in one cached call,
  in interleaved rounds beside the ceiling, on picogpt's fast path and its plain path. The
  models: GPT-2 small and XL (real if downloaded, else random weights of the published shapes:
  checkpoints.py) and the teaching pair;
- end to end (end_to_end.py, with measure/speedup.py's one measurement): speculative against
  autoregressive sampling, GPT-2 small drafting for XL on random weights at the temperatures
  that set alpha, and the teaching pair, with in-loop costs, breakdown and predicted speedup;
  token trees against a chain of the same size at the first temperature (measure/trees.py).
The results go to a scratch folder, or with `--save` to benchmarks/bench.json and bench.png
(report.py); tools/render_docs.py renders the documents that quote them.
"""

import datetime
import sys
import time

from ..errors import PicoGPTError, shown
from ..fast import compiled, threads
from ..io.registry import EMBEDDED
from ..measure import machine
from .checkpoints import resolve_models
from .decode import bench_model
from .end_to_end import end_to_end
from .rounds import PAUSE_S, ceiling_tasks, describe_ceiling, interleaved


def settings(quick=False, **overrides):
    """What to measure. `quick` is for a first look (fewer runs, one context), not for results."""
    chosen = dict(n_runs=3 if quick else 5, n_warmup=1, contexts=(128,) if quick else (128, 512),
                  score_sizes=(2, 3, 5, 9) if quick else tuple(range(2, 10)), score_context=128,
                  plain_score_sizes=(2, 5, 9),  # the plain path's GEMM is slow: fewer sizes
                  ceiling_bytes=int(0.75e9 if quick else 1.6e9), prompt_tokens=8,
                  with_plain=True,
                  pause_s=PAUSE_S / 4 if quick else PAUSE_S,  # a first look shortens the pauses too
                  # end to end on random weights the temperature sets alpha: the flatter both
                  # distributions, the more two random models agree (bench.json records alpha_hat)
                  end_to_end_temperatures=(3.0,) if quick else (1.0, 2.0, 3.0),
                  end_to_end_Ks=(2, 4) if quick else tuple(range(1, 9)), end_to_end_N=16 if quick else 64,
                  # pairs of measure/compare.py's verdicts: a 95% sign test concludes from 6 at the least, and
                  # 10 resolve a 10% difference at this machine's spread about 8 times in 10 (tests/test_compare.py)
                  end_to_end_repeats=2 if quick else 10, teaching_temperature=1.0,
                  block_K=4,  # block verification raced beside token-wise at this K, in the same repeats
                  tree_shapes=((1,) * 6, (2, 2), (2, 1, 1)))  # a chain and two trees of six drafted tokens
    unknown = set(overrides) - set(chosen)
    if unknown:
        raise PicoGPTError(f"unknown bench settings: {', '.join(sorted(unknown))}")
    chosen.update(overrides)
    return chosen


def run_bench(names=("gpt2", "gpt2-xl", *EMBEDDED), pair=("gpt2", "gpt2-xl"), teaching_pair=EMBEDDED,
              quick=False, log=None, **overrides):
    """Measure everything; returns the results dict that report.save() writes as JSON. `pair`
    (draft, target) is run end to end at the settings' temperatures, `teaching_pair` at
    teaching_temperature, each if both its models are among `names` (None: skip)."""
    log = log or (lambda text: print(shown(text), file=sys.stderr, flush=True))  # paths and names escaped
    start = time.perf_counter()
    s = settings(quick, **overrides)
    models, notes = resolve_models(names)
    results = {"date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
               "command": "python -m picogpt bench" + (" --quick" if quick else ""),
               "machine": {**machine.machine_info(), "threads_used": threads.n_threads(),
                           "kernel": compiled.name()},
               "load_average_before": machine.load_average(),
               "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in s.items()},
               "pairs": {"main": list(pair) if pair else None, "teaching": list(teaching_pair) if teaching_pair else None},
               "notes": notes}
    log(f"bandwidth ceiling over {s['ceiling_bytes'] / 1e9:.2f} GB")
    ceiling = machine.bandwidth_matrices(s["ceiling_bytes"])
    results["ceiling"] = describe_ceiling(interleaved(ceiling_tasks(*ceiling), s["n_runs"], s["n_warmup"], s["pause_s"]),
                                          ceiling[0])
    results["models"] = {}
    for label, (path, source) in models.items():
        model, results["models"][label] = bench_model(label, path, source, s, ceiling, log)
        del model  # one model at a time
    del ceiling
    results["speculative"], results["trees"] = [], []
    paths = {label: path for label, (path, _) in models.items()}
    for chosen, temperatures in ((pair, s["end_to_end_temperatures"]), (teaching_pair, (s["teaching_temperature"],))):
        if chosen and all(label in paths for label in chosen):
            chains, trees = end_to_end(chosen, paths, temperatures, s, log)
            results["speculative"] += chains
            results["trees"] += trees
        elif chosen:
            notes.append(f"speculative sampling end to end needs both {chosen[0]} and {chosen[1]}: skipped")
    results["load_average_after"] = machine.load_average()
    results["seconds"] = time.perf_counter() - start
    return results
