"""Where a one-token decode's time goes: each weight product, the work between them, the per-call
checks, turning logits into probabilities, and what the OS does meanwhile.

    python benchmarks/kernels/decode_profile.py --ceiling ../shared/tools/gemv_ceiling.py
    python benchmarks/kernels/decode_profile.py --ceiling CEILING.py --models gpt2 --calls 15

For GPT-2 small and XL (the bench's checkpoints: real if downloaded, else random weights of the
published shapes, memory-mapped), after CONTEXT cached positions, in one process, calls of three
kinds take turns so that a change in the machine's load hits all of them:
- the decode a user waits for, `model(ids, cache)`, exactly as the package runs it;
- the same call with every weight product timed (model.matmul wrapped): per weight, its time,
  its GB/s and its share of the ceiling;
- the call's work between the products: gpt2.gpt2 with each product replaced by zeros of its
  shape (layer norms, biases, the heads' split, the cache's write, attention, GELU, residuals).
Beside them, once: the per-call checks (input validation, the checkpoint's stat, finite logits),
`sampling.distribution` over the vocabulary at temperature 3 and `sampling.sample`, the page
faults and context switches per decode, the share of the mapped weights in 2 MB pages, and how
long a sleeping helper thread takes to start (candidates.helper_start_us). The ceiling script
(which prints a one-row product rate in GB/s first) runs in a process of its own before and
after. Results: results-profile.json here (README.md's "Where a decode's time goes").
"""

import argparse
import collections
import datetime
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from picogpt.bench.checkpoints import resolve_models, shown_path
from picogpt.fast import kernels
from picogpt.gpt2 import gpt2
from picogpt.io.params import leaves
from picogpt.measure import machine
from picogpt.model import load_checkpoint
from picogpt.sampling import distribution, sample

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tools"))
import pages  # noqa: E402  (tools/pages.py: the share of an array's memory in 2 MB pages)
from candidates import helper_start_us  # noqa: E402
from candidates import machine as machine_of_run  # noqa: E402

CONTEXT = 128  # cached positions before each timed call, as tools/peer.py
TEMPERATURE = 3.0


def ceiling_gb_per_s(script):
    """The rate `script` prints first (GB/s), in a process of its own."""
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, check=True)
    return float(done.stdout.split(" GB/s")[0].split()[-1])


def weight_names(params):
    """{(address, shape): name} of every linear weight, and the LM head as gpt2.py hands it over (wte.T)."""
    names = {}
    for block in params["h"]:
        for group, layer in (("attn", "c_attn"), ("attn", "c_proj"), ("mlp", "c_fc"), ("mlp", "c_proj")):
            W = block[group][layer]["weight"]
            names[(W.ctypes.data, W.shape)] = f"{group}.{layer}"
    wte = params["wte"]["weight"]
    names[(wte.ctypes.data, wte.T.shape)] = "LM head (wte.T)"
    return names


class TimedProducts:
    """model.matmul with each call's time added to its weight's total (and its route noted)."""

    def __init__(self, matmul, names):
        self.matmul, self.names = matmul, names
        self.seconds, self.counts, self.routes = collections.Counter(), collections.Counter(), {}

    def __call__(self, x, W):
        start = time.perf_counter()
        out = self.matmul(x, W)
        seconds = time.perf_counter() - start
        name = self.names.get((W.ctypes.data, W.shape), f"other {W.shape}")
        self.seconds[name] += seconds
        self.counts[name] += 1
        self.routes[name] = kernels.route(x, W)
        return out


def zeros(x, W):
    """A product's result, without the product: what's left of a call is the work between them."""
    return np.zeros((x.shape[0], W.shape[1]), np.float32)


def median_of(function, n=200):
    """Median seconds of `function()` over n calls."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def os_counters():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return np.array([usage.ru_minflt, usage.ru_majflt, usage.ru_nvcsw, usage.ru_nivcsw], np.float64)


def profile_model(name, path, calls):
    model = load_checkpoint(path, name).prepare()
    ids = np.random.default_rng(0).integers(0, model.config.n_vocab, CONTEXT + 1)
    cache = model.new_cache()
    model(ids[:CONTEXT], cache)
    new = ids[CONTEXT:]
    package_matmul = model.matmul
    timed = TimedProducts(package_matmul, weight_names(model.fast_params))

    def decode():
        logits = model(new, cache)
        cache.truncate(CONTEXT)
        return logits

    def instrumented():
        model.matmul = timed
        try:
            decode()
        finally:
            model.matmul = package_matmul

    def between():
        gpt2(new, model.fast_params, model.config, cache, zeros)
        cache.truncate(CONTEXT)

    kinds = {"decode": decode, "products timed": instrumented, "between the products": between}
    times = {kind: [] for kind in kinds}
    per_product = collections.defaultdict(list)
    load_before = machine.load_average()
    for function in kinds.values():  # warm up
        function()
    counters = np.zeros(4)
    for _ in range(calls):
        for kind, function in kinds.items():
            before_seconds = dict(timed.seconds)
            before = os_counters()
            start = time.perf_counter()
            function()
            times[kind].append(time.perf_counter() - start)
            if kind == "decode":
                counters += os_counters() - before
            if kind == "products timed":
                for product, total in timed.seconds.items():
                    per_product[product].append(total - before_seconds.get(product, 0.0))
    load_after = machine.load_average()
    logits = decode()
    checks = {"validate the ids and cache": median_of(lambda: model.validate_inputs(new, cache)),
              "checkpoint unchanged (stat)": median_of(model.ensure_checkpoint_unchanged),
              "finite logits": median_of(lambda: model.ensure_finite(logits))}
    rng = np.random.default_rng(0)
    probs = distribution(logits[-1], TEMPERATURE)
    sampling = {f"distribution (T = {TEMPERATURE:g}, float64)": median_of(lambda: distribution(logits[-1], TEMPERATURE)),
                "sample": median_of(lambda: sample(probs, rng))}
    products = {product: {"route": timed.routes[product],
                          "per_decode": timed.counts[product] // (calls + 1),  # the warm-up call counted too
                          "bytes_per_decode": bytes_of(model.fast_params, product),
                          "times_s": per_product[product]} for product in per_product}
    faults, major, voluntary, involuntary = counters / calls
    return {"model": name, "path": shown_path(path), "bytes_per_token": model.bytes_per_token,
            "n_layer": model.config.n_layer, "times_s": times, "products": products, "checks_s": checks,
            "sampling_s": sampling, "load_before": load_before, "load_after": load_after,
            "per_decode": {"minor page faults": faults, "major page faults": major,
                           "voluntary context switches": voluntary, "involuntary context switches": involuntary},
            "huge_page_share": pages.huge_page_fraction(leaves(model.fast_params))}


def bytes_of(params, product):
    """Bytes of weights a decode reads for `product` (a weight_names name), over all layers."""
    if product.startswith("LM head"):
        return params["wte"]["weight"].nbytes
    if product.startswith("other"):
        return 0
    group, layer = product.split(".")
    return sum(block[group][layer]["weight"].nbytes for block in params["h"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ceiling", required=True, help="a script printing the one-row product rate in GB/s")
    parser.add_argument("--models", default="gpt2,gpt2-xl", help="comma-separated model names")
    parser.add_argument("--calls", type=int, default=15, help="calls of each kind per model")
    parser.add_argument("--out", type=Path, default=HERE / "results-profile.json")
    args = parser.parse_args(argv)
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    ceilings = [ceiling_gb_per_s(args.ceiling)]
    models, _ = resolve_models(args.models.split(","))
    results = [profile_model(name, path, args.calls) for name, (path, _) in models.items()]
    wake_us = helper_start_us()
    ceilings.append(ceiling_gb_per_s(args.ceiling))
    record = {"mode": "profile", "started": started, "machine": machine_of_run(),
              "command": "benchmarks/kernels/decode_profile.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "kernel": kernels.compiled.name(), "context": CONTEXT, "calls": args.calls,
              "ceiling_gb_per_s": {"before": ceilings[0], "after": ceilings[1]}, "helper_start_us": wake_us,
              "models": results}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for m in results:
        decode = np.median(m["times_s"]["decode"])
        floor = m["bytes_per_token"] / 1e9 / np.median(ceilings)
        print(f"{m['model']}: decode {1e3 * decode:.1f} ms = {decode / floor:.2f}x the floor {1e3 * floor:.1f} ms; "
              + "; ".join(f"{p} {1e3 * np.median(v['times_s']):.1f} ms "
                          f"({v['bytes_per_decode'] / np.median(v['times_s']) / 1e9:.1f} GB/s)"
                          for p, v in m["products"].items())
              + f"; between {1e3 * np.median(m['times_s']['between the products']):.1f} ms")
    print(f"raw times: {args.out}")


if __name__ == "__main__":
    main()
