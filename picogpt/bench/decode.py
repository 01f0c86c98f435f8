"""One model's figures: time to ready, one-token decode and scoring K + 1 positions in one
cached call, per engine, beside the bandwidth ceiling (its floor: weight bytes per token /
ceiling), in interleaved rounds."""

import time
from pathlib import Path

import numpy as np

from ..errors import PicoGPTError
from ..model import ANNOUNCE_BYTES, GPT2, load_checkpoint
from ..measure import machine
from .checkpoints import shown_path
from .engines import NumpyEngine, make_engines
from ..measure.timing import timed
from .rounds import ceiling_tasks, describe_ceiling, interleaved, summary


def files_beside(path):
    """{file name: bytes} of the files in the checkpoint's folder."""
    return {f.name: f.stat().st_size for f in Path(path).parent.iterdir() if f.is_file()}


def prompt_ids(n_tokens, n_vocab):
    """A fixed prompt of n_tokens ids (the timings do not depend on which)."""
    return (np.arange(n_tokens) * 7 + 1000) % n_vocab


def time_to_ready(path, n_prompt):
    """Time to a ready model and to the first token (prompt prefill), with the files in the OS
    page cache (how much of them was there before is recorded), two ways:
    - picogpt as used: load (memory-map the checkpoint) + prepare + the first token;
    - the plain path: load + first token straight from the mapped checkpoint.
    Also the bytes of any file that appeared beside the checkpoint meanwhile (there should be
    none: the fast path reads the checkpoint's own arrays)."""
    folder_before = files_beside(path)
    files = [path]
    found_in_page_cache = [machine.page_cache_fraction(file) for file in files]
    for file in files:
        machine.read_through(file)  # measure warm: a cold start adds reading the files from disk
    load_s, model = timed(load_checkpoint, path)
    prompt = prompt_ids(n_prompt, model.config.n_vocab)
    prepare_s, _ = timed(model.prepare)
    first_s, _ = timed(lambda: model(prompt, model.new_cache()))
    plain_load_s, plain_model = timed(load_checkpoint, path)
    plain_first_s, _ = timed(lambda: plain_model.plain(prompt, plain_model.new_cache()))
    del plain_model
    written = {name: size for name, size in files_beside(path).items() if folder_before.get(name) != size}
    return model, {
        "prompt_tokens": len(prompt), "written_beside_checkpoint": written,
        "bytes_written_beside_checkpoint": sum(written.values()),
        "found_in_page_cache": dict(zip(map(shown_path, files), found_in_page_cache)), "page_cache": "warm",
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


def in_memory_copy(model, s, files):
    """The model again, loaded with in_memory=True and prepared (its weights copied in), and
    {seconds to copy}; (None, None) if the model's weights are not mapped, and (None, why) if the
    copy would not leave the mapped files room in the page cache (the other engines read them)."""
    n_bytes = model.nbytes
    if not (s["with_in_memory"] and model.checkpoint and n_bytes >= ANNOUNCE_BYTES):
        return None, None
    total_gb = machine.memory_total_gb()
    needed = n_bytes + sum(Path(f).stat().st_size for f in files) + s["ceiling_bytes"] + 2 * 2**30
    if total_gb is None or needed > total_gb * 2**30:
        return None, f"{model.name}: in-memory engine skipped, it needs {needed / 2**30:.1f} GiB of memory"
    copy = GPT2(model.params, model.config, model.name, model.checkpoint, in_memory=True)
    try:
        copy_s, _ = timed(copy.prepare)
    except PicoGPTError as e:
        return None, f"{model.name}: in-memory engine skipped ({e})"
    return copy, {"in_memory_copy_s": copy_s}


def memory_while_timing(before, after):
    """Free memory when the timing started, and how much page-cache reclaim and how many disk
    reads (major faults) happened while it ran; None where the OS does not say."""
    if before is None or after is None:
        return None
    return {"free_gb_before": before["MemFree_bytes"] / 1e9, "available_gb_before": before["MemAvailable_bytes"] / 1e9,
            **{name: after[name] - before[name] for name in machine.RECLAIM_COUNTERS if name in before}}


def bench_model(label, path, source, s, ceiling, log):
    """(the loaded model, its figures): ready, then decode and scoring per engine and context
    beside the ceiling's products, the page cache and memory while timing."""
    log(f"{label}: loading {path}")
    load_at_start = machine.load_average()
    model, ready = time_to_ready(path, s["prompt_tokens"])
    # contexts that leave room for the scored positions (the teaching pair's n_ctx is 384)
    contexts = [n for n in s["contexts"] if n + 16 <= model.config.n_ctx] or [model.config.n_ctx - 16]
    ids = np.random.default_rng(0).integers(0, model.config.n_vocab, size=max(contexts) + 16)
    files = [path]
    copy, copied = in_memory_copy(model, s, files)  # copied: its times, or why not
    if copy is not None:
        ready.update(copied)
    engines, torch_note = make_engines(model, s, copy)
    per_engine, ceiling_times = {name: {} for name in engines}, {}
    memory_before = machine.memory_counters()
    for context in contexts:
        log(f"{label}: decode and score at context {context} ({', '.join(engines)}, ceiling)")
        for (name, n), (runs, first_runs) in decode_and_score(engines, ids, s, context, ceiling).items():
            if name == "ceiling":
                ceiling_times.setdefault(n, []).extend(runs)
            else:
                per_engine[name].setdefault(context, {})[n] = {**summary(runs), "after_pause": summary(first_runs)}
    beside = describe_ceiling(ceiling_times, ceiling[0])
    memory = memory_while_timing(memory_before, machine.memory_counters())
    huge_pages = {name: machine.huge_page_fraction(engine.weights)
                  for name, engine in engines.items() if isinstance(engine, NumpyEngine)}
    page_cache_after = {shown_path(file): machine.page_cache_fraction(file) for file in files}
    del engines, copy
    bytes_per_token = model.bytes_per_token
    c = model.config
    result = {"source": source, "path": shown_path(path), "load_average_at_start": load_at_start,
              "config": {k: getattr(c, k) for k in
              ("n_layer", "n_head", "n_embd", "n_ctx", "n_vocab")}, "n_params": model.n_params,
              "weight_bytes_per_token": bytes_per_token, "ready": ready, "ceiling": beside,
              "floor_s": bytes_per_token / 1e9 / beside["gb_per_s"],
              "engines": {name: describe_engine(runs, bytes_per_token, beside["gb_per_s"])
                          for name, runs in per_engine.items()},
              "page_cache_after": page_cache_after, "memory_while_timing": memory}
    for name, fraction in huge_pages.items():
        result["engines"][name]["huge_page_fraction"] = fraction  # of its weights' memory
    if torch_note:
        result["torch_skipped"] = torch_note
    if isinstance(copied, str):
        result["in_memory_skipped"] = copied
    return model, result
