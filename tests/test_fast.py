"""The fast path computes what the plain path computes: the same matrix products (one row, a few
rows with the compiled loops or NumPy alone, many rows; the LM head's transposed view; with and
without threads; sizes the loops do not divide evenly), and the same logits, full and cached, to
~1e-5 relative. It is chosen once, when a model is prepared. It reads the checkpoint's own arrays:
nothing is written beside a checkpoint, and nothing is copied unless in_memory asks for it."""

import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import random_gpt2, random_tensors

from picogpt.errors import PicoGPTError
from picogpt.fast import compiled, kernels, threads
from picogpt.fast.kernels import BIG_MATRIX, FEW_ROWS
from picogpt.io import memory
from picogpt.io.checkpoint import read_safetensors, write_safetensors
from picogpt.io.params import leaves
from picogpt.measure import machine
from picogpt.model import load_checkpoint

RELATIVE = 1e-5


def relative_diff(got, reference):
    return float(np.abs(got - reference).max() / max(1e-30, np.abs(reference).max()))


@pytest.mark.parametrize("n_items", [0, 1, 2, 7, 1000])
def test_parallel_covers_every_item_once(n_items):
    seen = []
    threads.parallel(lambda start, stop: seen.extend(range(start, stop)), n_items)
    assert sorted(seen) == list(range(n_items))


def test_parallel_hands_an_error_to_the_caller():
    def fail_at_500(start, stop):
        if start <= 500 < stop:
            raise ZeroDivisionError("chunk with 500")

    with pytest.raises(ZeroDivisionError, match="chunk with 500"):
        threads.parallel(fail_at_500, 1000)


@pytest.fixture(params=["numpy", "numba"])
def matmul(request, monkeypatch):
    """Each product test runs twice: with NumPy alone (kernels.numpy_matmul) and with the
    compiled loops (kernels.compiled_matmul), the two products a model may choose."""
    if request.param == "numba" and compiled.loops() is None:
        pytest.skip("numba is not installed (pip install 'picogpt-speculative[fast]')")
    return kernels.numpy_matmul if request.param == "numpy" else kernels.compiled_matmul


# the last ones: threads, and for the compiled loops rows of W not a multiple of 8
# (1027, 1003) and columns not a multiple of its 256-column segments
SHAPES = [(32, 97), (1024, 1030), (1600, 1030), (768, 2304), (1000, 1031), (1027, 1100), (6403, 300)]


@pytest.mark.parametrize("n_in, n_out", SHAPES)
@pytest.mark.parametrize("n_rows", [1, 2, 3, 5, 9, FEW_ROWS, FEW_ROWS + 1, 40])
def test_matmul_is_x_at_w_on_the_checkpoint_layout(n_in, n_out, n_rows, matmul):
    rng = np.random.default_rng(n_rows)
    weight = rng.standard_normal((n_in, n_out)).astype(np.float32)
    x = rng.standard_normal((n_rows, n_in)).astype(np.float32)
    got = matmul(x, weight)
    assert got.shape == (n_rows, n_out) and got.dtype == np.float32
    assert relative_diff(got, x.astype(np.float64) @ weight.astype(np.float64)) < RELATIVE


@pytest.mark.parametrize("n_vocab, n_embd", [(97, 32), (1030, 1024), (5003, 768)])
@pytest.mark.parametrize("n_rows", [1, 2, 5, 9, FEW_ROWS + 1])
def test_matmul_is_x_at_w_for_the_lm_head_view(n_vocab, n_embd, n_rows, matmul):
    rng = np.random.default_rng(n_rows)
    wte = rng.standard_normal((n_vocab, n_embd)).astype(np.float32)
    x = rng.standard_normal((n_rows, n_embd)).astype(np.float32)
    got = matmul(x, wte.T)  # wte.T is F-contiguous: GPT-2's tied LM head
    assert got.shape == (n_rows, n_vocab)
    assert relative_diff(got, x.astype(np.float64) @ wte.T.astype(np.float64)) < RELATIVE


def test_the_shapes_above_take_the_small_and_the_threaded_paths():
    assert 32 * 97 < BIG_MATRIX <= 1024 * 1030 and 5003 * 768 >= BIG_MATRIX


ROUTES = {  # (n_rows, shape of W, the LM head's transposed view?) -> product (NumPy alone, with numba)
    (5, (64, 64), False): ("numpy", "numpy"),
    (1, (1024, 1030), False): ("split_inputs", "split_inputs"),
    (1, (1024, 5000), False): ("split_inputs", "split_inputs"),
    (5, (1024, 1030), False): ("split_inputs", "compiled_rows"),
    (1, (5000, 1024), True): ("split_outputs", "split_outputs"),
    (5, (5000, 1024), True): ("split_outputs", "compiled_head"),
    (FEW_ROWS + 1, (1024, 1030), False): ("split_inputs", "split_inputs"),
    (FEW_ROWS + 1, (5000, 1024), True): ("split_outputs", "split_outputs"),
}


@pytest.mark.parametrize("case", ROUTES, ids=str)
@pytest.mark.parametrize("with_compiled", [False, True])
def test_each_product_is_chosen_by_a_named_route(case, with_compiled):
    n_rows, shape, transposed = case
    W = np.zeros(shape, np.float32)
    W = W.T if transposed else W
    expected = ROUTES[case][with_compiled]
    assert kernels.route(np.zeros((n_rows, W.shape[0]), np.float32), W, with_compiled) == expected
    assert set(kernels.PRODUCTS) >= {expected}


def test_the_product_is_chosen_once_when_a_model_is_prepared(monkeypatch):
    """kernels.choose decides, model.prepare stores the decision on the model: the compiled
    loops where numba runs and PICOGPT_KERNEL allows them, else NumPy alone."""
    model = random_gpt2(0)
    monkeypatch.setenv(compiled.KERNEL_ENV, "numpy")
    assert model.prepare().matmul is kernels.numpy_matmul
    monkeypatch.setenv(compiled.KERNEL_ENV, "")
    assert model.prepare().matmul is kernels.numpy_matmul  # prepared already: decided, not re-decided
    expected = kernels.compiled_matmul if compiled.loops() is not None else kernels.numpy_matmul
    assert random_gpt2(0).prepare().matmul is expected


@pytest.mark.parametrize("n_threads", ["1", "3"])
def test_matmul_gives_the_same_product_on_any_number_of_threads(monkeypatch, n_threads, matmul):
    monkeypatch.setenv(threads.THREADS_ENV, n_threads)
    rng = np.random.default_rng(7)
    weight = rng.standard_normal((1024, 1030)).astype(np.float32)
    for n_rows in (1, 5, 40):
        x = rng.standard_normal((n_rows, 1024)).astype(np.float32)
        assert relative_diff(matmul(x, weight), x.astype(np.float64) @ weight.astype(np.float64)) < RELATIVE


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_a_bad_thread_count_is_one_clear_error(monkeypatch, value):
    monkeypatch.setenv(threads.THREADS_ENV, value)
    with pytest.raises(PicoGPTError, match=f"PICOGPT_THREADS={value!r}: expected a whole number"):
        threads.n_threads()


def test_matmul_reads_memory_mapped_read_only_weights(tmp_path, matmul):
    path = tmp_path / "w.safetensors"
    write_safetensors(path, {"w": np.random.default_rng(0).standard_normal((1024, 1030)).astype(np.float32)})
    weight = read_safetensors(path)["w"]
    assert not weight.flags.writeable
    x = np.ones((5, 1024), np.float32)
    assert relative_diff(matmul(x, weight), x.astype(np.float64) @ weight.astype(np.float64)) < RELATIVE


def test_the_compiled_loops_take_every_few_row_product_of_a_big_weight(monkeypatch):
    if compiled.loops() is None:
        pytest.skip("numba is not installed")

    def numpy_path(*args):
        raise AssertionError("a NumPy path was taken")

    monkeypatch.setattr(kernels, "PRODUCTS", {**kernels.PRODUCTS, "split_inputs": numpy_path})
    weight, wte = np.ones((1024, 1030), np.float32), np.ones((1030, 1024), np.float32)
    for n_rows in (2, 5, FEW_ROWS):
        assert np.all(kernels.compiled_matmul(np.ones((n_rows, 1024), np.float32), weight) == 1024)
        assert np.all(kernels.compiled_matmul(np.ones((n_rows, 1024), np.float32), wte.T) == 1024)


@pytest.mark.parametrize("start, stop, lead", [(0, 19, 0), (0, 8, 3), (3, 17, 7), (5, 6, 2), (0, 19, 300), (0, 19, 999)])
def test_the_kernels_loop_as_plain_python_adds_x_at_w_for_its_band(start, stop, lead):
    """fast/compiled.py's loop, run by Python itself (no numba): the same sum, whatever numba
    does, and whatever the columns before the vector loop (`lead`, clamped to the row)."""
    rng = np.random.default_rng(start)
    x, W = rng.standard_normal((3, 19)).astype(np.float32), rng.standard_normal((19, 300)).astype(np.float32)
    acc = np.ones((3, 300), np.float32)
    compiled.band_product(x, W, acc, start, stop, lead)
    assert relative_diff(acc, 1 + x[:, start:stop].astype(np.float64) @ W[start:stop]) < RELATIVE


@pytest.mark.parametrize("start, stop, lead", [(4, 27, 0), (4, 27, 5), (0, 30, 19), (3, 5, 40), (0, 4, 1)])
def test_the_head_loop_as_plain_python_is_x_at_wte_t(start, stop, lead):
    rng = np.random.default_rng(2)
    x, wte = rng.standard_normal((3, 19)).astype(np.float32), rng.standard_normal((30, 19)).astype(np.float32)
    out = np.zeros((3, 30), np.float32)
    compiled.head_product(x, wte, out, start, stop, lead)
    assert relative_diff(out[:, start:stop], x.astype(np.float64) @ wte[start:stop].T) < RELATIVE
    assert not out[:, :start].any() and not out[:, stop:].any()  # outside its band: untouched


@pytest.mark.parametrize("offset", range(8))
def test_the_compiled_products_start_their_vector_loop_on_a_32_byte_boundary(offset, matmul):
    """Weights at every float32 offset from a 32-byte boundary (safetensors aligns tensors to 8
    bytes): `lead` skips to the boundary, the product is the same."""
    buffer = np.random.default_rng(offset).standard_normal(1024 * 1032 + 16).astype(np.float32)
    start = offset + (-buffer.ctypes.data % 32) // 4
    W = buffer[start:start + 1024 * 1032].reshape(1024, 1032)
    assert (W.ctypes.data + 4 * kernels.lead(W)) % 32 == 0 and 0 <= kernels.lead(W) < 8
    x = np.random.default_rng(9).standard_normal((5, 1024)).astype(np.float32)
    exact = x.astype(np.float64) @ W
    assert relative_diff(matmul(x, W), exact) < RELATIVE
    wte = buffer[start:start + 1032 * 1024].reshape(1032, 1024)
    assert relative_diff(matmul(x, wte.T), x.astype(np.float64) @ wte.T.astype(np.float64)) < RELATIVE


def test_an_array_aligned_with_another_crosses_32_byte_boundaries_where_it_does():
    buffer = np.zeros(64, np.float32)
    for skip in range(8):
        like = buffer[skip:skip + 16]
        made = kernels.empty_aligned_with((3, 5), like)
        assert made.shape == (3, 5) and made.dtype == np.float32 and made.flags.c_contiguous
        assert (made.ctypes.data - like.ctypes.data) % 32 == 0


@pytest.mark.parametrize("value", ["fast", "blas", "1"])
def test_a_bad_kernel_choice_is_one_clear_error(monkeypatch, value):
    monkeypatch.setenv(compiled.KERNEL_ENV, value)
    with pytest.raises(PicoGPTError, match="PICOGPT_KERNEL=.*expected 'auto', 'numba' or 'numpy'"):
        compiled.enabled()


def test_each_environment_keeps_its_own_compiled_code(tmp_path, monkeypatch):
    """.venv and .venv-oldest (other numba versions) must never read or overwrite each other's
    machine code: the cache lives inside the environment, else in the user's cache under a name
    of the environment's own, and NUMBA_CACHE_DIR overrides both."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first, second = tmp_path / "venv", tmp_path / "venv-oldest"
    for prefix in (first, second):
        prefix.mkdir()
    monkeypatch.setattr(sys, "prefix", str(first))
    in_first = compiled.cache_dir()
    monkeypatch.setattr(sys, "prefix", str(second))
    in_second = compiled.cache_dir()
    assert in_first.is_relative_to(first) and in_second.is_relative_to(second)

    monkeypatch.setattr(os, "access", lambda path, mode: False)  # environments this user cannot write to
    elsewhere = {compiled.cache_dir()}
    monkeypatch.setattr(sys, "prefix", str(first))
    elsewhere.add(compiled.cache_dir())
    assert len(elsewhere) == 2 and all(path.is_relative_to(tmp_path / "cache") for path in elsewhere)

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "chosen"))
    assert compiled.cache_dir() == tmp_path / "chosen"


def test_asking_for_numba_without_it_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(compiled, "loops", lambda: None)
    monkeypatch.setenv(compiled.KERNEL_ENV, "numba")
    with pytest.raises(PicoGPTError, match=r"pip install 'picogpt-speculative\[fast\]'"):
        compiled.enabled()
    monkeypatch.setenv(compiled.KERNEL_ENV, "")
    assert not compiled.enabled() and compiled.name() == "numpy"  # without numba: NumPy alone


NUMBA_FALLBACKS = {
    # what makes numba unusable -> what the one line says
    "NUMBA_DISABLE_JIT": ("import os; os.environ['NUMBA_DISABLE_JIT'] = '1'", "NUMBA_DISABLE_JIT is set"),
    "no writable cache folder": ("import numba.core.caching as caching; caching.CacheImpl._locator_classes = []",
                                 "no writable folder for its compiled code"),
    "a failing compiler": ("import numba; numba.njit = lambda **options: lambda f: "
                           "(_ for _ in ()).throw(TypeError('no compiler'))",
                           "could not compile the fast kernels"),
    # numba raising something other than ImportError as it is imported
    "NUMBA_NUM_THREADS=0": ("import os; os.environ['NUMBA_NUM_THREADS'] = '0'", "numba is installed but could not"),
    "too little address space for LLVM": ("import sys\n"
                                          "class NoMemory:\n"
                                          "    def find_spec(self, name, *_):\n"
                                          "        if name == 'numba': raise OSError(12, 'Cannot allocate memory')\n"
                                          "sys.meta_path.insert(0, NoMemory())",
                                          "numba is installed but could not be loaded (OSError"),
}


@pytest.mark.parametrize("case", NUMBA_FALLBACKS)
def test_numba_that_cannot_run_here_means_the_numpy_path_and_one_line(case):
    """A fresh process (numba's settings are read once): the model runs, on the NumPy path, with
    one line on stderr saying why, and the logits equal the plain path's."""
    pytest.importorskip("numba")
    setup, reason = NUMBA_FALLBACKS[case]
    script = f"""{setup}
import numpy as np, picogpt
from picogpt.fast import compiled
model = picogpt.load("tiny-target")
ids = [464, 3303, 531, 11, 1309]
np.testing.assert_allclose(model(ids), model.plain(ids), rtol=1e-4, atol=1e-4)
print(compiled.name())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=os.environ | {"PICOGPT_KERNEL": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "numpy"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0] and "NumPy path" in lines[0], done.stderr


def test_the_compiled_loops_are_ready_before_a_models_first_call_returns(model, monkeypatch):
    """Loading (or compiling) the loops happens in prepare(), so a timed multi-row call later
    never pays for it: once prepared, the loops are not asked to compile again."""
    monkeypatch.setenv(compiled.KERNEL_ENV, "")
    compiled.loops.cache_clear()
    fresh = random_gpt2(3, n_layer=2, n_head=4, n_embd=512, n_ctx=128, n_vocab=2100, peaked=False)
    fresh.prepare()
    assert compiled.loops.cache_info().currsize == 1
    misses = compiled.loops.cache_info().misses
    fresh(np.arange(1))
    fresh(np.arange(5))
    assert compiled.loops.cache_info().misses == misses


def test_the_products_keep_nan_and_inf(matmul):
    weight = np.ones((1024, 1030), np.float32)
    x = np.ones((3, 1024), np.float32)
    x[1, 7], x[2, 9] = np.nan, np.inf
    with np.errstate(invalid="ignore"):  # NumPy adds inf to inf and NaN: it says so
        got, head = matmul(x, weight), matmul(x, weight.T.copy().T)  # a linear weight; an LM head view
    for out in (got, head):
        assert np.all(out[0] == 1024) and np.all(np.isnan(out[1])) and np.all(out[2] == np.inf)


def blas_threads():
    from threadpoolctl import threadpool_info

    return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]


def test_the_fast_path_runs_numpys_blas_on_one_thread(model):
    if not blas_threads():
        pytest.skip("threadpoolctl finds no BLAS loaded by NumPy here: nothing to pin")
    model.prepare()
    assert set(blas_threads()) == {1}
    machine.gemv_pass(*machine.bandwidth_matrices(10**6))  # the ceiling's products run on a thread per core,
    assert set(blas_threads()) == {1}  # and leave the fast path's BLAS on one thread


@pytest.fixture(scope="module")
def model():  # c_fc (512 x 2048) and the LM head (2100 x 512) are big enough for the threads
    return random_gpt2(3, n_layer=2, n_head=4, n_embd=512, n_ctx=128, n_vocab=2100, peaked=False)


def test_fast_full_forward_equals_plain(model, matmul, monkeypatch):
    monkeypatch.setattr(model.prepare(), "matmul", matmul)
    ids = np.random.default_rng(4).integers(0, 2100, size=40)
    for n in (1, 2, 5, 9, 17, 40):
        assert relative_diff(model(ids[:n]), model.plain(ids[:n])) < RELATIVE, f"{n} positions"


def test_fast_cached_decoding_and_scoring_equal_plain(model, matmul, monkeypatch):
    monkeypatch.setattr(model.prepare(), "matmul", matmul)
    ids = np.random.default_rng(5).integers(0, 2100, size=60)
    fast_cache, plain_cache = model.new_cache(), model.new_cache()
    start = 0
    for n_new in (20, 1, 1, 5, 9, 1, 3, 2, 17):  # prompt, decode steps, K+1 scoring calls
        chunk = ids[start:start + n_new]
        got, reference = model(chunk, fast_cache), model.plain(chunk, plain_cache)
        assert got.shape == (n_new, 2100)
        assert relative_diff(got, reference) < RELATIVE, f"{n_new} positions after {start}"
        start += n_new
    assert len(fast_cache) == len(plain_cache) == start


@pytest.fixture
def checkpoint(tmp_path, model):
    """The module's random model, written as a checkpoint with its config.json."""
    path = tmp_path / "model.safetensors"
    write_safetensors(path, random_tensors(model.config, seed=3))
    (tmp_path / "config.json").write_text(
        '{"n_layer": 2, "n_head": 4, "n_embd": 512, "n_positions": 128, "vocab_size": 2100}')
    return path


def test_nothing_is_written_beside_a_checkpoint(checkpoint):
    before = sorted(os.listdir(checkpoint.parent))
    for in_memory in (False, True):
        load_checkpoint(checkpoint, in_memory=in_memory)(np.arange(9))
    assert sorted(os.listdir(checkpoint.parent)) == before == ["config.json", "model.safetensors"]


def test_the_fast_path_reads_the_checkpoints_own_arrays(checkpoint):
    model = load_checkpoint(checkpoint).prepare()
    assert model.fast_params is model.params  # no second layout, no copy


def test_in_memory_copies_every_weight_out_of_the_mapped_file(checkpoint, monkeypatch):
    ids = np.arange(9)
    mapped = load_checkpoint(checkpoint).prepare()
    copied = load_checkpoint(checkpoint, in_memory=True).prepare()
    pairs = list(zip(leaves(mapped.fast_params), leaves(copied.fast_params)))
    assert len(pairs) == len(mapped.arrays)  # wte, wpe, every weight, bias and layer norm
    assert any(not a.flags.writeable for a, _ in pairs)  # the mapped side does come from files
    for a, b in pairs:
        assert np.array_equal(a, b) and b.flags.owndata and not np.shares_memory(a, b)
    logits = []
    for model in (mapped, copied):  # the same arithmetic on the same numbers: the same logits, up to
        cache = model.new_cache()   # the LM head's order of summation (it starts on wte's 32-byte boundary)
        logits.append([model(ids[:5], cache), model(ids[5:], cache)])
    assert all(relative_diff(a, b) < RELATIVE for a, b in zip(*logits))


def test_in_memory_refuses_what_would_not_fit(checkpoint, monkeypatch):
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 2**30 + 1000)
    model = load_checkpoint(checkpoint, "big", in_memory=True)
    with pytest.raises(PicoGPTError, match=r"copying big's weights into memory needs 30 MB, and picogpt keeps "
                                           r"1.07 GB free.*without in_memory"):
        model(np.arange(3))
    assert model.fast_params is None  # nothing half-made: the next call tries again
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: None)  # unknown (not Linux): just copy
    assert model(np.arange(3)).shape == (3, 2100)


@pytest.mark.parametrize("value", ["yes", "background", 1, None])
def test_in_memory_must_be_false_or_true(checkpoint, value):
    with pytest.raises(PicoGPTError, match=f"in_memory={value!r}: expected False"):
        load_checkpoint(checkpoint, in_memory=value)


INTERRUPTED_CALLS = """
import signal, sys, threading, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from helpers import random_gpt2

model = random_gpt2(3, n_layer=2, n_head=4, n_embd=512, n_ctx=128, n_vocab=2100, peaked=False)
cache, ids, rng = model.new_cache(), np.arange(5), np.random.default_rng(0)
model(ids, cache)  # the threads exist now


def interrupt(*_):
    raise KeyboardInterrupt


signal.signal(signal.SIGALRM, interrupt)
interrupted = 0
for _ in range(300):  # Ctrl-C at random moments of few-row calls, whose products the threads share
    try:
        signal.setitimer(signal.ITIMER_REAL, rng.uniform(0, 0.004))
        model(ids, cache)
        signal.setitimer(signal.ITIMER_REAL, 0)
        cache.truncate(5)
    except KeyboardInterrupt:
        interrupted += 1
assert len(cache) in (5, 10), len(cache)  # a call that was interrupted left its cache as it was
busy = time.process_time()
time.sleep(1.5)  # more than threads.IDLE_S
print(interrupted, threading.active_count(), time.process_time() - busy)
"""


def test_interrupted_calls_leave_no_thread_working_and_the_process_exits():
    """Ctrl-C (any signal handler that raises) at random moments of calls whose products are
    shared among picogpt's threads: afterwards no thread works (the process uses no CPU while
    idle), the helpers leave by themselves, and the process exits (nothing a clean exit waits
    on forever)."""
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_CALLS, os.path.dirname(__file__)],
                          capture_output=True, text=True, timeout=120,
                          env=os.environ | {threads.THREADS_ENV: "2"})
    assert done.returncode == 0, done.stderr
    interrupted, n_threads, idle_cpu_s = done.stdout.split()
    assert int(interrupted) > 0 and int(n_threads) == 1  # the helpers left: the main thread alone
    assert float(idle_cpu_s) < 0.05  # idle: nothing spins


CALLED_AT_SHUTDOWN = """
import gc, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from helpers import random_gpt2
from picogpt.fast import threads


class CallsTheModelWhenCollected:
    def __init__(self, model):
        self.model = model

    def __del__(self):  # runs as the interpreter shuts down: no new thread ever runs then
        print(sys.is_finalizing(), self.model(np.arange(5)).shape, flush=True)


model = random_gpt2(3, n_layer=2, n_head=4, n_embd=512, n_ctx=128, n_vocab=2100, peaked=False)
model(np.arange(5))  # prepared; its helper threads leave while idle, so the last call must start new ones
time.sleep(threads.IDLE_S + 0.5)
keeper = CallsTheModelWhenCollected(model)
keeper.cycle = keeper  # garbage that only the collection at shutdown collects (before modules are torn down)
gc.set_threshold(10**6)
del keeper
"""


def test_a_model_called_while_the_interpreter_shuts_down_finishes_on_the_calling_thread():
    """A global's __del__ that calls a model runs after Python stops running new threads: the
    product is not handed to a helper that would never start (that call used to hang forever)."""
    done = subprocess.run([sys.executable, "-c", CALLED_AT_SHUTDOWN, os.path.dirname(__file__)],
                          capture_output=True, text=True, timeout=60, env=os.environ | {threads.THREADS_ENV: "2"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True (5, 2100)"


def test_when_the_os_refuses_a_thread_the_calling_thread_does_the_work(monkeypatch, matmul):
    """`ulimit -v` or a limit on processes makes starting a thread fail ("can't start new
    thread"): the products still come out right, computed by the threads there are (here none)."""
    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threads.threading.Thread, "start", refuse)
    monkeypatch.setattr(threads, "_helpers", [])  # none started yet
    monkeypatch.setattr(threads, "_jobs", threads.queue.SimpleQueue())  # and none of the earlier ones listening
    monkeypatch.setenv(threads.THREADS_ENV, "4")
    rng = np.random.default_rng(11)
    weight = rng.standard_normal((1024, 1030)).astype(np.float32)
    for n_rows in (1, 5, 40):
        x = rng.standard_normal((n_rows, 1024)).astype(np.float32)
        assert relative_diff(matmul(x, weight), x.astype(np.float64) @ weight.astype(np.float64)) < RELATIVE
    seen = []
    threads.parallel(lambda start, stop: seen.extend(range(start, stop)), 1000)
    assert sorted(seen) == list(range(1000)) and threads._helpers == []
