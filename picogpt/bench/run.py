"""How fast picogpt decodes and scores, measured side by side with PyTorch: `python -m picogpt bench`.

Speculative sampling pays only if the target scores K + 1 positions for about the price of one
decoding step. On a CPU a decoding step reads every weight once, so its floor is
    weight bytes / memory bandwidth,
and the questions are: how close to that floor does one token get, and what do 2..9 positions
cost? Everything is timed in one run, side by side (interleaved rounds, medians of >= 5 runs
after a warm-up round), on:
- the practical bandwidth ceiling: one-row float32 matrix-vector products over >= 1.5 GB;
- GPT-2 small and XL: the real checkpoints if downloaded, else random weights of exactly the
  published shapes (written once to weights/random-<name>/; the speed of a matrix product does
  not depend on the values); the embedded teaching pair when present;
- the engines on the same weights: picogpt's fast path (`model(ids, cache)`, memory-mapped),
  the same with its weights copied into memory (`load(..., in_memory="background")`, timed
  once the copy is done; for the models whose weights are mapped, if memory allows), its plain path (`model.plain`, the checkpoint's
  own arrays) and Hugging Face transformers' GPT2LMHeadModel (torch CPU, float32,
  past_key_values, same thread count) when the `bench` extra is installed.

Results go to benchmarks/bench.json (with the machine: CPU, cores, NumPy/BLAS, load average)
and benchmarks/bench.png.
"""

import ctypes
import datetime
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import warnings
import zlib
from pathlib import Path

import numpy as np

from .. import theory
from ..errors import PicoGPTError
from ..io.checkpoint import write_safetensors
from ..io.params import config_from_json, expected_shapes
from ..io.registry import EMBEDDED, PRETRAINED, checkpoint_path, is_available, published_config, weights_dir
from ..model import GPT2, load_checkpoint
from ..perf import kernels, layout, machine

REPO = Path(__file__).resolve().parents[2]
BENCH_DIR = REPO / "benchmarks"
ALPHAS = (0.6, 0.7, 0.8, 0.9)
KS = tuple(range(1, 9))
PAUSE_S = 0.2  # after each timed call: OpenBLAS's idle threads spin ~0.1 s before they sleep


# ---------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------

def settings(quick=False, **overrides):
    """What to measure. `quick` is for a first look (fewer runs, one context), not for results."""
    chosen = dict(n_runs=3 if quick else 5, n_warmup=1, contexts=(128,) if quick else (128, 512),
                  score_sizes=(2, 3, 5, 9) if quick else tuple(range(2, 10)), score_context=128,
                  plain_score_sizes=(2, 5, 9),  # the plain path's GEMM is slow: fewer sizes
                  ceiling_bytes=int(0.75e9 if quick else 1.6e9), prompt_tokens=8,
                  speculative_tokens=64, speculative_K=4, with_torch=True, with_plain=True, with_in_memory=True,
                  pause_s=PAUSE_S)
    unknown = set(overrides) - set(chosen)
    if unknown:
        raise PicoGPTError(f"unknown bench settings: {', '.join(sorted(unknown))}")
    chosen.update(overrides)
    return chosen


# ---------------------------------------------------------------------------------------------
# The machine
# ---------------------------------------------------------------------------------------------

def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def openblas_core():
    """The kernel set OpenBLAS picked at run time (e.g. 'SkylakeX'), if NumPy uses OpenBLAS."""
    libs = Path(np.__file__).parent.parent / "numpy.libs"
    for lib in sorted(libs.glob("*openblas*")) if libs.is_dir() else []:
        try:
            blas = ctypes.CDLL(str(lib))
        except OSError:
            continue
        for symbol in ("scipy_openblas_get_corename64_", "openblas_get_corename64_", "openblas_get_corename"):
            if hasattr(blas, symbol):
                function = getattr(blas, symbol)
                function.restype = ctypes.c_char_p
                return function().decode()
    return None


def blas_info():
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except Exception:  # older NumPy: no dicts mode
        return {"name": "unknown"}
    return {key: blas.get(key) for key in ("name", "version", "openblas configuration")} | {
        "runtime core": openblas_core()}


def memory_total_gb():
    total = machine.meminfo_bytes().get("MemTotal")
    return None if total is None else round(total / 2**30, 1)


def library_versions():
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    for name in ("torch", "transformers"):
        try:
            versions[name] = importlib.metadata.version(name)  # without importing it
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def machine_info():
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "threads_used": kernels.n_threads(),
            "memory_gb": memory_total_gb(), "os": platform.platform(), "blas": blas_info(),
            "versions": library_versions(),
            "torch_env": {key: os.environ.get(key) for key in TORCH_ENV}}


def load_average():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def read_through(path, chunk_bytes=64 * 2**20):
    """Read a file once, so that the OS page cache holds it (if memory allows)."""
    buffer = bytearray(chunk_bytes)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


def page_cache_fraction(path):
    """How much of a file is in the OS page cache (via `fincore`, if installed), 0..1."""
    if not shutil.which("fincore"):
        return None
    try:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "-o", "RES,SIZE", str(path)],
                             capture_output=True, text=True, timeout=30).stdout.split()
        return round(int(out[0]) / max(1, int(out[1])), 3)
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


# ---------------------------------------------------------------------------------------------
# Checkpoints: real when downloaded, else random weights of the published shapes
# ---------------------------------------------------------------------------------------------

class RandomTensor:
    """A tensor generated only when written (so writing XL holds one tensor at a time):
    GPT-2's initialisation scale, layer norms at weight 1 and bias 0."""

    def __init__(self, name, shape):
        self.name, self.shape = name, shape

    def __array__(self, dtype=None, copy=None):
        if self.name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            return np.ones(self.shape, np.float32)
        if self.name.endswith("bias"):
            return np.zeros(self.shape, np.float32)
        rng = np.random.default_rng(zlib.crc32(self.name.encode()))
        return rng.standard_normal(self.shape, np.float32) * np.float32(0.02)


def random_checkpoint(name, folder=None, config=None):
    """weights/random-<name>/model.safetensors: random F32 weights with the bare Hugging Face
    names and exact shapes of the published checkpoint `name` (or of the Hugging Face `config`
    dict given), + config.json. Made once, then reused. Both files are written to temporary
    names and renamed into place, so a full disk or Ctrl-C never leaves a partial file there."""
    folder = Path(folder or weights_dir() / f"random-{name}")
    path = folder / "model.safetensors"
    if path.exists() and (folder / "config.json").exists():
        return path
    tmp = folder / f"config.json.{os.getpid()}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(config or published_config(name), indent=2))
        os.replace(tmp, folder / "config.json")
        shapes = expected_shapes(config_from_json(folder / "config.json"))
        n_bytes = 4 * sum(int(np.prod(shape)) for shape in shapes.values())
        if shutil.disk_usage(folder).free < n_bytes:
            raise PicoGPTError(f"bench: random-weight {name} needs {n_bytes / 1e9:.2f} GB in {folder} and only "
                               f"{shutil.disk_usage(folder).free / 1e9:.2f} GB is free: free some space, set "
                               "PICOGPT_WEIGHTS_DIR to another disk, or bench fewer --models")
        print(f"writing random-weight {name} ({n_bytes / 1e9:.2f} GB) to {folder} (once)", file=sys.stderr, flush=True)
        write_safetensors(path, {n: RandomTensor(n, shape) for n, shape in shapes.items()},
                          metadata={"picogpt": f"random weights with the shapes of {name}"})
    except OSError as e:
        tmp.unlink(missing_ok=True) if folder.is_dir() else None
        raise PicoGPTError(f"bench: could not write random-weight {name} to {folder} ({e.strerror or e}); "
                           "nothing partial was left at model.safetensors: free some space, set "
                           "PICOGPT_WEIGHTS_DIR to a writable disk, or bench fewer --models") from None
    return path


def resolve_models(names):
    """{label: (path, source)} for names (gpt2, gpt2-xl, tiny-draft, tiny-target) or paths.
    Published names fall back to random weights; missing embedded models are skipped."""
    models, notes = {}, []
    for name in names:
        if name in PRETRAINED:
            if is_available(name):
                models[name] = (checkpoint_path(name), "real")
            else:
                models[name] = (random_checkpoint(name), "random weights, published shapes")
        elif name in EMBEDDED:
            if is_available(name):
                models[name] = (checkpoint_path(name), "embedded")
            else:
                notes.append(f"{name}: not in weights/ yet, skipped")
        else:
            path = Path(name)
            path = path / "model.safetensors" if path.is_dir() else path
            if not path.exists():
                raise PicoGPTError(f"bench: no model named {name!r} and no such checkpoint "
                                   f"(use {', '.join([*PRETRAINED, *EMBEDDED])} or a path)")
            models[path.parent.name] = (path, "file")
    return models, notes


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------

def timed(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - start, result


def summary(times_s):
    return {"median_s": float(np.median(times_s)), "runs_s": [round(t, 9) for t in times_s]}


def interleaved(tasks, n_runs, n_warmup, pause_s=PAUSE_S, after_pause=None):
    """Time every task once per round, round after round, so that they share the machine's
    noise; {name: [seconds per run]} without the warm-up rounds. A task is (run, after). The
    pause keeps one library's spinning threads from slowing the next task down.

    With an `after_pause` dict, each task runs twice in a row per round: the first call, right
    after the pause, is recorded there; the second, with the threads awake as they are inside
    a sampling loop, is the figure returned. (On this project's virtual machine, threads that
    slept through the pause make the first call of a multi-threaded product slow: see
    benchmarks/README.md.)"""
    times = {name: [] for name in tasks}
    for round_index in range(n_warmup + n_runs):
        for name, (run, after) in tasks.items():
            first = None
            if after_pause is not None:
                first, _ = timed(run)
                after()
            seconds, _ = timed(run)
            after()
            time.sleep(pause_s)
            if round_index >= n_warmup:
                times[name].append(seconds)
                if first is not None:
                    after_pause.setdefault(name, []).append(first)
    return times


# ---------------------------------------------------------------------------------------------
# The bandwidth ceiling
# ---------------------------------------------------------------------------------------------

def ceiling_matrices(n_bytes):
    """n_bytes of [6400, 1600] float32 matrices (GPT-2 XL's MLP shape; fewer rows if n_bytes is
    tiny) and a vector to multiply them by. Kept for the whole run: allocated once."""
    rows = 6400 if n_bytes >= 6400 * 1600 * 4 else max(1, n_bytes // (1600 * 4))
    n_matrices = max(1, round(n_bytes / (rows * 1600 * 4)))
    return [np.full((rows, 1600), 0.5, np.float32) for _ in range(n_matrices)], np.ones(1600, np.float32)


def ceiling_tasks(matrices, x):
    """One-row products over every matrix, two ways: OpenBLAS's threaded GEMV (`W @ x`) and
    picogpt's streamed blocks (perf/kernels.py)."""
    return {"openblas_gemv": (lambda: [m @ x for m in matrices], lambda: None),
            "picogpt_streamed": (lambda: [kernels.streamed(x[None], m) for m in matrices], lambda: None)}


def describe_ceiling(times, matrices):
    """GB/s of each way; the faster is the practical limit of decoding one token."""
    total = sum(m.nbytes for m in matrices)
    ways = {name: {"gb_per_s": total / np.median(runs) / 1e9, **summary(runs)} for name, runs in times.items()}
    best = max(ways, key=lambda name: ways[name]["gb_per_s"])
    return {"bytes": total, "gb_per_s": ways[best]["gb_per_s"], "best": best, "ways": ways}


# ---------------------------------------------------------------------------------------------
# The engines: picogpt fast, picogpt plain, PyTorch + transformers
# ---------------------------------------------------------------------------------------------

class NumpyEngine:
    """picogpt with its KV cache; plain=True runs the reference path on the checkpoint arrays."""

    def __init__(self, model, plain=False):
        self.model, self.plain = model, plain
        self.forward_fn = model.plain if plain else model
        self.cache = None

    @property
    def weights(self):
        """The arrays this engine reads."""
        return layout.arrays_of(self.model.params if self.plain else self.model.fast_params)

    def start(self, ids):
        self.cache = self.model.new_cache()
        self.forward_fn(ids, self.cache)

    def forward(self, ids):
        return self.forward_fn(ids, self.cache)

    def rollback(self, n):
        self.cache.truncate(n)


TORCH_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def torch_available():
    """Whether the `bench` extra is installed. Before torch is first imported, its OpenMP threads
    are told to sleep, not spin, while they wait (TORCH_ENV), as picogpt's threads do: on a
    machine that other programs share, spinning made transformers ~20x slower (GPT-2 small,
    2 threads: 916 ms a token against 47 ms passive and 43 ms with one thread)."""
    for key, value in TORCH_ENV.items():
        if "torch" not in sys.modules:
            os.environ.setdefault(key, value)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        return True
    except ImportError:
        return False


def torch_gpt2(model):
    """Hugging Face GPT2LMHeadModel holding picogpt's own checkpoint arrays (zero-copy, so both
    read the same memory), float32, eval mode, torch threads = picogpt's threads."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    c = model.config
    torch.set_num_threads(kernels.n_threads())
    config = GPT2Config(n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd, n_positions=c.n_ctx,
                        vocab_size=c.n_vocab, layer_norm_epsilon=c.layer_norm_epsilon,
                        bos_token_id=0, eos_token_id=0)
    with torch.device("meta"):
        hf = GPT2LMHeadModel(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the given NumPy array is not writable": we only read
        state = {f"transformer.{name}": torch.from_numpy(array) for name, array in flat_params(model).items()}
    hf.load_state_dict(state, assign=True, strict=False)  # lm_head is tied to wte
    hf.tie_weights()
    return hf.eval()


def flat_params(model):
    """{'h.0.attn.c_attn.weight': array, ...}: the checkpoint names of model.params."""
    flat = {}
    for name in expected_shapes(model.config):
        node, *keys = name.split(".")
        value = model.params["h"][int(keys.pop(0))] if node == "h" else model.params[node]
        for key in keys:
            value = value[key]
        flat[name] = value
    return flat


class TorchEngine:
    def __init__(self, model):
        self.hf, self.past = torch_gpt2(model), None

    def run(self, ids):
        import torch

        with torch.inference_mode():
            out = self.hf(input_ids=torch.as_tensor(np.asarray(ids, np.int64))[None],
                          past_key_values=self.past, use_cache=True)
        self.past = out.past_key_values
        return out.logits[0].numpy()

    def start(self, ids):
        self.past = None
        self.run(ids)

    def forward(self, ids):
        return self.run(ids)

    def rollback(self, n):
        extra = self.past.get_seq_length() - n
        if extra > 0:
            self.past.crop(-extra)  # transformers 5: a negative crop drops that many positions


# ---------------------------------------------------------------------------------------------
# Measurements on one model
# ---------------------------------------------------------------------------------------------

def prompt_ids(n_tokens, n_vocab):
    """A fixed prompt of n_tokens ids (the timings do not depend on which)."""
    return (np.arange(n_tokens) * 7 + 1000) % n_vocab


def time_to_ready(path, n_prompt):
    """Time to a ready model and to the first token (prompt prefill), with the files in the OS
    page cache (how much of them was there before is recorded), two ways:
    - picogpt as used: load (memory-map the checkpoint) + prepare (for models of GPT-2 small's
      size and up: memory-map the transposed copy beside it; made first if missing, timed apart);
    - the plain path: load + first token straight from the mapped checkpoint.
    (bench_model adds the time to prepare in memory, as if that file could not be written.)"""
    cache, built_s = layout.cache_path(path), None
    probe = load_checkpoint(path)
    if layout.wants_cache_file(probe.params) and not layout.cache_is_fresh(path):
        built_s, _ = timed(probe.prepare)  # made once per checkpoint
    del probe
    files = [path, *([cache] if cache.exists() else [])]
    found_in_page_cache = [page_cache_fraction(file) for file in files]
    for file in files:
        read_through(file)  # measure warm: a cold start adds reading the files from disk
    load_s, model = timed(load_checkpoint, path)
    prompt = prompt_ids(n_prompt, model.config.n_vocab)
    prepare_s, _ = timed(model.prepare)
    first_s, _ = timed(lambda: model(prompt, model.new_cache()))
    plain_load_s, plain_model = timed(load_checkpoint, path)
    plain_first_s, _ = timed(lambda: plain_model.plain(prompt, plain_model.new_cache()))
    del plain_model
    return model, {
        "prompt_tokens": len(prompt), "fast_file": str(cache) if cache.exists() else None,
        "found_in_page_cache": dict(zip(map(str, files), found_in_page_cache)), "page_cache": "warm",
        "fast_file_made_s": built_s, "load_s": load_s, "prepare_s": prepare_s, "ready_s": load_s + prepare_s,
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
    """The model again, loaded with in_memory="background", and {seconds to ready, seconds
    until its copy was done}; (None, None) if the model's weights are not mapped, and (None,
    why) if the copy would not leave the mapped files room in the page cache (the other
    engines read them)."""
    if not (s["with_in_memory"] and model.checkpoint and layout.wants_cache_file(model.params)):
        return None, None
    n_bytes = sum(a.nbytes for a in layout.arrays_of(model.fast_params))
    total_gb = memory_total_gb()
    needed = n_bytes + sum(Path(f).stat().st_size for f in files) + s["ceiling_bytes"] + 2 * 2**30
    if total_gb is None or needed > total_gb * 2**30:
        return None, f"{model.name}: in-memory engine skipped, it needs {needed / 2**30:.1f} GiB of memory"
    start = time.perf_counter()
    copy = GPT2(model.params, model.config, model.name, model.checkpoint, in_memory="background")
    ready_s, _ = timed(copy.prepare)
    if copy.copying is None:
        return None, f"{model.name}: in-memory engine skipped, too little memory available for the copy"
    copy.copying.join()
    return copy, {"in_memory_ready_s": ready_s, "in_memory_copy_s": time.perf_counter() - start}


def memory_while_timing(before, after):
    """Free memory when the timing started, and how much page-cache reclaim and how many disk
    reads (major faults) happened while it ran; None where the OS does not say."""
    if before is None or after is None:
        return None
    return {"free_gb_before": before["MemFree_bytes"] / 1e9, "available_gb_before": before["MemAvailable_bytes"] / 1e9,
            **{name: after[name] - before[name] for name in machine.RECLAIM_COUNTERS if name in before}}


def make_engines(model, s, copy=None):
    engines, note = {"picogpt": NumpyEngine(model)}, None
    if copy is not None:
        engines["picogpt-in-memory"] = NumpyEngine(copy)
    if s["with_plain"]:
        engines["picogpt-plain"] = NumpyEngine(model, plain=True)
    if s["with_torch"]:
        if torch_available():
            engines["torch"] = TorchEngine(model)
        else:
            note = ("torch/transformers not installed: pip install -e '.[bench]' torch==2.13.0 "
                    "--extra-index-url https://download.pytorch.org/whl/cpu")
    return engines, note


def bench_model(label, path, source, s, ceiling, log):
    log(f"{label}: loading {path}")
    load_at_start = load_average()
    model, ready = time_to_ready(path, s["prompt_tokens"])
    # contexts that leave room for the scored positions (the teaching pair's n_ctx is 384)
    contexts = [n for n in s["contexts"] if n + 16 <= model.config.n_ctx] or [model.config.n_ctx - 16]
    ids = np.random.default_rng(0).integers(0, model.config.n_vocab, size=max(contexts) + 16)
    files = list(ready["found_in_page_cache"])
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
    page_cache_after = {file: page_cache_fraction(file) for file in files}
    del engines, copy  # measured last: 6 GB of fresh memory for XL would push the files out of the page cache
    ready["prepare_in_memory_s"], _ = timed(lambda: layout.fast_params(model.params))
    bytes_per_token = model.bytes_per_token
    c = model.config
    result = {"source": source, "path": str(path), "load_average_at_start": load_at_start,
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


# ---------------------------------------------------------------------------------------------
# Speculative sampling: predicted from the measured costs, and measured on the embedded pair
# ---------------------------------------------------------------------------------------------

def predicted_speedups(draft, target, engine="picogpt"):
    """theory.predicted_speedup_paper for every alpha in ALPHAS and K in KS, from the measured
    t_draft (draft decode), t_target (target decode) and t_score (target, K + 1 positions)."""
    context = min(draft["engines"][engine]["decode"])
    t_draft_s = draft["engines"][engine]["decode"][context]["median_s"]
    t_target_s = target["engines"][engine]["decode"][context]["median_s"]
    scores = target["engines"][engine]["score"]
    table = {}
    for alpha in ALPHAS:
        table[alpha] = {K: theory.predicted_speedup_paper(alpha=alpha, K=K, t_draft_s=t_draft_s,
                                                          t_target_s=t_target_s,
                                                          t_score_s=scores[K + 1]["median_s"])
                        for K in KS if K + 1 in scores}
    return {"engine": engine, "context": context, "t_draft_s": t_draft_s, "t_target_s": t_target_s,
            "t_score_s": {K: scores[K + 1]["median_s"] for K in KS if K + 1 in scores},
            "speedup": table}


def measured_speculative(draft, target, s):
    """Speculative (Algorithm 2) vs autoregressive (Algorithm 1) sampling of the same N tokens
    from the same prompt, interleaved, median wall times; greedy-free default controls."""
    from ..sampling import autoregressive_sampling
    from ..speculative import speculative_sampling

    prompt = list(prompt_ids(s["prompt_tokens"], target.config.n_vocab))
    N, K, results = s["speculative_tokens"], s["speculative_K"], {}

    def run_speculative(seed):
        results.setdefault("speculative", []).append(
            speculative_sampling(draft, target, prompt, N, K=K, seed=seed))

    def run_autoregressive(seed):
        results.setdefault("autoregressive", []).append(autoregressive_sampling(target, prompt, N, seed=seed))

    seeds = iter(range(10_000))
    tasks = {"speculative": (lambda: run_speculative(next(seeds)), lambda: None),
             "autoregressive": (lambda: run_autoregressive(next(seeds)), lambda: None)}
    times = interleaved(tasks, s["n_runs"], s["n_warmup"], s["pause_s"])
    spec = results["speculative"][s["n_warmup"]:]
    t_spec, t_ar = float(np.median(times["speculative"])), float(np.median(times["autoregressive"]))
    return {"draft": draft.name, "target": target.name, "N": N, "K": K,
            "speculative": summary(times["speculative"]), "autoregressive": summary(times["autoregressive"]),
            "speedup": t_ar / t_spec, "alpha_hat": float(np.mean([r.alpha_hat for r in spec])),
            "tokens_per_loop": float(np.mean([r.tokens_per_loop for r in spec]))}


# ---------------------------------------------------------------------------------------------
# The goals of issue 6, checked against the measurements
# ---------------------------------------------------------------------------------------------

def goal(text, value, limit, met):
    return {"goal": text, "value": value, "limit": limit, "met": bool(met)}


def score_goals(results, pair):
    goals, models = [], results["models"]
    draft_label, target_label = pair
    for label, at_most in ((target_label, 1.5), (draft_label, 2.0)):
        m = models.get(label)
        if not m:
            continue
        for engine, tag in (("picogpt", ""), ("picogpt-in-memory", " (in memory)")):
            if engine not in m["engines"]:
                continue
            e = m["engines"][engine]
            if label == target_label:
                context = min(e["decode"])
                vs_floor = e["decode"][context]["vs_floor"]
                goals.append(goal(f"{label}{tag}: decode per token <= 1.25x the bandwidth floor (context {context})",
                                  vs_floor, 1.25, vs_floor <= 1.25))
            if 5 in e["score"]:
                ratio = e["score"][5]["ratio_to_decode"]
                goals.append(goal(f"{label}{tag}: scoring 5 positions <= {at_most}x one-token decode",
                                  ratio, at_most, ratio <= at_most))
            if "torch" in m["engines"]:
                for context in e["decode"]:
                    ours = e["decode"][context]["median_s"]
                    theirs = m["engines"]["torch"]["decode"][context]["median_s"]
                    goals.append(goal(f"{label}{tag}: decode no slower than transformers (context {context}), "
                                      "picogpt / torch", ours / theirs, 1.0, ours <= theirs))
        if label == target_label:
            ready = m["ready"]
            goals.append(goal(f"{label}: ready (load + prepare) <= 2 s", ready["ready_s"], 2.0, ready["ready_s"] <= 2.0))
            if "in_memory_ready_s" in ready:
                goals.append(goal(f"{label} (in_memory='background'): ready <= 2 s", ready["in_memory_ready_s"],
                                  2.0, ready["in_memory_ready_s"] <= 2.0))
    for key, engine in (("predicted", "picogpt"), ("predicted_in_memory", "picogpt-in-memory")):
        predicted = results.get(key)
        if predicted and 4 in predicted["speedup"].get(0.9, {}):
            value = predicted["speedup"][0.9][4]
            goals.append(goal(f"predicted {draft_label} -> {target_label} speedup at K=4, alpha=0.9 >= 2.0x "
                              f"({engine} costs)", value, 2.0, value >= 2.0))
    return goals


# ---------------------------------------------------------------------------------------------
# The whole run
# ---------------------------------------------------------------------------------------------

def run_bench(names=("gpt2", "gpt2-xl", *EMBEDDED), pair=("gpt2", "gpt2-xl"), measured_pair=EMBEDDED,
              quick=False, log=None, **overrides):
    """Measure everything; returns the results dict that save() writes as JSON."""
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    s = settings(quick, **overrides)
    if s["with_torch"]:
        torch_available()  # import it now, with TORCH_ENV, before anything else starts threads
    models, notes = resolve_models(names)
    results = {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "command": "python -m picogpt bench" + (" --quick" if quick else ""),
               "machine": machine_info(), "load_average_before": load_average(),
               "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in s.items()},
               "notes": notes}
    log(f"bandwidth ceiling over {s['ceiling_bytes'] / 1e9:.2f} GB")
    ceiling = ceiling_matrices(s["ceiling_bytes"])
    results["ceiling"] = describe_ceiling(interleaved(ceiling_tasks(*ceiling), s["n_runs"], s["n_warmup"], s["pause_s"]),
                                          ceiling[0])
    loaded, results["models"] = {}, {}
    for label, (path, source) in models.items():
        model, results["models"][label] = bench_model(label, path, source, s, ceiling, log)
        if label in (measured_pair or ()):
            loaded[label] = model  # the others are dropped here: load one model at a time
        del model
    if all(label in results["models"] for label in pair):
        draft, target = (results["models"][label] for label in pair)
        results["predicted"] = predicted_speedups(draft, target)
        if all("picogpt-in-memory" in m["engines"] for m in (draft, target)):
            results["predicted_in_memory"] = predicted_speedups(draft, target, "picogpt-in-memory")
    else:
        notes.append(f"predicted speedup needs both {pair[0]} and {pair[1]}")
    if measured_pair and all(label in loaded for label in measured_pair):
        log(f"speculative vs autoregressive sampling: {measured_pair[0]} drafting for {measured_pair[1]}")
        results["speculative"] = measured_speculative(*(loaded[label] for label in measured_pair), s)
    elif measured_pair:
        notes.append(f"measured speculative sampling needs {' and '.join(measured_pair)}: skipped")
    results["goals"] = score_goals(results, pair)
    results["load_average_after"] = load_average()
    return results


# ---------------------------------------------------------------------------------------------
# Output: JSON, a figure, a table
# ---------------------------------------------------------------------------------------------

def to_json(results):
    def keys_to_str(node):
        if isinstance(node, dict):
            return {str(k): keys_to_str(v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [keys_to_str(v) for v in node]
        if isinstance(node, (np.floating, np.integer)):
            return node.item()
        return node
    return json.dumps(keys_to_str(results), indent=1)


def save(results, folder=BENCH_DIR, stem="bench"):
    """Write <stem>.json and (with matplotlib) <stem>.png into folder; returns their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    json_path = folder / f"{stem}.json"
    json_path.write_text(to_json(results) + "\n")
    paths = [json_path]
    try:
        paths.append(plot(results, folder / f"{stem}.png"))
    except ImportError:
        results["notes"].append("matplotlib not installed: no figure")
    return paths


ENGINES = {"picogpt": ("-o", "C0"), "picogpt-in-memory": ("-.D", "C2"), "picogpt-plain": (":s", "C7"),
           "torch": ("--^", "C1")}  # engine: (line style, colour) in the figure


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_score, ax_bw, ax_pred) = plt.subplots(1, 3, figsize=(16, 4.8))
    for label, m in results["models"].items():
        for engine, (style, _) in ENGINES.items():
            if engine in m["engines"] and m["engines"][engine]["score"]:
                score = m["engines"][engine]["score"]
                ax_score.plot([1, *score], [1, *(v["ratio_to_decode"] for v in score.values())], style,
                              label=f"{label} {engine}")
    ax_score.axhline(1.5, color="grey", lw=0.8)
    ax_score.set(xlabel="positions scored in one cached call (K + 1)", ylabel="time / one-token decode",
                 title="Scoring K+1 positions")
    ax_score.legend(fontsize=7)

    names, values, colors = [], [], []
    for label, m in results["models"].items():
        for engine, (_, color) in ENGINES.items():
            if engine in m["engines"]:
                decode = m["engines"][engine]["decode"]
                names.append(f"{label}\n{engine}")
                values.append(decode[min(decode)]["gb_per_s"])
                colors.append(color)
    ax_bw.bar(range(len(values)), values, color=colors)
    ceilings = [m["ceiling"]["gb_per_s"] for m in results["models"].values()
                for engine in ENGINES if engine in m["engines"]]
    ax_bw.plot(range(len(ceilings)), ceilings, "k_", ms=20, label="ceiling, measured beside it")
    ax_bw.set_xticks(range(len(values)), names, fontsize=6)
    ax_bw.set(ylabel="weight GB/s while decoding", title="Decode bandwidth (context 128)")
    ax_bw.legend(fontsize=7)

    if "predicted" in results:
        for alpha, by_K in results["predicted"]["speedup"].items():
            ax_pred.plot(list(by_K), list(by_K.values()), "-o", label=f"alpha = {alpha}")
        ax_pred.axhline(1, color="grey", lw=0.8)
        ax_pred.set(xlabel="K (drafted tokens per loop)", ylabel="predicted speedup (x)",
                    title="Predicted speedup from measured costs")
        ax_pred.legend(fontsize=7)
    fig.suptitle(f"picogpt bench, {results['date_utc']}, {results['machine']['cpu']}, "
                 f"{results['machine']['threads_used']} threads", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def table(results):
    """The figures as text lines (what `python -m picogpt bench` prints)."""
    machine, c = results["machine"], results["ceiling"]
    lines = [f"machine: {machine['cpu']}, {machine['threads_used']} threads, numpy "
             f"{machine['versions']['numpy']}, BLAS {machine['blas'].get('name')} "
             f"({machine['blas'].get('runtime core')}); load average "
             f"{results['load_average_before']} -> {results['load_average_after']}",
             f"bandwidth ceiling, one-row products over {c['bytes'] / 1e9:.2f} GB: " + ceiling_text(c), ""]
    for label, m in results["models"].items():
        r = m["ready"]
        made = f" (fast file made first: {r['fast_file_made_s']:.1f} s)" if r["fast_file_made_s"] else ""
        if "in_memory_copy_s" in r:
            made += (f"; in_memory='background': ready {r['in_memory_ready_s']:.2f} s, "
                     f"copy done {r['in_memory_copy_s']:.1f} s")
        lines += [f"{label} ({m['source']}): {m['weight_bytes_per_token'] / 1e9:.2f} GB read per token; "
                  f"ceiling beside it {ceiling_text(m['ceiling'])}; floor {m['floor_s'] * 1e3:.1f} ms",
                  f"  ready: load {r['load_s']:.2f} s + prepare {r['prepare_s']:.2f} s = {r['ready_s']:.2f} s{made}; "
                  f"first token {r['first_token_s']:.2f} s; prepare in memory {r['prepare_in_memory_s']:.2f} s; "
                  f"plain path first token {r['plain_first_token_s']:.2f} s"]
        for engine, e in m["engines"].items():
            decode = ", ".join(f"ctx {ctx}: {d['median_s'] * 1e3:.1f} ms = {d['gb_per_s']:.1f} GB/s "
                               f"({d['vs_floor']:.2f}x floor)" for ctx, d in e["decode"].items())
            huge = e.get("huge_page_fraction")
            pages = f"; {huge:.0%} of its weights in 2 MB pages" if huge is not None else ""
            lines.append(f"  {engine:17s} decode {decode}{pages}")
            if e["score"]:
                score = " ".join(f"{n}:{v['ratio_to_decode']:.2f}" for n, v in e["score"].items())
                lines.append(f"  {'':17s} K+1 positions: time / decode  {score}")
            first = e["decode"][min(e["decode"])]
            if "after_pause" in first:
                five = e["score"].get(5, {}).get("after_pause")
                lines.append(f"  {'':17s} first call after the pause: decode {first['after_pause']['median_s'] * 1e3:.1f} ms"
                             + (f", 5 positions {five['ratio_to_decode']:.2f}x that" if five else ""))
        memory = m.get("memory_while_timing")
        if memory and (memory.get("pgscan_file") or memory.get("pgmajfault")):
            lines.append(f"  while timing: {memory.get('pgscan_file', 0):,} page-cache pages scanned for reclaim, "
                         f"{memory.get('pgmajfault', 0):,} major faults (free memory at the start "
                         f"{memory['free_gb_before']:.1f} GB)")
        evicted = [file for file, fraction in m["page_cache_after"].items() if fraction is not None and fraction < 0.99]
        if evicted:
            lines.append(f"  warning: partly evicted from the page cache while measuring: {', '.join(evicted)}")
        for key in ("torch_skipped", "in_memory_skipped"):
            if key in m:
                lines.append(f"  {key.replace('_', ' ')}: {m[key]}")
    for p in (results[key] for key in ("predicted", "predicted_in_memory") if key in results):
        Ks = list(next(iter(p["speedup"].values())))
        lines += ["", f"predicted speedup, {p['engine']} costs (t_draft {p['t_draft_s'] * 1e3:.1f} ms, "
                  f"t_target {p['t_target_s'] * 1e3:.1f} ms), K = {', '.join(map(str, Ks))}:"]
        lines += [f"  alpha {alpha}: " + " ".join(f"{v:.2f}" for v in by_K.values())
                  for alpha, by_K in p["speedup"].items()]
    if "speculative" in results:
        sp = results["speculative"]
        lines.append(f"\nmeasured: {sp['draft']} -> {sp['target']}, N={sp['N']}, K={sp['K']}: speculative "
                     f"{sp['speculative']['median_s']:.2f} s vs autoregressive {sp['autoregressive']['median_s']:.2f} s "
                     f"= {sp['speedup']:.2f}x (alpha_hat {sp['alpha_hat']:.2f})")
    lines.append("")
    lines += [f"{'MET   ' if g['met'] else 'MISSED'} {g['goal']}: {g['value']:.2f}" for g in results["goals"]]
    lines += [f"note: {n}" for n in results["notes"]]
    return "\n".join(lines)


def ceiling_text(ceiling):
    return f"{ceiling['gb_per_s']:.1f} GB/s (" + ", ".join(
        f"{name} {way['gb_per_s']:.1f}" for name, way in ceiling["ways"].items()) + ")"


def markdown(results):
    """The main figures as a Markdown table (benchmarks/README.md is made from it), from
    run_bench's results or from bench.json (where the contexts and sizes are strings)."""
    rows = ["| model | engine | decode ctx 128 | decode ctx 512 | GB/s (ctx 128) | x floor | "
            "score 2 / 5 / 9 positions, x decode | weights in 2 MB pages |", "|---|---|---|---|---|---|---|---|"]
    for label, m in results["models"].items():
        for engine, e in m["engines"].items():
            by_context = {int(ctx): d for ctx, d in e["decode"].items()}
            by_size = {int(n): v for n, v in e["score"].items()}
            decode = {ctx: f"{d['median_s'] * 1e3:.0f} ms" for ctx, d in by_context.items()}
            first = by_context[min(by_context)]
            score = " / ".join(f"{by_size[n]['ratio_to_decode']:.2f}" if n in by_size else "-" for n in (2, 5, 9))
            huge = e.get("huge_page_fraction")
            rows.append(f"| {label} | {engine} | {decode.get(128, '-')} | {decode.get(512, '-')} | "
                        f"{first['gb_per_s']:.1f} | {first['vs_floor']:.2f} | {score} | "
                        f"{'-' if huge is None else f'{huge:.0%}'} |")
    return "\n".join(rows)
