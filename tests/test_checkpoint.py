"""The checkpoint reader: a bad file gives one clear error naming the file and the tensor;
good files load in F32, F16 and BF16 (computed in float32), with or without config.json."""

import json
import shutil
import struct

import numpy as np
import pytest
from helpers import PARITY, random_tensors

from picogpt.cli import main
from picogpt.errors import CheckpointError, PicoGPTError
from picogpt.gpt2 import GPT2Config
from picogpt.io.checkpoint import read_header, read_safetensors, write_safetensors
from picogpt.io.params import expected_shapes, infer_config
from picogpt.model import load_checkpoint

CONFIG = GPT2Config(n_layer=1, n_head=2, n_embd=8, n_ctx=6, n_vocab=11)


def write_config_json(folder, config=CONFIG):
    """The Hugging Face config.json for `config`, beside the checkpoints in `folder`."""
    (folder / "config.json").write_text(json.dumps(
        {"n_layer": config.n_layer, "n_head": config.n_head, "n_embd": config.n_embd,
         "n_positions": config.n_ctx, "vocab_size": config.n_vocab}))


def write_raw(path, header, data=b""):
    """A safetensors file from a header (dict, or raw bytes) and raw tensor bytes."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def f32_entry(shape, begin):
    n_bytes = int(np.prod(shape)) * 4
    return {"dtype": "F32", "shape": list(shape), "data_offsets": [begin, begin + n_bytes]}


def expect_error(path, *words):
    """read_safetensors(path) must raise a CheckpointError naming the file and every word."""
    with pytest.raises(CheckpointError) as error:
        read_safetensors(path)
    message = str(error.value)
    assert str(path) in message
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    assert "\n" not in message
    return message


# ---- bad files -----------------------------------------------------------------------------

def test_file_shorter_than_8_bytes(tmp_path):
    path = tmp_path / "short.safetensors"
    path.write_bytes(b"\x01\x02\x03")
    expect_error(path, "too short", "3 bytes")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.safetensors"
    path.write_bytes(b"")
    expect_error(path, "too short")


def test_header_length_past_end_of_file(tmp_path):
    path = tmp_path / "truncated.safetensors"
    path.write_bytes(struct.pack("<Q", 10_000) + b"{}")
    expect_error(path, "header length 10,000", "past the end")


def test_header_not_json(tmp_path):
    expect_error(write_raw(tmp_path / "x.safetensors", b"{not json"), "not valid JSON")


def test_header_not_an_object(tmp_path):
    expect_error(write_raw(tmp_path / "x.safetensors", b"[1, 2]"), "not a JSON object")


def test_malformed_entry_names_the_tensor(tmp_path):
    header = {"wte.weight": {"dtype": "F32", "shape": [2, -1], "data_offsets": [0, 8]}}
    expect_error(write_raw(tmp_path / "x.safetensors", header, bytes(8)), "'wte.weight'", "malformed")


@pytest.mark.parametrize("entry", [
    {"dtype": "F32", "shape": [True, 2], "data_offsets": [0, 8]},  # true is not a size
    {"dtype": ["F16"], "shape": [4], "data_offsets": [0, 8]},  # a list is not a dtype
    {"dtype": "F32", "shape": [2], "data_offsets": [False, 8]},
])
def test_hand_made_entries_of_the_wrong_type_are_malformed(tmp_path, entry):
    path = write_raw(tmp_path / "x.safetensors", {"wte.weight": entry}, bytes(8))
    expect_error(path, "'wte.weight'", "malformed")


def test_shape_whose_element_count_overflows_int64(tmp_path):
    """2**62 x 4 elements x 4 bytes wraps to 0 in int64: exactly, it is 2**66 bytes."""
    header = {"wte.weight": {"dtype": "F32", "shape": [2**62, 4], "data_offsets": [0, 0]}}
    path = write_raw(tmp_path / "x.safetensors", header, bytes(8))
    expect_error(path, "'wte.weight'", "holds 0 bytes", f"needs {2**66:,}")


def test_deeply_nested_header_is_one_error(tmp_path, capsys):
    path = write_raw(tmp_path / "x.safetensors", b"[" * 200_000 + b"]" * 200_000)
    expect_error(path, "nests too deeply")
    assert main(["info", str(path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_offsets_out_of_range(tmp_path):
    header = {"a": f32_entry([2], 0), "wpe.weight": f32_entry([4], 8)}  # needs 24 bytes
    path = write_raw(tmp_path / "x.safetensors", header, bytes(16))
    expect_error(path, "'wpe.weight'", "[8, 24]", "outside")


def test_overlapping_offsets(tmp_path):
    header = {"ln_f.weight": f32_entry([4], 0), "ln_f.bias": f32_entry([4], 8)}
    path = write_raw(tmp_path / "x.safetensors", header, bytes(24))
    expect_error(path, "'ln_f.weight'", "'ln_f.bias'", "overlap")


def test_byte_count_disagrees_with_dtype_and_shape(tmp_path):
    header = {"wte.weight": {"dtype": "F32", "shape": [3, 2], "data_offsets": [0, 12]}}
    path = write_raw(tmp_path / "x.safetensors", header, bytes(12))
    expect_error(path, "'wte.weight'", "12 bytes", "needs 24")


@pytest.mark.parametrize("dtype", ["F64", "I64", "U8"])
def test_unsupported_dtype(tmp_path, dtype):
    header = {"h.0.mlp.c_fc.bias": {"dtype": dtype, "shape": [1], "data_offsets": [0, 8]}}
    path = write_raw(tmp_path / "x.safetensors", header, bytes(8))
    expect_error(path, "'h.0.mlp.c_fc.bias'", dtype, "F32")


def test_missing_file():
    with pytest.raises(CheckpointError, match="not found"):
        read_safetensors("/nonexistent/model.safetensors")


def test_missing_tensor_is_named(tmp_path):
    tensors = random_tensors(CONFIG)
    del tensors["h.0.attn.c_proj.bias"]
    path = tmp_path / "model.safetensors"
    write_safetensors(path, tensors)
    write_config_json(tmp_path)
    with pytest.raises(CheckpointError, match=r"model.safetensors: tensor 'h.0.attn.c_proj.bias' is missing"):
        load_checkpoint(path)


def test_wrong_shape_is_named(tmp_path):
    tensors = random_tensors(CONFIG)
    tensors["h.0.mlp.c_fc.weight"] = tensors["h.0.mlp.c_fc.weight"][:, :-1]
    path = tmp_path / "model.safetensors"
    write_safetensors(path, tensors)
    write_config_json(tmp_path)
    with pytest.raises(CheckpointError) as error:
        load_checkpoint(path)
    assert "'h.0.mlp.c_fc.weight' has shape [8, 31], expected [8, 32]" in str(error.value)
    assert str(path) in str(error.value)


def test_bad_config_json(tmp_path):
    write_safetensors(tmp_path / "model.safetensors", random_tensors(CONFIG))
    (tmp_path / "config.json").write_text('{"n_layer": 1}')
    with pytest.raises(CheckpointError, match="config.json: not a usable GPT-2 config.json"):
        load_checkpoint(tmp_path)


def test_errors_are_picogpt_errors():
    assert issubclass(CheckpointError, PicoGPTError) and issubclass(PicoGPTError, ValueError)


# ---- good files ----------------------------------------------------------------------------

def test_write_then_read_round_trips_f32_exactly_and_aligns_data(tmp_path):
    tensors = random_tensors(CONFIG, seed=3)
    path = tmp_path / "model.safetensors"
    write_safetensors(path, tensors, metadata={"format": "pt"})
    assert not list(tmp_path.glob("*.tmp"))  # written atomically, nothing left behind
    entries, data_start = read_header(path)
    assert data_start % 8 == 0 and set(entries) == set(tensors)
    loaded = read_safetensors(path)
    for name, array in tensors.items():
        np.testing.assert_array_equal(loaded[name], array)
        assert loaded[name].dtype == np.float32


def test_bf16_bits_decode_to_the_right_float32(tmp_path):
    # bfloat16 is the top 16 bits of a float32: 0x3F80 = 1.0, 0xC020 = -2.5, 0x3E20 = 0.15625
    bits = np.array([0x3F80, 0xC020, 0x3E20, 0x0000], "<u2").tobytes()
    header = {"x": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}
    loaded = read_safetensors(write_raw(tmp_path / "x.safetensors", header, bits))["x"]
    assert loaded.dtype == np.float32
    np.testing.assert_array_equal(loaded, [1.0, -2.5, 0.15625, 0.0])


def test_f16_bits_decode_to_the_right_float32(tmp_path):
    bits = np.array([0x3C00, 0xC100, 0x3555], "<u2").tobytes()  # 1.0, -2.5, 0.333251953125
    header = {"x": {"dtype": "F16", "shape": [3], "data_offsets": [0, 6]}}
    loaded = read_safetensors(write_raw(tmp_path / "x.safetensors", header, bits))["x"]
    assert loaded.dtype == np.float32
    np.testing.assert_array_equal(loaded, [1.0, -2.5, 0.333251953125])


@pytest.mark.parametrize("dtype, relative_precision", [("F16", 2**-11), ("BF16", 2**-8)])
def test_half_precision_checkpoints_load_as_float32(tmp_path, dtype, relative_precision):
    tensors = random_tensors(CONFIG, seed=5)
    write_safetensors(tmp_path / "f32.safetensors", tensors, "F32")
    write_safetensors(tmp_path / "half.safetensors", tensors, dtype)
    write_config_json(tmp_path)
    full, half = load_checkpoint(tmp_path / "f32.safetensors"), load_checkpoint(tmp_path / "half.safetensors")
    for a, b in zip(full.arrays, half.arrays):
        assert b.dtype == np.float32
        np.testing.assert_allclose(b, a, rtol=relative_precision, atol=1e-30)
    ids = [1, 5, 10, 0]
    logits_full, logits_half = full(ids), half(ids)
    assert logits_half.dtype == np.float32
    np.testing.assert_allclose(logits_half, logits_full, atol=50 * relative_precision)


def test_transformer_prefix_buffers_and_lm_head_are_accepted(tmp_path):
    tensors = random_tensors(CONFIG, seed=7)
    prefixed = {f"transformer.{name}": array for name, array in tensors.items()}
    prefixed["transformer.h.0.attn.bias"] = np.tril(np.ones((1, 1, 6, 6), np.float32))
    prefixed["transformer.h.0.attn.masked_bias"] = np.array(-1e4, np.float32)
    prefixed["lm_head.weight"] = tensors["wte.weight"]
    write_safetensors(tmp_path / "bare.safetensors", tensors)
    write_safetensors(tmp_path / "prefixed.safetensors", prefixed)
    write_config_json(tmp_path)
    ids = [3, 1, 4, 1, 5]
    np.testing.assert_array_equal(load_checkpoint(tmp_path / "prefixed.safetensors")(ids),
                                  load_checkpoint(tmp_path / "bare.safetensors")(ids))


def test_without_config_json_a_head_count_that_is_only_a_guess_is_refused(tmp_path):
    """head64's 128 wide layer fits n_head 1, 2, 4...: each gives other text, so no guess;
    a published GPT-2's depth and width give its published head count."""
    shutil.copy(PARITY / "head64" / "bare-f32.safetensors", tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="n_head cannot be inferred.*put the model's config.json"):
        load_checkpoint(tmp_path)
    shutil.copy(PARITY / "head64" / "config.json", tmp_path / "config.json")
    reference = np.load(PARITY / "head64" / "logits.npy")
    logits = load_checkpoint(tmp_path)(np.load(PARITY / "head64" / "ids.npy"))
    assert np.abs(logits - reference).max() <= 1e-4 * np.abs(reference).max()
    # gpt2-medium's 24 layers of width 1024 have 16 heads (from the shapes alone)
    config = GPT2Config(n_layer=24, n_head=16, n_embd=1024, n_ctx=1024, n_vocab=50257)
    assert infer_config(expected_shapes(config), "gpt2-medium.safetensors") == config


def test_f32_tensors_are_memory_mapped_not_copied(tmp_path):
    path = tmp_path / "model.safetensors"
    write_safetensors(path, random_tensors(CONFIG))
    tensors = read_safetensors(path)
    assert all(not array.flags.writeable and not array.flags.owndata for array in tensors.values())


def test_head_count_that_cannot_be_inferred_is_an_error(tmp_path):
    shutil.copy(PARITY / "head16" / "bare-f32.safetensors", tmp_path / "model.safetensors")  # n_embd 48
    with pytest.raises(CheckpointError, match=r"n_embd=48\) are not those of a published GPT-2"):
        load_checkpoint(tmp_path)


def test_config_with_fewer_layers_than_the_weights_is_an_error(tmp_path):
    config = GPT2Config(n_layer=2, n_head=2, n_embd=8, n_ctx=6, n_vocab=11)
    write_safetensors(tmp_path / "model.safetensors", random_tensors(config))
    write_config_json(tmp_path, CONFIG)  # says 1 layer
    with pytest.raises(CheckpointError, match="the config says n_layer=1 but the checkpoint's tensors have n_layer=2"):
        load_checkpoint(tmp_path)


# ---- a config that lies about the weights is refused from the header, at once -----------------------

@pytest.mark.parametrize("change", [
    {"n_layer": 2_000_000}, {"n_layer": 10**9}, {"n_layer": 10**400}, {"n_embd": 10**9, "n_head": 1},
    {"vocab_size": 10**12}, {"n_positions": 10**15}, {"n_layer": 2},
])
def test_a_config_that_disagrees_with_the_tensors_is_refused_before_anything_is_allocated(tmp_path, capsys, change):
    """n_layer 2,000,000 used to take 69 s and 4.5 GB; 10**9 the OOM killer; 10**400 forever."""
    import time
    import tracemalloc

    write_safetensors(tmp_path / "model.safetensors", random_tensors(CONFIG))
    hf = {"n_layer": 1, "n_head": 2, "n_embd": 8, "n_positions": 6, "vocab_size": 11} | change
    (tmp_path / "config.json").write_text(json.dumps(hf))
    key, said = next(iter(change.items()))
    said = said if said < 10**15 else f"about 10\\*\\*{len(str(said)) - 1}"  # too long to read in full
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=f"the config says {key}={said} but the checkpoint's tensors have"):
        load_checkpoint(tmp_path)
    seconds, (_, peak_bytes) = time.perf_counter() - start, tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert seconds < 1 and peak_bytes < 10**7, (seconds, peak_bytes)
    assert main(["info", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "config.json does not match the weights" in err


def test_a_python_caller_s_lying_config_is_refused_too():
    tensors = random_tensors(CONFIG)
    with pytest.raises(CheckpointError, match="n_layer=1000000000 but the checkpoint's tensors have n_layer=1"):
        from picogpt.io.params import params_from_tensors
        params_from_tensors(tensors, GPT2Config(n_layer=10**9, n_head=2, n_embd=8, n_ctx=6, n_vocab=11))


# ---- hand-made headers: odd names, many dimensions, a name twice -------------------------------------

@pytest.mark.parametrize("name", ["h.\u00b2.ln_1.weight", "h.\u0663.ln_1.weight", "h", "h.", "h.1e3.x",
                                  "x" * 100_000, "line\nbreak", ""])
def test_odd_tensor_names_are_one_line(tmp_path, capsys, name):
    tensors = random_tensors(CONFIG)
    tensors[name] = np.zeros(2, np.float32)
    write_safetensors(tmp_path / "model.safetensors", tensors)
    write_config_json(tmp_path)
    load_checkpoint(tmp_path)  # a name that is not GPT-2's is ignored, never misread as a layer
    path = write_raw(tmp_path / "bad.safetensors", {name: {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}},
                     bytes(8))
    message = expect_error(path, "holds 4 bytes")
    assert len(message) < 500
    assert main(["info", str(path)]) == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("digits", [5000, 400, 10])
@pytest.mark.parametrize("with_config", [True, False])
def test_a_block_number_too_long_to_be_a_layer_is_one_short_line(tmp_path, capsys, digits, with_config):
    """'h.<5000 digits>.attn...' used to end in Python's ValueError (more digits than int()
    converts) as a traceback; 400 digits in a 400-digit n_layer in the message."""
    tensors = random_tensors(CONFIG)
    tensors["h." + "9" * digits + ".attn.c_attn.bias"] = np.zeros(2, np.float32)
    write_safetensors(tmp_path / "model.safetensors", tensors)
    if with_config:
        write_config_json(tmp_path)
    with pytest.raises(CheckpointError, match=f"numbers its block with {digits:,} digits") as raised:
        load_checkpoint(tmp_path)
    assert len(str(raised.value)) < 500
    assert main(["info", str(tmp_path)]) == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_tensor_of_very_many_dimensions_is_one_error(tmp_path, capsys):
    path = write_raw(tmp_path / "x.safetensors", {"wte.weight": {"dtype": "F32", "shape": [1] * 100,
                                                                  "data_offsets": [0, 4]}}, bytes(8))
    expect_error(path, "'wte.weight'", "100 dimensions", "at most 32")
    assert main(["info", str(path)]) == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


def test_numbers_too_long_to_print_are_one_short_line(tmp_path):
    huge = 10**4000
    path = write_raw(tmp_path / "x.safetensors", {"wte.weight": {"dtype": "F32", "shape": [huge, huge],
                                                                  "data_offsets": [0, 4]}}, bytes(8))
    assert len(expect_error(path, "'wte.weight'", "about 2**")) < 500


def test_a_header_that_names_a_tensor_twice_is_refused(tmp_path):
    """JSON allows a key twice and json.loads keeps the last one: a silent choice."""
    entry = '{"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}'
    path = write_raw(tmp_path / "x.safetensors", f'{{"wte.weight": {entry}, "wte.weight": {entry}}}'.encode(),
                     bytes(4))
    expect_error(path, "names 'wte.weight' twice")


def test_a_tensor_under_its_bare_and_its_prefixed_name_is_refused(tmp_path, capsys):
    tensors = random_tensors(CONFIG, seed=7)
    tensors["transformer.wte.weight"] = tensors["wte.weight"] + 1  # the same tensor, other values
    write_safetensors(tmp_path / "model.safetensors", tensors)
    write_config_json(tmp_path)
    with pytest.raises(CheckpointError, match="holds both 'wte.weight' and 'transformer.wte.weight'"):
        load_checkpoint(tmp_path)
    assert main(["info", str(tmp_path)]) == 2 and "keep one of them" in capsys.readouterr().err


# ---- half precision wider than memory -----------------------------------------------------------------

def test_an_f16_checkpoint_that_would_not_fit_once_widened_is_refused_before_widening(tmp_path, monkeypatch, capsys):
    import picogpt.io.memory as memory
    import picogpt.model

    write_safetensors(tmp_path / "model.safetensors", random_tensors(CONFIG), "F16")
    write_config_json(tmp_path)
    n_widened = 4 * sum(int(np.prod(shape)) for shape in expected_shapes(CONFIG).values())
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: n_widened - 1)
    monkeypatch.setattr(picogpt.model, "tensors_of", lambda mapped: pytest.fail("widened before checking"))
    with pytest.raises(PicoGPTError, match="widening .*model.safetensors's half-precision weights to float32 "
                                           "needs .*; .* is available"):
        load_checkpoint(tmp_path)
    assert main(["info", str(tmp_path)]) == 2 and "half-precision" in capsys.readouterr().err
    monkeypatch.undo()
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: n_widened)
    assert load_checkpoint(tmp_path).config == CONFIG  # it fits exactly
