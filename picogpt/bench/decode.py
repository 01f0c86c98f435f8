"""One model's figures: time to ready, one-token decode and scoring K + 1 positions in one
cached call, on picogpt's fast path and its plain path (gpt2.py with np.matmul on the same
arrays), beside the bandwidth ceiling (its floor: weight bytes per token / ceiling), in
interleaved rounds."""

from pathlib import Path

import numpy as np

from ..measure import machine
from ..measure.timing import timed
from ..model import load_checkpoint
from .checkpoints import shown_path
from .rounds import ceiling_tasks, describe_ceiling, interleaved, summary


class Engine:
    """A model with its KV cache: start(ids) (a fresh cache holding ids), forward(ids) (a cached
    call) and rollback(n) (keep the first n positions); plain=True runs the reference path."""

    def __init__(self, model, plain=False):
        self.model, self.forward_fn, self.cache = model, model.plain if plain else model, None

    def start(self, ids):
        self.cache = self.model.new_cache()
        self.forward_fn(ids, self.cache)

    def forward(self, ids):
        return self.forward_fn(ids, self.cache)

    def rollback(self, n):
        self.cache.truncate(n)


def files_beside(path):
    """{file name: bytes} of the files in the checkpoint's folder."""
    return {f.name: f.stat().st_size for f in Path(path).parent.iterdir() if f.is_file()}


def prompt_ids(n_tokens, n_vocab):
    """A fixed prompt of n_tokens ids (the timings do not depend on which)."""
    return (np.arange(n_tokens) * 7 + 1000) % n_vocab


def time_to_ready(path, n_prompt):
    """Time to a ready model and to the first token (prompt prefill), two ways:
    - picogpt as used: load (memory-map the checkpoint) + prepare + the first token;
    - the plain path: load + first token straight from the mapped checkpoint.
    Also the bytes of any file that appeared beside the checkpoint meanwhile (there should be
    none: the fast path reads the checkpoint's own arrays)."""
    folder_before = files_beside(path)
    load_s, model = timed(load_checkpoint, path)
    prompt = prompt_ids(n_prompt, model.config.n_vocab)
    prepare_s, _ = timed(model.prepare)
    first_s, _ = timed(lambda: model(prompt, model.new_cache()))
    plain_load_s, plain = timed(load_checkpoint, path)
    plain_first_s, _ = timed(lambda: plain.plain(prompt, plain.new_cache()))
    written = {name: size for name, size in files_beside(path).items() if folder_before.get(name) != size}
    return model, {
        "prompt_tokens": len(prompt), "written_beside_checkpoint": written,
        "bytes_written_beside_checkpoint": sum(written.values()),
        "load_s": load_s, "prepare_s": prepare_s, "ready_s": load_s + prepare_s,
        "first_token_s": load_s + prepare_s + first_s,
        "plain_ready_s": plain_load_s, "plain_first_token_s": plain_load_s + plain_first_s}


def decode_and_score(engines, ids, s, context, ceiling):
    """Per engine: one new token, and (at the scoring context) K + 1 = score_sizes positions,
    each in one cached call after `context` positions, rolled back after every call. The
    ceiling's products run in the same rounds, so the floor is measured beside the decoding."""
    for engine in engines.values():
        engine.start(ids[:context])
    tasks = {("ceiling", name): task for name, task in ceiling_tasks(*ceiling).items()}
    for label, engine in engines.items():
        scored = s["plain_score_sizes"] if label == "picogpt-plain" else s["score_sizes"]
        for n in (1, *scored) if context == s["score_context"] else (1,):
            tasks[(label, n)] = (lambda e=engine, n=n: e.forward(ids[context:context + n]),
                                 lambda e=engine: e.rollback(context))
    after_pause = {}
    times = interleaved(tasks, s["n_runs"], s["n_warmup"], s["pause_s"], after_pause)
    return {name: (runs, after_pause[name]) for name, runs in times.items()}


def describe_engine(per_context, bytes_per_token, ceiling_gb_per_s):
    """Decode figures (GB/s, vs the ceiling) per context, scoring ratios to one-token decode."""
    out = {"decode": {}, "score": {}}
    for context, sizes in per_context.items():
        one = sizes[1]["median_s"]
        gb_per_s = bytes_per_token / one / 1e9
        out["decode"][context] = {**sizes[1], "gb_per_s": gb_per_s,
                                  "fraction_of_ceiling": gb_per_s / ceiling_gb_per_s,
                                  "vs_floor": one / (bytes_per_token / 1e9 / ceiling_gb_per_s)}
        for n, timing in sizes.items():
            if n > 1:
                out["score"][n] = {**timing, "context": context, "ratio_to_decode": timing["median_s"] / one}
                if "after_pause" in timing:
                    out["score"][n]["after_pause"]["ratio_to_decode"] = (
                        timing["after_pause"]["median_s"] / sizes[1]["after_pause"]["median_s"])
    return out


def bench_model(label, path, source, s, ceiling, log):
    """(the loaded model, its figures): ready, then decode and scoring per engine and context
    beside the ceiling's products."""
    log(f"{label}: loading {path}")
    load_at_start = machine.load_average()
    model, ready = time_to_ready(path, s["prompt_tokens"])
    # contexts that leave room for the scored positions (the teaching pair's n_ctx is 384)
    contexts = [n for n in s["contexts"] if n + 16 <= model.config.n_ctx] or [model.config.n_ctx - 16]
    ids = np.random.default_rng(0).integers(0, model.config.n_vocab, size=max(contexts) + 16)
    engines = {"picogpt": Engine(model), **({"picogpt-plain": Engine(model, plain=True)} if s["with_plain"] else {})}
    per_engine, ceiling_times = {name: {} for name in engines}, {}
    for context in contexts:
        log(f"{label}: decode and score at context {context} ({', '.join(engines)}, ceiling)")
        for (name, n), (runs, first_runs) in decode_and_score(engines, ids, s, context, ceiling).items():
            if name == "ceiling":
                ceiling_times.setdefault(n, []).extend(runs)
            else:
                per_engine[name].setdefault(context, {})[n] = {**summary(runs), "after_pause": summary(first_runs)}
    beside = describe_ceiling(ceiling_times, ceiling[0])
    bytes_per_token, c = model.bytes_per_token, model.config
    return model, {"source": source, "path": shown_path(path), "load_average_at_start": load_at_start,
                   "config": {k: getattr(c, k) for k in ("n_layer", "n_head", "n_embd", "n_ctx", "n_vocab")},
                   "n_params": model.n_params, "weight_bytes_per_token": bytes_per_token, "ready": ready,
                   "ceiling": beside, "floor_s": bytes_per_token / 1e9 / beside["gb_per_s"],
                   "engines": {name: describe_engine(runs, bytes_per_token, beside["gb_per_s"])
                               for name, runs in per_engine.items()}}
