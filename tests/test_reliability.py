"""Nothing silently wrong: every fault is one clear PicoGPTError (one line, exit 2 on
the command line), non-finite numbers are caught, a KV cache belongs to one model's shape, no
head count is guessed, and nothing half-written is left where a good file is expected.

Downloads' faults are tested in tests/test_download.py, malformed headers in test_checkpoint.py.
"""

import errno
import io
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from helpers import random_gpt2, random_tensors, write_random_checkpoint

import picogpt.io.checkpoint as checkpoint_module
from picogpt import autoregressive_sampling, speculative_sampling
from picogpt.cli import main
from picogpt.errors import CheckpointError, PicoGPTError
from picogpt.gpt2 import GPT2Config
from picogpt.io.checkpoint import read_safetensors, write_safetensors
from picogpt.io.params import params_from_tensors
from picogpt.io.registry import EMBEDDED_DIR
from picogpt.kv_cache import KVCache
from picogpt.model import GPT2, load_checkpoint
from picogpt.sampling import MIN_TEMPERATURE, distribution, validate_controls


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny random model folder with GPT-2's vocabulary, so the command line can decode it."""
    return write_random_checkpoint(tmp_path_factory.mktemp("reliability") / "model", 1,
                                   n_vocab=50257, n_ctx=48, n_embd=16)


def run_main(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# ---- the command line: one line and exit 2 -----------------------------------------------------

def test_negative_seed_is_one_line_before_any_text(capsys, checkpoint):
    code, out, err = run_main(capsys, "generate", "--model", str(checkpoint), "-n", "3", "--seed", "-1")
    assert code == 2 and out == "" and "seed must be a whole number >= 0" in one_error_line(err)


@pytest.mark.parametrize("seed", [-1, 2.5, True, "7"])
def test_bad_seed_is_refused_by_both_samplers(seed):
    model = random_gpt2()
    with pytest.raises(PicoGPTError, match="seed must be"):
        autoregressive_sampling(model, [1, 2], 2, seed=seed)
    with pytest.raises(PicoGPTError, match="seed must be"):
        speculative_sampling(model, model, [1, 2], 2, seed=seed)


def refuse_to_open(monkeypatch, module, name="model.safetensors"):
    """Make `open` in `module` fail as it does for a file the user may not read (chmod does
    not stop root, so the refusal is simulated)."""
    real_open = open

    def fake_open(path, *args, **kwargs):
        if str(path).endswith(name):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(module, "open", fake_open, raising=False)


def test_checkpoint_the_user_cannot_read_is_one_line(capsys, monkeypatch, checkpoint):
    refuse_to_open(monkeypatch, checkpoint_module)
    code, out, err = run_main(capsys, "info", str(checkpoint))
    line = one_error_line(err)
    assert code == 2 and out == "" and "cannot read" in line and "Permission denied" in line and "chmod" in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file whatever its mode (see the monkeypatched test)")
def test_checkpoint_without_read_permission_is_one_line(capsys, tmp_path, checkpoint):
    folder = shutil.copytree(checkpoint, tmp_path / "locked")
    (folder / "model.safetensors").chmod(0)
    code, _, err = run_main(capsys, "info", str(folder))
    assert code == 2 and "Permission denied" in one_error_line(err)


def test_bench_with_zero_runs_is_refused_before_measuring(capsys, monkeypatch):
    import picogpt.bench

    monkeypatch.setattr(picogpt.bench, "run_bench", lambda *a, **k: pytest.fail("bench ran with --runs 0"))
    code, _, err = run_main(capsys, "bench", "--runs", "0", "--models", "tiny-draft")
    assert code == 2 and "--runs 0" in one_error_line(err)


@pytest.mark.parametrize("encoding, prompt", [("cp1252", "日本語 says"), ("utf-8", "bad byte \udcff")])
def test_stdout_that_cannot_encode_the_text_still_prints(monkeypatch, capsys, checkpoint, encoding, prompt):
    """A Windows console (cp1252) cannot show CJK; strict UTF-8 cannot show the lone surrogate
    that a non-UTF-8 byte in argv becomes: both are printed as backslash escapes."""
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding=encoding, errors="strict"))
    code = main(["generate", "--model", str(checkpoint), "--prompt", prompt, "-n", "4", "--seed", "3"])
    sys.stdout.flush()
    text = raw.getvalue().decode(encoding)
    assert code == 0, capsys.readouterr().err
    assert text.startswith(prompt.encode(encoding, "backslashreplace").decode(encoding))
    assert "4 tokens in" in text


def test_an_error_message_with_line_breaks_is_printed_on_one_line(capsys, monkeypatch):
    import picogpt.model

    def fail(*args, **kwargs):
        raise PicoGPTError("first line\nsecond line\nthird line")

    monkeypatch.setattr(picogpt.model, "load", fail)
    code, _, err = run_main(capsys, "info", "gpt2")
    assert code == 2 and one_error_line(err) == "error: first line second line third line"


def test_an_os_error_from_the_environment_is_one_line(capsys, monkeypatch):
    import picogpt.model

    def fail(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "/some/where")

    monkeypatch.setattr(picogpt.model, "load", fail)
    code, _, err = run_main(capsys, "info", "gpt2")
    line = one_error_line(err)
    assert code == 2 and "No space left on device (/some/where)" in line


# ---- nothing half-written at a final path ---------------------------------------------------------

class FailsOnDisk:
    """A tensor whose bytes cannot be written: converting it raises the full disk's OSError."""

    def __init__(self, shape, error=errno.ENOSPC):
        self.shape, self.error = shape, error

    def __array__(self, dtype=None, copy=None):
        raise OSError(self.error, os.strerror(self.error))


def test_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    path = tmp_path / "model.safetensors"
    write_safetensors(path, {"a": np.ones(3, np.float32)})
    before = path.read_bytes()
    with pytest.raises(OSError, match="No space left"):
        write_safetensors(path, {"a": np.zeros(3, np.float32), "b": FailsOnDisk((4,))})
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]


def test_bench_random_checkpoint_on_a_full_disk_is_one_error_and_no_partial_file(tmp_path, monkeypatch):
    import picogpt.bench.checkpoints as bench_run

    monkeypatch.setattr(bench_run, "RandomTensor", lambda name, shape: FailsOnDisk(shape))
    config = {"n_layer": 1, "n_head": 2, "n_embd": 8, "n_positions": 6, "vocab_size": 11}
    with pytest.raises(PicoGPTError, match="could not write random-weight toy.*No space left"):
        bench_run.random_checkpoint("toy", folder=tmp_path / "random-toy", config=config)
    assert not (tmp_path / "random-toy" / "model.safetensors").exists()
    assert not list((tmp_path / "random-toy").glob("*.tmp"))


def test_bench_random_checkpoint_too_big_for_the_disk_is_refused_before_writing(tmp_path, monkeypatch):
    import picogpt.bench.checkpoints as bench_run

    monkeypatch.setattr(bench_run.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**6, 10**6, 100))
    config = {"n_layer": 1, "n_head": 2, "n_embd": 8, "n_positions": 6, "vocab_size": 11}
    with pytest.raises(PicoGPTError, match="needs .* GB .* free some space"):
        bench_run.random_checkpoint("toy", folder=tmp_path / "random-toy", config=config)
    assert not (tmp_path / "random-toy" / "model.safetensors").exists()


# ---- configs are validated on load ------------------------------------------------------------------

GOOD = {"n_layer": 1, "n_head": 2, "n_embd": 8, "n_positions": 6, "vocab_size": 11}


@pytest.mark.parametrize("change, message", [
    ({"n_head": 0}, "n_head=0, expected a whole number >= 1"),
    ({"n_head": -2}, "n_head=-2, expected a whole number >= 1"),
    ({"n_layer": 1.5}, "n_layer=1.5, expected a whole number"),
    ({"n_layer": True}, "n_layer=True, expected a whole number"),
    ({"n_positions": 0}, "n_positions=0, expected a whole number >= 1"),
    ({"vocab_size": "11"}, "vocab_size='11', expected a whole number"),
    ({"layer_norm_epsilon": -1}, "layer_norm_epsilon=-1, expected a finite number > 0"),
    ({"layer_norm_epsilon": 0}, "layer_norm_epsilon=0, expected a finite number > 0"),
])
def test_bad_config_json_is_refused_on_load(tmp_path, capsys, change, message):
    config = GPT2Config(n_layer=1, n_head=2, n_embd=8, n_ctx=6, n_vocab=11)
    write_safetensors(tmp_path / "model.safetensors", random_tensors(config))
    (tmp_path / "config.json").write_text(json.dumps(GOOD | change))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(tmp_path)
    code, _, err = run_main(capsys, "info", str(tmp_path))
    assert code == 2 and message in one_error_line(err)


@pytest.mark.parametrize("eps", [float("nan"), float("inf"), -1e-5])
def test_a_model_made_in_python_with_a_bad_config_is_refused(eps):
    config = GPT2Config(n_layer=1, n_head=2, n_embd=8, n_ctx=6, n_vocab=11, layer_norm_epsilon=eps)
    with pytest.raises(CheckpointError, match="layer_norm_epsilon"):
        params_from_tensors(random_tensors(config), config)
    with pytest.raises(CheckpointError, match="layer_norm_epsilon"):
        GPT2({}, config)


def test_tiny_draft_without_its_config_is_refused_not_guessed(tmp_path):
    """tiny-draft has 2 heads; its shapes alone fit 1 head too, which gives other text."""
    source = EMBEDDED_DIR / "tiny-draft" / "model.safetensors"
    if not source.exists():
        pytest.skip("picogpt/io/data/tiny-draft is not in this checkout")
    shutil.copy(source, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="n_head cannot be inferred.*config.json next to the checkpoint"):
        load_checkpoint(tmp_path)


# ---- non-finite numbers ------------------------------------------------------------------------------

def spoiled(value, name="h.0.mlp.c_fc.weight", seed=0):
    """A random GPT-2 with one weight set to `value` (NaN or inf)."""
    config = GPT2Config(n_layer=1, n_head=2, n_embd=16, n_ctx=32, n_vocab=50)
    tensors = random_tensors(config, seed)
    tensors[name][0, 0] = value
    return GPT2(params_from_tensors(tensors, config), config, f"spoiled-{value}")


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_weights_raise_naming_the_model(value):
    model = spoiled(value)
    for path in (model, model.plain):  # the fast path and the reference path
        with pytest.raises(PicoGPTError, match=f"spoiled-{value} produced non-finite logits.*weights"):
            path([1, 2, 3])
    with pytest.raises(PicoGPTError, match="non-finite logits"):
        autoregressive_sampling(model, [1, 2], 5, seed=0)


def test_inf_weights_on_the_command_line_are_one_line(tmp_path, capsys, checkpoint):
    folder = shutil.copytree(checkpoint, tmp_path / "inf")
    tensors = {name: np.array(array) for name, array in read_safetensors(folder / "model.safetensors").items()}
    tensors["h.0.mlp.c_fc.weight"][0, 0] = np.inf
    write_safetensors(folder / "model.safetensors", tensors)
    code, out, err = run_main(capsys, "generate", "--model", str(folder), "-n", "3", "--seed", "1")
    assert code == 2 and "<|endoftext|>" not in out and "inf produced non-finite logits" in one_error_line(err)


def test_a_nan_draft_stops_speculative_sampling_instead_of_faking_alpha():
    draft, target = spoiled(np.nan, seed=1), spoiled(0.1, seed=2)
    with pytest.raises(PicoGPTError, match="spoiled-nan produced non-finite logits"):
        speculative_sampling(draft, target, [1, 2], 8, K=3, seed=0)
    with pytest.raises(PicoGPTError, match="spoiled-nan produced non-finite logits"):
        speculative_sampling(target, draft, [1, 2], 8, K=3, seed=0)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_distribution_refuses_non_finite_logits(bad):
    with pytest.raises(PicoGPTError, match="NaN or inf"):
        distribution(np.array([0.0, 1.0, bad]), temperature=0.7)


def test_a_temperature_so_small_it_overflows_is_refused_everywhere(capsys, checkpoint):
    model = random_gpt2()
    for temperature in (1e-310, 5e-324, MIN_TEMPERATURE / 2):
        with pytest.raises(PicoGPTError, match="use temperature=0 for greedy"):
            validate_controls(temperature)
        with pytest.raises(PicoGPTError, match="use temperature=0 for greedy"):
            distribution(np.array([1.0, 2.0]), temperature)
        with pytest.raises(PicoGPTError, match="use temperature=0 for greedy"):
            autoregressive_sampling(model, [1], 2, temperature=temperature)
        with pytest.raises(PicoGPTError, match="use temperature=0 for greedy"):
            speculative_sampling(model, model, [1], 2, temperature=temperature)
    code, out, err = run_main(capsys, "generate", "--model", str(checkpoint), "--temperature", "1e-310")
    assert code == 2 and out == "" and "temperature=0" in one_error_line(err)
    logits = model([1, 2, 3])[-1]  # the smallest accepted temperature is already greedy
    assert np.array_equal(distribution(logits, MIN_TEMPERATURE), distribution(logits, 0))


# ---- a KV cache belongs to one model's shape ----------------------------------------------------------

@pytest.mark.parametrize("n", [2.5, True, np.bool_(True), "1", None])
def test_truncate_takes_a_whole_number_in_range(n):
    model = random_gpt2()
    cache = model.new_cache()
    model([1, 2, 3], cache)
    with pytest.raises(PicoGPTError, match="truncate"):
        cache.truncate(n)
    assert len(cache) == 3


def test_truncate_accepts_numpy_integers():
    model = random_gpt2()
    cache = model.new_cache()
    model([1, 2, 3], cache)
    cache.truncate(np.int64(2))
    assert len(cache) == 2 and type(cache.length) is int
    assert np.allclose(model([3], cache), model([1, 2, 3])[-1:], atol=1e-5)


def test_a_cache_made_for_another_model_is_refused_both_ways():
    draft, target = random_gpt2(n_layer=1, seed=1), random_gpt2(n_layer=2, seed=2)
    target.name = "the-target"
    for model, other in ((draft, target), (target, draft)):
        cache = other.new_cache()
        with pytest.raises(PicoGPTError, match=f"this cache was made for a model with n_layer={other.config.n_layer}, "
                                               f".*not {model.name}"):
            model([1, 2], cache)
        with pytest.raises(PicoGPTError, match="this cache was made for"):
            model.plain([1, 2], cache)
        assert len(cache) == 0


def test_a_cache_of_another_context_length_is_refused():
    model = random_gpt2()
    c = model.config
    with pytest.raises(PicoGPTError, match="n_ctx=16"):
        model([1], KVCache(c.n_layer, c.n_head, c.head_dim, 16))


# ---- environment variables: one line, before any output -------------------------------------------

COMMANDS = {  # each command, as a user runs it
    "info": ["info", "tiny-draft"],
    "download": ["download", "gpt2"],
    "generate": ["generate", "-n", "3", "--seed", "1"],
    "speculate": ["speculate", "-n", "3", "--seed", "1"],
    "bench": ["bench", "--quick", "--models", "tiny-draft"],
}
# variable: (bad values, words of its error, the commands that read it)
BAD_ENVIRONMENT = {
    "PICOGPT_THREADS": (["\u00b2", "\u0663", "10000000000", "9" * 5000, "0"],  # superscript two, Arabic-Indic three
                        "expected a whole number of threads from 1 to", COMMANDS),
    "PICOGPT_COURSE_MODELS": (["gpt3"], "expected one of gpt2, tiny", COMMANDS),
    "PICOGPT_KERNEL": (["fortran", "k" * 5000], "expected 'auto', 'numba' or 'numpy'", ["generate", "speculate", "bench"]),
    "HF_ENDPOINT": (["ftp://mirror.example"], "not a usable server address", ["download"]),
    # the Hugging Face cache's folder: a home folder that cannot be found was a RuntimeError traceback
    **{variable: (["~nosuchuser/cache"], "home folder this system cannot find", COMMANDS)
       for variable in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")},
}
ANY_VALUE_GOES = {"PICOGPT_WEIGHTS_DIR"}  # any folder: a bad one is found on use
NOTEBOOKS_ONLY = {"PICOGPT_COURSE_REPEATS"}  # no command reads it; a bad one: tests/test_course_pair.py


@pytest.mark.parametrize("variable, value, message, command", [
    (variable, value, message, command) for variable, (values, message, commands) in BAD_ENVIRONMENT.items()
    for value in values for command in commands])
def test_a_bad_environment_variable_is_one_line_before_any_output(capsys, monkeypatch, variable, value, message,
                                                                   command):
    """Such errors used to be printed after the prompt, on the same line (or as a traceback);
    `speculate` read PICOGPT_KERNEL after printing its prompt."""
    import picogpt.bench
    import picogpt.io.download
    from picogpt.fast import threads

    threads.threads_for.cache_clear()
    monkeypatch.setattr(picogpt.bench, "run_bench", lambda *a, **k: pytest.fail("bench measured"))
    monkeypatch.setattr(picogpt.io.download, "download_spec", lambda *a, **k: pytest.fail("downloaded"))
    monkeypatch.setenv(variable, value)
    code, out, err = run_main(capsys, *COMMANDS[command])
    line = one_error_line(err)
    assert code == 2 and out == "" and variable in line and message in line and len(line) < 300


def test_every_environment_variable_picogpt_reads_is_checked_above():
    source = "".join(path.read_text() for path in (EMBEDDED_DIR.parents[1]).rglob("*.py"))
    named = set(re.findall(r"\"((?:PICOGPT|HF|XDG)_[A-Z_]+)\"", source))
    assert named == set(BAD_ENVIRONMENT) | ANY_VALUE_GOES | NOTEBOOKS_ONLY


def test_an_absurd_thread_count_is_refused_in_python_too(monkeypatch):
    from picogpt.fast import threads

    monkeypatch.setenv("PICOGPT_THREADS", str(10**6))
    with pytest.raises(PicoGPTError, match="PICOGPT_THREADS='1000000'"):
        threads.n_threads()
    monkeypatch.setenv("PICOGPT_THREADS", str(threads.MAX_THREADS_PER_CORE * threads.usable_cores()))
    assert threads.n_threads() == threads.MAX_THREADS_PER_CORE * threads.usable_cores()


def test_no_home_folder_is_one_line_naming_the_variable_to_set(monkeypatch, tmp_path):
    import pathlib

    import picogpt.io.registry as registry

    monkeypatch.delenv("PICOGPT_WEIGHTS_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(registry, "SOURCE_TREE", tmp_path)  # as an installed wheel: no checkout
    monkeypatch.setattr(pathlib.Path, "home", lambda: (_ for _ in ()).throw(RuntimeError("no home")))
    with pytest.raises(PicoGPTError, match="HOME is not set; set PICOGPT_WEIGHTS_DIR"):
        registry.weights_dir()


# ---- a closed stdout ends the program quietly --------------------------------------------------------

def run_into_closed_pipe(*argv):
    """Run `python -m picogpt ARGV` with its stdout a pipe nobody reads (`... | head -n0`)."""
    import subprocess

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "picogpt", *argv], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("argv", [["info", "tiny-draft"], ["generate", "--model", "tiny-target", "-n", "5"]])
def test_output_into_a_closed_pipe_ends_quietly(argv):
    """`python -m picogpt info tiny-draft | head -n1` used to end in a BrokenPipeError traceback."""
    result = run_into_closed_pipe(*argv)
    assert result.stderr == "" and result.returncode == 141


# ---- huge integers and booleans are not numbers of the kind asked for -------------------------------

@pytest.mark.parametrize("name, value", [("temperature", 10**400), ("temperature", True), ("top_p", 10**400),
                                         ("top_p", True), ("top_k", True), ("K", True), ("N", True)])
def test_a_huge_integer_or_a_boolean_control_is_refused(name, value):
    """temperature=10**400 raised OverflowError from math.isfinite; temperature=True and
    top_p=True were taken as 1."""
    model = random_gpt2()
    request = dict(N=2, temperature=1.0) | {name: value}
    speculative = dict(K=2) | request
    autoregressive = {key: v for key, v in request.items() if key != "K"}
    with pytest.raises(PicoGPTError, match=f"{name}.* must be"):
        speculative_sampling(model, model, [1, 2], **speculative, seed=0)
    if name != "K":
        with pytest.raises(PicoGPTError, match=f"{name}.* must be"):
            autoregressive_sampling(model, [1, 2], **autoregressive, seed=0)


def test_a_401_digit_layer_norm_epsilon_is_one_line(tmp_path, capsys):
    config = GPT2Config(n_layer=1, n_head=2, n_embd=8, n_ctx=6, n_vocab=11)
    write_safetensors(tmp_path / "model.safetensors", random_tensors(config))
    (tmp_path / "config.json").write_text(json.dumps(GOOD).replace("}", ', "layer_norm_epsilon": 1' + "0" * 400 + "}"))
    with pytest.raises(CheckpointError, match="layer_norm_epsilon=10000.*…, expected a finite number > 0"):
        load_checkpoint(tmp_path)
    code, _, err = run_main(capsys, "info", str(tmp_path))
    assert code == 2 and "expected a finite number > 0" in one_error_line(err) and len(err) < 400


# ---- special files: a config.json that never ends ---------------------------------------------------

def run_info_limited(folder):
    """`python -m picogpt info FOLDER` in a process that may not take more than 2 GB of address
    space (a read without end fails there, instead of filling the machine) or run a minute."""
    import resource
    import subprocess

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, resource.RLIM_INFINITY))

    return subprocess.run([sys.executable, "-m", "picogpt", "info", str(folder)], capture_output=True, text=True,
                          timeout=60, preexec_fn=limit)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge"])
def test_a_config_json_that_is_no_small_regular_file_is_one_line(tmp_path, checkpoint, kind):
    """A FIFO used to hang `info` forever, a link to /dev/zero to read until memory ran out."""
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(checkpoint / "model.safetensors", folder)
    config = folder / "config.json"
    if kind == "fifo":
        os.mkfifo(config)
    elif kind == "dev-zero":
        config.symlink_to("/dev/zero")
    else:  # valid JSON, but 2 MB of it
        config.write_text(" " * 2_000_000 + (checkpoint / "config.json").read_text())
    result = run_info_limited(folder)
    line = one_error_line(result.stderr)
    assert result.returncode == 2 and result.stdout == ""
    assert {"fifo": "a FIFO", "dev-zero": "a device", "huge": "longer than 1,048,576 bytes"}[kind] in line


# ---- nothing from a file or a server reaches the terminal raw ---------------------------------------

ESCAPES = "\x1b]0;pwned\x07\x1b[31m"  # retitles a terminal, then turns its text red


def hand_made_checkpoint(folder, header):
    """A safetensors file of this header (every tensor empty) and config.json."""
    folder.mkdir()
    text = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text)
    (folder / "config.json").write_text(json.dumps(GOOD))
    return folder


@pytest.mark.parametrize("header", [
    {"h.0.ln_1.weight": {"dtype": ESCAPES + "F64", "shape": [0], "data_offsets": [0, 0]}},
    {ESCAPES: {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
     "transformer." + ESCAPES: {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}},
])
def test_escape_sequences_in_a_header_are_printed_escaped(tmp_path, capsys, header):
    folder = hand_made_checkpoint(tmp_path / "hand-made", header)
    with pytest.raises(CheckpointError) as raised:
        load_checkpoint(folder)
    assert "\x1b" not in str(raised.value) and "\\x1b]0;pwned\\x07" in str(raised.value)
    code, out, err = run_main(capsys, "info", str(folder))
    assert code == 2 and "\\x1b]0;pwned\\x07" in one_error_line(err) and "\x1b" not in err + out


def test_a_folder_s_name_is_printed_escaped(tmp_path, capsys, checkpoint):
    folder = shutil.copytree(checkpoint, tmp_path / ("model" + ESCAPES))
    assert load_checkpoint(folder).name == "model\\x1b]0;pwned\\x07\\x1b[31m"  # what every message says
    code, out, err = run_main(capsys, "info", str(folder))
    assert code == 0 and "\x1b" not in out + err and out.count("model\\x1b]0;pwned\\x07") == 2


def test_text_a_model_writes_is_shown_not_obeyed_by_the_terminal(tmp_path, capsys, checkpoint):
    """GPT-2 has a token for the byte ESC (215): a model that writes it used to send it to the
    terminal raw."""
    folder = shutil.copytree(checkpoint, tmp_path / "writes-escapes")
    tensors = {name: np.array(array) for name, array in read_safetensors(folder / "model.safetensors").items()}
    tensors["wte.weight"][:] = 0
    tensors["wte.weight"][215] = 1  # the only token whose logit is not 0 ...
    tensors["ln_f.weight"][:], tensors["ln_f.bias"][:] = 0, 1  # ... for every hidden state
    write_safetensors(folder / "model.safetensors", tensors)
    code, out, err = run_main(capsys, "generate", "--model", str(folder), "-n", "3", "--temperature", "0",
                              "--prompt", "Hello")
    assert code == 0, err
    assert out.startswith("Hello\\x1b\\x1b\\x1b\n") and "\x1b" not in out


# ---- a closed stdout: the command runs, its output discarded ----------------------------------------

@pytest.mark.parametrize("argv", [["info", "tiny-draft"], ["generate", "--model", "tiny-target", "-n", "5"]])
def test_a_closed_stdout_ends_quietly(argv):
    """`python -m picogpt info tiny-draft >&-` used to end in "AttributeError: 'NoneType' object
    has no attribute 'flush'"."""
    import shlex
    import subprocess

    command = shlex.join([sys.executable, "-m", "picogpt", *argv]) + " >&-"
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stderr == ""


# ---- bench: a results folder that cannot be written is found before measuring ------------------------

def test_bench_with_an_out_folder_it_cannot_write_is_refused_before_measuring(capsys, monkeypatch, tmp_path):
    import picogpt.bench

    monkeypatch.setattr(picogpt.bench, "run_bench", lambda *a, **k: pytest.fail("bench measured first"))
    (tmp_path / "a-file").write_text("not a folder")
    code, out, err = run_main(capsys, "bench", "--quick", "--models", "tiny-draft",
                              "--out", str(tmp_path / "a-file" / "results"))
    line = one_error_line(err)
    assert code == 2 and out == "" and "cannot write to the bench's results folder" in line and "--out" in line


# ---- a model loaded by a relative path keeps the file it mapped -------------------------------------

@pytest.mark.parametrize("relative", ["model", "model/model.safetensors"])
def test_a_model_loaded_by_a_relative_path_runs_after_the_working_folder_changes(tmp_path, monkeypatch, checkpoint,
                                                                                 relative):
    """It used to stat the relative path in the new working folder, find nothing there, and
    refuse: 'changed on disk since it was loaded'."""
    from picogpt import load

    monkeypatch.chdir(checkpoint.parent)
    model = load(relative)
    before = model([1, 2, 3])
    monkeypatch.chdir(tmp_path)
    np.testing.assert_array_equal(model([1, 2, 3]), before)
    np.testing.assert_array_equal(model.plain([1, 2, 3]), model.plain([1, 2, 3]))
    assert model.name == "model"


# ---- keep(start, rows) takes what truncate takes: whole numbers in range ------------------------------

@pytest.mark.parametrize("rows", [[0.0, 1.0], [1.5], ["0"], "01", [True], [np.bool_(True)], [[0], [1]],
                                  np.array([[0], [1]]), np.array([0.0, 1.0]), None, [None], [np.nan], np.nan,
                                  [np.inf], [10**30], [2**63], [0, 10**30], 0, {0, 1}, {0: 0}, [1, 0], [0, 0], [-1],
                                  [3]])
def test_keep_takes_increasing_whole_numbers_in_range(rows):
    """Floats, strings, booleans and nested lists used to be accepted (coerced to rows); None,
    NaN, inf and 10**30 gave raw TypeError, ValueError and OverflowError."""
    model = random_gpt2()
    cache = model.new_cache()
    model([1, 2, 3, 4, 5], cache)
    with pytest.raises(PicoGPTError, match=r"cannot keep rows .* expected increasing whole numbers from 0 to 2"):
        cache.keep(2, rows)
    assert len(cache) == 5


@pytest.mark.parametrize("rows", [[], [0], [2], [0, 2], (1, 2), range(3), np.array([0, 2]),
                                  np.array([1], np.uint8), [np.int64(0), np.int32(2)]])
def test_keep_accepts_rows_as_lists_tuples_ranges_and_integer_arrays(rows):
    model = random_gpt2()
    cache = model.new_cache()
    model([1, 2, 3, 4, 5], cache)
    held = cache.k[:, :, :5].copy()
    cache.keep(2, rows)
    kept = [0, 1] + [2 + int(row) for row in rows]
    assert len(cache) == len(kept) and type(cache.length) is int
    np.testing.assert_array_equal(cache.k[:, :, : len(cache)], held[:, :, kept])


# ---- a token tree's positions and mask are checked at the model's door ------------------------------

def tree_call(positions=None, mask=None):
    """A cached call of three new tokens after two, with these positions and mask."""
    model = random_gpt2()
    cache = model.new_cache()
    model([1, 2], cache)
    return model, cache, lambda: model([3, 4, 5], cache, positions, mask)


CAUSAL = [[0, 0, 0, -np.inf, -np.inf], [0, 0, 0, 0, -np.inf], [0, 0, 0, 0, 0]]


@pytest.mark.parametrize("mask, message", [
    ([["x"] * 5] * 3, "numbers"), ([["0"] * 5] * 3, "numbers"), ([[0] * 5, [0] * 4, [0] * 5], "rows of equal length"),
    ([[0] * 5, [0] * 5, None], "rows of equal length"), ([[True] * 5] * 3, "numbers"),
    ([[0, 0, 0, np.nan, -np.inf], *CAUSAL[1:]], "NaN"), ([[0, 0, 0, np.inf, -np.inf], *CAUSAL[1:]], "inf"),
    ([[-np.inf] * 5, *CAUSAL[1:]], "sees no key"), ([[0, 0, 0, 10**400, 0], *CAUSAL[1:]], "numbers"),
])
def test_a_tree_mask_that_is_not_a_grid_of_numbers_is_one_error_at_the_door(mask, message):
    """Strings or ragged rows gave a raw ValueError; a NaN (or a row that masks every key: its
    softmax divides 0 by 0) came out as non-finite logits blamed on the checkpoint's weights."""
    model, cache, call = tree_call([2, 3, 4], mask)
    with pytest.raises(PicoGPTError, match="mask") as raised:
        call()
    assert message in str(raised.value) and "weights" not in str(raised.value)
    assert len(cache) == 2
    np.testing.assert_array_equal(tree_call([2, 3, 4], CAUSAL)[2](), model([1, 2, 3, 4, 5])[2:])


@pytest.mark.parametrize("positions", [[2, [3], 4], [[2], [3, 4], [5]], ["2", "3", "4"], [2.0, 3.0, 4.0],
                                       [2, 3, np.nan], [2, 3, 10**30], [True, True, True], [2, 3, None], "234"])
def test_a_tree_s_positions_that_are_not_whole_numbers_are_one_error_at_the_door(positions):
    _, cache, call = tree_call(positions, CAUSAL)
    with pytest.raises(PicoGPTError, match="positions must be 3 whole numbers"):
        call()
    assert len(cache) == 2


# ---- an interrupt anywhere in a call: the cache has advanced only if the call returned ----------------

def interrupted_at(k, call, *args):
    """call(*args), raising KeyboardInterrupt just before the k-th bytecode instruction that
    Python runs inside it (k = 1, 2, ...; 0: never), as a Ctrl-C delivered there would (Python
    delivers a signal only at some instructions: this tries more). Returns (instructions run,
    the instruction at which KVCache.advance began, the result or the KeyboardInterrupt)."""
    count, advance_at = 0, None

    def tracer(frame, event, arg):
        nonlocal count, advance_at
        frame.f_trace_opcodes = True
        if event == "call" and frame.f_code is KVCache.advance.__code__:
            advance_at = count
        if event == "opcode":
            count += 1
            if count == k:
                raise KeyboardInterrupt
        return tracer

    sys.settrace(tracer)
    try:
        result = call(*args)
    except KeyboardInterrupt as e:
        result = e
    finally:
        sys.settrace(None)
    return count, advance_at, result


@pytest.mark.parametrize("path", ["fast", "plain"])
def test_an_interrupt_at_any_instruction_of_a_call_leaves_the_cache_advanced_only_if_the_call_returned(path):
    """An interrupt landing on the exit of the call's `with` block (the rollback's context
    manager) used to leave the cache advanced although the call raised: 9 of 2,233 calls
    interrupted by SIGINT at random times. Here an interrupt is tried at every instruction from
    a little before the cache's advance up to the call's last, its `return` to the caller (an
    interrupt there, or later, is raised in the caller after the call is complete)."""
    model = random_gpt2(n_layer=2)
    call = model if path == "fast" else model.plain
    expected = model.plain([1, 2, 3, 4])
    model([1])  # the fast path's one-time preparation, out of the instructions counted

    def fresh():
        cache = model.new_cache()
        call([1, 2], cache)
        return cache

    cache = fresh()
    n_instructions, advance_at, logits = interrupted_at(0, call, [3, 4], cache)  # k = 0: counts them
    assert len(cache) == 4 and advance_at is not None
    np.testing.assert_allclose(logits, expected[2:], atol=1e-5)
    for k in range(advance_at - 20, n_instructions):
        cache = fresh()
        *_, result = interrupted_at(k, call, [3, 4], cache)
        assert isinstance(result, KeyboardInterrupt)
        assert len(cache) == 2, f"interrupted at instruction {k} of {n_instructions} (the advance at {advance_at})"
        np.testing.assert_allclose(call([5], cache), model.plain([1, 2, 5])[-1:], atol=1e-5)


# ---- numba: a Ctrl-C while it compiles, and settings it cannot read ----------------------------------

def interrupted_in_a_callback():
    """A KeyboardInterrupt raised inside a function C calls back (ctypes, as llvmlite's object
    cache is called while numba compiles): Python prints "Exception ignored" and drops it."""
    import ctypes

    def callback():
        raise KeyboardInterrupt

    ctypes.CFUNCTYPE(None)(callback)()


@pytest.mark.parametrize("then", ["the compile goes on", "the compile fails"])
def test_a_ctrl_c_inside_numba_s_compile_stops_the_program(monkeypatch, capsys, then):
    """It was swallowed in llvmlite's callback: the run went on (on the NumPy path when the
    compile then failed) and exited 0."""
    from picogpt.fast import compiled

    def compile_loop(*args):
        interrupted_in_a_callback()
        if then == "the compile fails":
            raise RuntimeError("the object code was never written")

    monkeypatch.setattr(compiled, "compile_in", lambda folder, numba: (compile_loop, compile_loop))
    compiled.loops.cache_clear()
    try:
        with pytest.raises(KeyboardInterrupt):
            compiled.loops()
    finally:
        monkeypatch.undo()
        compiled.loops.cache_clear()
    assert "Exception ignored" not in capsys.readouterr().err


@pytest.mark.parametrize("variable, value", [("NUMBA_NUM_THREADS", "abc"), ("NUMBA_OPT", "zz")])
def test_a_numba_setting_numba_cannot_read_is_one_line_naming_it(variable, value):
    """numba printed an 8-10 line warning with a traceback, then went on without the setting."""
    pytest.importorskip("numba")
    done = subprocess.run([sys.executable, "-m", "picogpt", "generate", "-n", "2", "--seed", "1"], capture_output=True,
                          text=True, timeout=120, env=os.environ | {variable: value, "PICOGPT_KERNEL": ""})
    assert done.returncode == 0, done.stderr
    named = [line for line in done.stderr.splitlines() if variable in line]
    assert len(named) == 1 and named[0].startswith("picogpt:") and repr(value) in named[0], done.stderr
    assert "Traceback" not in done.stderr
