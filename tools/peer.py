"""picogpt beside what a user would pick instead: PyTorch with Hugging Face transformers' GPT-2.

Same shapes (GPT-2 small drafting for GPT-2 XL, the bench's checkpoints: real if downloaded, else
random weights of the published shapes), same machine, same settings (N tokens, K drafts per
loop, one temperature, the whole vocabulary), each engine in fresh processes that take turns:
per repeat every engine runs once, in an order that alternates from one repeat to the next, so
a busy stretch of the machine hits all of them. Each process loads the pair, warms up, then
measures, for each model, a one-token decode and a five-position scoring call after 128 cached
positions (interleaved), and samples N tokens autoregressively from XL and speculatively with
small drafting K at a time (picogpt: measure_speedup; transformers: `generate`, and assisted
generation with the draft as assistant model, K fixed). The peer runs in an environment of its
own (`--peer-python`: a Python with torch and transformers, never picogpt's dependencies);
`--baseline-source` adds another picogpt checkout (an earlier commit) as a third engine.

The floor of a decode is its weight bytes over the one-row product rate of `--ceiling` (a
script that prints "... X GB/s ..." first), run in a process of its own before and after; the
load average is recorded beside every process. Results go to build/bench/peer.json, or
benchmarks/peer.json with --save (tools/render_docs.py renders them into docs/speed.md).

    python -m venv build/peer && build/peer/bin/pip install torch transformers
    .venv/bin/python tools/peer.py --peer-python build/peer/bin/python --ceiling CEILING.py
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from picogpt.bench.checkpoints import resolve_models, shown_path
from picogpt.errors import PicoGPTError
from picogpt.io.atomic import write_text_atomically
from picogpt.measure import machine
from picogpt.measure.results import results_path

REPO = Path(__file__).resolve().parent.parent
CONTEXT, SCORED = 128, 5  # decode and scoring calls after this many cached positions; positions scored

PICOGPT = """
import json, sys, time
import numpy as np
import picogpt
from picogpt.measure.speedup import measure_speedup

settings = json.loads(sys.argv[1])
draft, target = picogpt.load(settings["draft"]), picogpt.load(settings["target"])
ids = np.random.default_rng(0).integers(0, 50257, settings["context"] + settings["scored"])
calls = {}
for role, model in (("draft", draft), ("target", target)):
    cache = model.new_cache()
    model(ids[:settings["context"]], cache)
    for round in range(settings["calls"] + 1):  # the first round warms up
        for n in (1, settings["scored"]):
            start = time.perf_counter()
            model(ids[settings["context"]:settings["context"] + n], cache)
            seconds = time.perf_counter() - start
            cache.truncate(settings["context"])
            if round:
                calls.setdefault(role, {}).setdefault(str(n), []).append(seconds)
m = measure_speedup(draft, target, settings["prompt"], settings["N"], [settings["K"]], repeats=1,
                    seed=settings["seed"], temperature=settings["temperature"])
at = m.by_K[settings["K"]]
print(json.dumps({"calls": calls, "bytes_per_token": {"draft": draft.bytes_per_token, "target": target.bytes_per_token},
                  "autoregressive_s": m.autoregressive_s.median, "speculative_s": at.seconds.median,
                  "alpha_hat": m.alpha_hat, "t_draft_s": m.t_draft_s, "t_target_s": m.t_target_s,
                  "t_score_s": at.t_score_s}))
"""

PEER = """
import json, sys, time
import numpy as np
import torch
from transformers import GPT2LMHeadModel, DynamicCache

settings = json.loads(sys.argv[1])
torch.set_grad_enabled(False)
draft, target = (GPT2LMHeadModel.from_pretrained(settings[name], dtype=torch.float32).eval()
                 for name in ("draft", "target"))
ids = torch.tensor(np.random.default_rng(0).integers(0, 50257, settings["context"] + settings["scored"]))[None]
calls = {}
for role, model in (("draft", draft), ("target", target)):
    cache = DynamicCache()
    model(ids[:, :settings["context"]], past_key_values=cache, use_cache=True)
    for round in range(settings["calls"] + 1):
        for n in (1, settings["scored"]):
            start = time.perf_counter()
            model(ids[:, settings["context"]:settings["context"] + n], past_key_values=cache, use_cache=True)
            seconds = time.perf_counter() - start
            cache.crop(-n)  # drop the n positions just added
            if round:
                calls.setdefault(role, {}).setdefault(str(n), []).append(seconds)
prompt = torch.tensor([settings["prompt"]])
sampling = dict(do_sample=True, temperature=settings["temperature"], top_k=0, top_p=1.0,
                max_new_tokens=settings["N"], min_new_tokens=settings["N"], pad_token_id=0)
draft.generation_config.num_assistant_tokens = settings["K"]
draft.generation_config.num_assistant_tokens_schedule = "constant"  # K drafts per loop, as picogpt
draft.generation_config.assistant_confidence_threshold = 0.0  # never stop drafting early

def seconds(N=settings["N"], **extra):
    torch.manual_seed(settings["seed"])
    start = time.perf_counter()
    out = target.generate(prompt, **{**sampling, "max_new_tokens": N, "min_new_tokens": N}, **extra)
    assert out.shape[1] == prompt.shape[1] + N, out.shape
    return time.perf_counter() - start

seconds(4, assistant_model=draft), seconds(4)  # warm-up
print(json.dumps({"calls": calls, "autoregressive_s": seconds(), "speculative_s": seconds(assistant_model=draft),
                  "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                               "torch_threads": torch.get_num_threads()}}))
"""


def ceiling_gb_per_s(script):
    """The rate `script` prints first (GB/s), run in a process of its own with this Python."""
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    found = re.search(r"([0-9.]+) GB/s", done.stdout)
    if done.returncode or not found:
        raise PicoGPTError(f"the ceiling script {script} printed no rate in GB/s (exit {done.returncode}): "
                           f"{(done.stdout + done.stderr).strip()[-200:]}")
    return float(found.group(1))


def run_engine(engine, settings):
    """One fresh process of `engine` ({python, source?, script}); its results and the load around it."""
    env = dict(os.environ)
    if engine.get("source"):
        env["PYTHONPATH"] = str(engine["source"])
    load_before = machine.load_average()
    start = time.perf_counter()
    done = subprocess.run([engine["python"], "-c", engine["script"], json.dumps(settings)], capture_output=True,
                          text=True, env=env, timeout=3600, cwd=engine.get("source") or REPO)
    if done.returncode:
        raise PicoGPTError(f"{engine['label']} failed (exit {done.returncode}): {done.stderr.strip()[-600:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {**result, "process_s": time.perf_counter() - start, "load_average_before": load_before,
            "load_average_after": machine.load_average()}


def turns(engines, repeat):
    """The engines in the order of one repeat: forwards on even repeats, backwards on odd ones."""
    return engines if repeat % 2 == 0 else engines[::-1]


def summary(values):
    q1, median, q3 = np.percentile(np.asarray(values, np.float64), [25, 50, 75])
    return {"median": float(median), "q1": float(q1), "q3": float(q3), "runs": [float(v) for v in values]}


def describe(runs, engines, settings, ceilings):
    """Per engine: ms per token both ways, the speedup, one-token decodes against the floor and
    the scoring call against a decode; per pair of engines, their ratios repeat by repeat."""
    ceiling = float(np.median(ceilings))
    bytes_per_token = next(r["bytes_per_token"] for r in runs[engines[0]["label"]] if "bytes_per_token" in r)
    out = {}
    for engine in engines:
        results = runs[engine["label"]]
        models = {}
        for role in ("draft", "target"):
            decode = [float(np.median(r["calls"][role]["1"])) for r in results]
            score = [float(np.median(r["calls"][role][str(SCORED)])) / float(np.median(r["calls"][role]["1"]))
                     for r in results]
            floor_s = bytes_per_token[role] / 1e9 / ceiling
            models[settings[role + "_name"]] = {"decode_ms": summary([1e3 * d for d in decode]),
                            "decode_vs_floor": summary([d / floor_s for d in decode]),
                            "score_vs_decode": summary(score), "floor_ms": 1e3 * floor_s}
        out[engine["label"]] = {
            "autoregressive_ms_per_token": summary([1e3 * r["autoregressive_s"] / settings["N"] for r in results]),
            "speculative_ms_per_token": summary([1e3 * r["speculative_s"] / settings["N"] for r in results]),
            "speedup": summary([r["autoregressive_s"] / r["speculative_s"] for r in results]),
            "models": models,
            "in_loop": ({"c": summary([r["t_draft_s"] / r["t_target_s"] for r in results]),
                         "score_vs_decode": summary([r["t_score_s"] / r["t_target_s"] for r in results]),
                         "alpha_hat": summary([r["alpha_hat"] for r in results])}
                        if "t_draft_s" in results[0] else None),
            "load_averages": [r["load_average_before"] for r in results],
            "versions": results[0].get("versions")}
    first = engines[0]["label"]
    out["ratios"] = {other["label"]: {
        "autoregressive": summary([b["autoregressive_s"] / a["autoregressive_s"]
                                   for a, b in zip(runs[first], runs[other["label"]])]),
        "speculative": summary([b["speculative_s"] / a["speculative_s"]
                                for a, b in zip(runs[first], runs[other["label"]])])}
        for other in engines[1:]}  # the other engine's time / picogpt's, repeat by repeat: above 1, picogpt is faster
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peer-python", help="a Python with torch and transformers (its own environment)")
    parser.add_argument("--baseline-source", help="another picogpt checkout, run as a third engine")
    parser.add_argument("--ceiling", required=True, help="a script printing the one-row product rate in GB/s")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("-N", type=int, default=64)
    parser.add_argument("--K", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=3.0)
    parser.add_argument("--calls", type=int, default=7, help="decode and scoring calls per model and process")
    parser.add_argument("--pair", nargs=2, default=["gpt2", "gpt2-xl"], metavar=("DRAFT", "TARGET"))
    parser.add_argument("--out", help="the results file (default: build/bench/peer.json, benchmarks/ with --save)")
    parser.add_argument("--save", action="store_true")
    args = parser.parse_args(argv)
    if args.repeats < 1 or not (args.peer_python or args.baseline_source):
        raise PicoGPTError("peer: give --peer-python, --baseline-source or both, and --repeats >= 1")
    models, _ = resolve_models(args.pair)
    (draft_name, (draft_path, source)), (target_name, (target_path, _)) = models.items()
    settings = {"draft": str(draft_path.resolve().parent), "target": str(target_path.resolve().parent), "draft_name": draft_name,
                "target_name": target_name, "N": args.N, "K": args.K, "temperature": args.temperature, "seed": 0,
                "context": CONTEXT, "scored": SCORED, "calls": args.calls, "prompt": [464, 3303, 531, 11, 1309, 612]}
    engines = [{"label": "picogpt", "python": sys.executable, "script": PICOGPT}]
    if args.baseline_source:
        engines.append({"label": f"picogpt ({Path(args.baseline_source).name})", "python": sys.executable,
                        "script": PICOGPT, "source": Path(args.baseline_source).resolve()})
    if args.peer_python:
        engines.append({"label": "transformers", "python": args.peer_python, "script": PEER})
    out = results_path("peer.json", args.save, args.out)
    ceilings = [ceiling_gb_per_s(args.ceiling)]
    runs = {engine["label"]: [] for engine in engines}
    for repeat in range(args.repeats):
        for engine in turns(engines, repeat):
            print(f"repeat {repeat + 1}/{args.repeats}: {engine['label']}", file=sys.stderr, flush=True)
            runs[engine["label"]].append(run_engine(engine, {**settings, "seed": repeat}))
    ceilings.append(ceiling_gb_per_s(args.ceiling))
    results = {"command": "tools/peer.py" + (" --save" if args.save else ""),
               "machine": machine.machine_info(), "weights": source,
               "pair": [shown_path(draft_path), shown_path(target_path)],
               "settings": {k: v for k, v in settings.items() if k not in ("draft", "target")} | {"repeats": args.repeats},
               "ceiling_gb_per_s": {"before": ceilings[0], "after": ceilings[1]},
               "engines": describe(runs, engines, settings, ceilings), "raw": runs}
    write_text_atomically(out, json.dumps(results, indent=1))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except PicoGPTError as e:
        sys.exit(f"peer: {e}")
