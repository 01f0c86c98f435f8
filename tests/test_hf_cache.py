"""The GPT-2 a user already has: a checkpoint in the Hugging Face hub's cache (what
`from_pretrained("gpt2")` leaves) is used with no download once its size and sha256 are the
pinned ones, and refused otherwise; the cache is read, never written.

Each test builds the hub's layout (snapshots/<revision>/model.safetensors, a symbolic link into
blobs/) around a small GPT-2 with GPT-2's vocabulary and context, and pins its sha256 in place of
the real one (the real files are 0.5 to 6.4 GB)."""

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from helpers import random_gpt2, random_tensors
from hypothesis import given
from hypothesis import strategies as st

import picogpt.io.download as dl
import picogpt.io.hf_cache as hf_cache
from picogpt import load
from picogpt.cli import main
from picogpt.course import pair
from picogpt.errors import CheckpointError
from picogpt.io.checkpoint import write_safetensors
from picogpt.io.params import params_from_tensors
from picogpt.io.pins import PINNED, WeightSpec
from picogpt.model import GPT2

REVISION = "0123456789abcdef0123456789abcdef01234567"
SHAPES = {"gpt2": dict(n_layer=1, n_head=2, n_embd=16), "gpt2-xl": dict(n_layer=2, n_head=2, n_embd=16)}


def small_gpt2(name, seed):
    """(tensors, config) of a small model with GPT-2's vocabulary and context, pinned as `name`."""
    config = random_gpt2(seed, n_vocab=50257, n_ctx=1024, **SHAPES[name]).config
    return random_tensors(config, seed), config


def put_in_hub(hub, folder, name, seed=0, revision=REVISION, spoil=None):
    """The hub's layout for one checkpoint: blobs/<sha256> and a snapshot linking to it, refs/main
    and a config.json that lies about n_head (only model.safetensors is verified). Returns the
    snapshot's model.safetensors and the sha256 the file had before `spoil` changed it."""
    tensors, _ = small_gpt2(name, seed)
    repo = hub / folder
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    staged = repo / "blobs" / "staged"
    write_safetensors(staged, tensors)
    sha256 = hashlib.sha256(staged.read_bytes()).hexdigest()
    blob = staged.rename(repo / "blobs" / sha256)
    if spoil:
        spoil(blob)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").symlink_to(Path("..", "..", "blobs", sha256))
    (repo / "blobs" / "config").write_text(json.dumps({"n_layer": SHAPES[name]["n_layer"], "n_head": 4,
                                                       "n_embd": 16, "n_positions": 1024, "vocab_size": 50257}))
    (snapshot / "config.json").symlink_to(Path("..", "..", "blobs", "config"))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snapshot / "model.safetensors", sha256


def pin(monkeypatch, name, path, sha256=None, n_bytes="size"):
    """Pin `name` to the file at `path` (its sha256 and size unless given)."""
    data = Path(path).read_bytes()
    monkeypatch.setitem(PINNED, name, WeightSpec(
        name=name, repo=f"openai-community/{name}", revision=REVISION,
        sha256=sha256 or hashlib.sha256(data).hexdigest(), n_bytes=len(data) if n_bytes == "size" else n_bytes,
        **SHAPES[name]))


def tree(folder):
    """Everything under folder as it is: each path's kind, link target, bytes' sha256 and times."""
    found = {}
    for path in sorted(Path(folder).rglob("*")):
        info = os.lstat(path)
        found[str(path)] = (info.st_mode, info.st_mtime_ns, info.st_ino, os.readlink(path) if path.is_symlink()
                            else hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None)
    return found


@pytest.fixture()
def hub(tmp_path, monkeypatch):
    """An empty hub cache at $HF_HUB_CACHE, an empty picogpt weights folder, and no network."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("PICOGPT_WEIGHTS_DIR", str(tmp_path / "weights"))
    monkeypatch.setattr(dl, "open_url", lambda *a, **k: pytest.fail("picogpt went to the network"))
    return tmp_path / "hub"


def expected_logits(name, seed, ids):
    tensors, config = small_gpt2(name, seed)
    return GPT2(params_from_tensors(tensors, config), config).plain(ids)


@pytest.mark.parametrize("folder", ["models--gpt2", "models--openai-community--gpt2"])
def test_a_matching_file_in_the_cache_is_loaded_without_a_download_and_the_cache_is_untouched(hub, monkeypatch,
                                                                                             capsys, folder):
    snapshot, _ = put_in_hub(hub, folder, "gpt2")
    pin(monkeypatch, "gpt2", snapshot)
    before = tree(hub)
    model = load("gpt2")
    assert model.checkpoint == snapshot and model.name == "gpt2"
    assert model.config.n_head == 2  # the pinned hyperparameters, not the cache's config.json (4)
    np.testing.assert_allclose(model([464, 2068, 7586]), expected_logits("gpt2", 0, [464, 2068, 7586]), atol=1e-5)
    assert main(["info", "gpt2"]) == 0
    out = capsys.readouterr().out
    assert str(snapshot) in out and "the Hugging Face cache" in out and "sha256" in out
    assert main(["download", "-q", "gpt2"]) == 0
    assert "found in the Hugging Face cache" in capsys.readouterr().out
    assert tree(hub) == before  # read, never written: no file added, changed, or touched
    assert not (Path(os.environ["PICOGPT_WEIGHTS_DIR"]) / "gpt2" / "model.safetensors").exists()


@pytest.mark.parametrize("variables", [{"HF_HOME": "{tmp}/hf-home"}, {"XDG_CACHE_HOME": "{tmp}/xdg"},
                                       {"HOME": "{tmp}/home"}])
def test_the_cache_is_found_where_the_hub_puts_it(tmp_path, monkeypatch, variables):
    """$HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
    ~/.cache/huggingface/hub (huggingface_hub's own order)."""
    for variable in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    for variable, value in variables.items():
        monkeypatch.setenv(variable, value.format(tmp=tmp_path))
    monkeypatch.setenv("PICOGPT_WEIGHTS_DIR", str(tmp_path / "weights"))
    expected = {"HF_HOME": tmp_path / "hf-home" / "hub", "XDG_CACHE_HOME": tmp_path / "xdg" / "huggingface" / "hub",
                "HOME": tmp_path / "home" / ".cache" / "huggingface" / "hub"}[next(iter(variables))]
    assert hf_cache.hub_cache_dir() == expected
    snapshot, _ = put_in_hub(expected, "models--gpt2", "gpt2")
    pin(monkeypatch, "gpt2", snapshot)
    assert load("gpt2").checkpoint == snapshot


def flip_last_byte(blob):
    data = bytearray(blob.read_bytes())
    data[-1] ^= 1
    blob.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["other bytes, same size", "other size", "truncated"])
def test_a_file_that_does_not_match_the_pins_is_refused(hub, monkeypatch, capsys, how):
    spoil = {"other bytes, same size": flip_last_byte, "other size": lambda blob: blob.write_bytes(b"x" * 100),
             "truncated": lambda blob: os.truncate(blob, 1000)}[how]
    snapshot, sha256 = put_in_hub(hub, "models--gpt2", "gpt2", spoil=spoil)
    pinned_size = len(write_and_read(hub, "gpt2"))
    pin(monkeypatch, "gpt2", snapshot, sha256=sha256, n_bytes=pinned_size)
    if how != "other bytes, same size":  # the size tells, so no hash is needed
        monkeypatch.setattr(hf_cache, "sha256_of", lambda *a, **k: pytest.fail("hashed a file of the wrong size"))
    with pytest.raises(CheckpointError, match="not found — run: python -m picogpt download gpt2") as raised:
        load("gpt2")
    assert str(snapshot) in str(raised.value) and "does not match" in str(raised.value)
    assert main(["info", "gpt2"]) == 2
    assert "does not match" in capsys.readouterr().err


def write_and_read(folder, name):
    """The bytes of the genuine small checkpoint `name` (seed 0), written beside the hub."""
    path = folder.parent / f"genuine-{name}.safetensors"
    write_safetensors(path, small_gpt2(name, 0)[0])
    return path.read_bytes()


def test_with_no_size_pinned_the_sha256_alone_decides(hub, monkeypatch):
    """GPT-2 large and XL have no size pinned (no public record gives it exactly)."""
    snapshot, _ = put_in_hub(hub, "models--gpt2", "gpt2")
    pin(monkeypatch, "gpt2", snapshot, n_bytes=None)
    assert load("gpt2").checkpoint == snapshot
    pin(monkeypatch, "gpt2", snapshot, sha256="0" * 64, n_bytes=None)
    with pytest.raises(CheckpointError, match="does not match"):
        load("gpt2")


@pytest.mark.parametrize("kind", ["fifo", "dangling link", "folder"])
def test_what_is_no_regular_file_in_a_snapshot_is_passed_over(hub, monkeypatch, kind):
    """Hashing a FIFO would wait forever; a dangling link (a blob deleted) or a folder is no copy."""
    good, _ = put_in_hub(hub, "models--openai-community--gpt2", "gpt2")
    pin(monkeypatch, "gpt2", good)
    bad = hub / "models--gpt2" / "snapshots" / REVISION / "model.safetensors"  # looked at first
    bad.parent.mkdir(parents=True)
    {"fifo": os.mkfifo, "dangling link": lambda p: p.symlink_to("../../blobs/gone"), "folder": Path.mkdir}[kind](bad)
    assert load("gpt2").checkpoint == good


def test_a_verified_file_is_hashed_once_until_it_changes(hub, monkeypatch, tmp_path):
    """Hashing GPT-2 XL's 6.4 GB takes seconds to minutes: the verdict is kept in picogpt's weights
    folder with the identity of the file hashed (device, inode, size, modification time)."""
    snapshot, _ = put_in_hub(hub, "models--gpt2", "gpt2")
    pin(monkeypatch, "gpt2", snapshot)
    hashed = []
    real_sha256_of = hf_cache.sha256_of
    monkeypatch.setattr(hf_cache, "sha256_of", lambda f, label=None: hashed.append(f.name) or real_sha256_of(f))
    for _ in range(3):
        assert load("gpt2").checkpoint == snapshot
    assert len(hashed) == 1
    record = tmp_path / "weights" / "gpt2" / "hf-cache.json"
    assert str(snapshot) in json.loads(record.read_text())
    os.utime(snapshot, ns=(10**18, 10**18))  # the blob is touched (the link is followed)
    assert load("gpt2").checkpoint == snapshot and len(hashed) == 2
    blob = snapshot.resolve()
    spoiled = blob.with_name("spoiled")
    spoiled.write_bytes(blob.read_bytes())
    flip_last_byte(spoiled)
    os.replace(spoiled, blob)  # the same size, another file (inode)
    with pytest.raises(CheckpointError, match="does not match"):
        load("gpt2")
    assert len(hashed) == 3


def test_a_weights_folder_that_cannot_be_written_only_costs_a_hash_per_load(hub, monkeypatch, tmp_path):
    snapshot, _ = put_in_hub(hub, "models--gpt2", "gpt2")
    pin(monkeypatch, "gpt2", snapshot)
    (tmp_path / "weights").write_text("a file where the weights folder should be")
    assert load("gpt2").checkpoint == snapshot
    assert load("gpt2").checkpoint == snapshot


def test_picogpt_s_own_verified_download_comes_first(hub, monkeypatch, tmp_path):
    snapshot, _ = put_in_hub(hub, "models--gpt2", "gpt2")
    pin(monkeypatch, "gpt2", snapshot)
    own = tmp_path / "weights" / "gpt2"
    own.mkdir(parents=True)
    (own / "model.safetensors").write_bytes(snapshot.read_bytes())
    dl.write_config(own, PINNED["gpt2"])  # as a download leaves it
    assert load("gpt2").checkpoint == own / "model.safetensors"


def test_the_course_runs_on_the_cache_s_pair_and_says_where_it_came_from(hub, monkeypatch, capsys):
    monkeypatch.delenv("PICOGPT_COURSE_MODELS", raising=False)
    for seed, name in enumerate(("gpt2", "gpt2-xl")):
        snapshot, _ = put_in_hub(hub, f"models--{name}", name, seed=seed)
        pin(monkeypatch, name, snapshot)
    assert pair.course_pair_names() == ("gpt2", "gpt2-xl")
    draft, target = pair.course_models()
    out = capsys.readouterr().out
    assert out.count("from the Hugging Face cache, read in place") == 2


def test_a_command_that_does_not_run_the_course_pair_never_looks_in_the_cache(hub, monkeypatch, capsys):
    """Checking PICOGPT_COURSE_MODELS before any output used to ask whether GPT-2 small and XL
    are at hand: a first `info tiny-draft` would have hashed GPT-2 XL in the cache."""
    monkeypatch.delenv("PICOGPT_COURSE_MODELS", raising=False)
    for seed, name in enumerate(("gpt2", "gpt2-xl")):
        snapshot, _ = put_in_hub(hub, f"models--{name}", name, seed=seed)
        pin(monkeypatch, name, snapshot)
    monkeypatch.setattr(hf_cache, "sha256_of", lambda *a, **k: pytest.fail("hashed a file in the cache"))
    assert main(["info", "tiny-draft"]) == 0 and "shipped inside picogpt" in capsys.readouterr().out


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"SNAPSHOT": 5}', '{"SNAPSHOT": {"identity": 5}}',
                                  '{"SNAPSHOT": {"identity": [1, 2], "sha256": null}}'])
def test_a_remembered_verdict_that_is_not_what_picogpt_writes_is_ignored(hub, monkeypatch, tmp_path, text):
    """Hand-edited, or written by another version: the file is hashed again, never trusted."""
    snapshot, _ = put_in_hub(hub, "models--gpt2", "gpt2")
    pin(monkeypatch, "gpt2", snapshot)
    record = tmp_path / "weights" / "gpt2" / "hf-cache.json"
    record.parent.mkdir(parents=True)
    record.write_text(text.replace("SNAPSHOT", str(snapshot)))
    assert load("gpt2").checkpoint == snapshot
    assert json.loads(record.read_text())[str(snapshot)]["sha256"] == PINNED["gpt2"].sha256


def test_the_file_mapped_must_be_the_file_verified(hub, monkeypatch):
    """The snapshot's path was verified, then opened again to be mapped: a link re-pointed in
    between (a cache being written while picogpt loads) loaded a file never verified."""
    import picogpt.model as model_module

    snapshot, _ = put_in_hub(hub, "models--gpt2", "gpt2")
    pin(monkeypatch, "gpt2", snapshot)
    spoiled = snapshot.resolve().with_name("spoiled")
    spoiled.write_bytes(snapshot.read_bytes())
    flip_last_byte(spoiled)
    real_map = model_module.map_checkpoint

    def re_pointed_then_mapped(path):
        snapshot.unlink()
        snapshot.symlink_to(spoiled)
        return real_map(path)

    monkeypatch.setattr(model_module, "map_checkpoint", re_pointed_then_mapped)
    with pytest.raises(CheckpointError, match="changed in the Hugging Face cache while picogpt loaded it"):
        load("gpt2")


@pytest.mark.parametrize("name", ["gpt2-large", "gpt2-xl"])
def test_every_published_file_has_a_size_to_refuse_others_by(name):
    """No public record gives GPT-2 large's and XL's sizes exactly: they are bounded by their
    weights, masks and header, bounds that hold gpt2's and gpt2-medium's exact pinned sizes."""
    from picogpt.io.pins import published_size_bounds

    assert PINNED[name].n_bytes is None and PINNED[name].n_bytes_bounds == published_size_bounds(name)
    for exact in ("gpt2", "gpt2-medium"):
        low, high = published_size_bounds(exact)
        assert low <= PINNED[exact].n_bytes <= high
    low, high = published_size_bounds(name)
    rounded_gb = {"gpt2-large": 3.25, "gpt2-xl": 6.43}[name]  # what the hub's file page shows
    assert low < rounded_gb * 1e9 + 5e6 and high >= rounded_gb * 1e9 - 5e6
    guarantees = (Path(__file__).parents[1] / "docs" / "guarantees.md").read_text()
    assert f"| `{name}`" in guarantees and f"{low:,} to {high:,} bytes" in guarantees


@pytest.mark.parametrize("kind", ["300 GB sparse file", "/proc/self/pagemap"])
def test_a_file_that_cannot_be_gpt2_xl_is_refused_before_a_byte_is_hashed(hub, monkeypatch, tmp_path, kind):
    """With no size pinned, any file there was hashed in full: `info gpt2-xl` read a 300 GB
    sparse file (or /proc/self/pagemap, which says it is empty) for about 14 minutes."""
    if kind == "/proc/self/pagemap" and not os.path.exists(kind):
        pytest.skip("no /proc here")
    target = Path(kind) if kind.startswith("/") else tmp_path / "sparse"
    if not kind.startswith("/"):
        with open(target, "wb") as f:
            f.truncate(300 * 10**9)
    snapshot = hub / "models--gpt2-xl" / "snapshots" / PINNED["gpt2-xl"].revision / "model.safetensors"
    snapshot.parent.mkdir(parents=True)
    snapshot.symlink_to(target)
    monkeypatch.setattr(hf_cache, "sha256_of", lambda *a, **k: pytest.fail("hashed a file that cannot be gpt2-xl"))
    with pytest.raises(CheckpointError, match="so it was not used: it has [0-9,]+ bytes, where gpt2-xl's file has"):
        load("gpt2-xl")


def test_a_cache_folder_under_a_user_that_does_not_exist_is_one_error(hub, monkeypatch):
    """expanduser raised a RuntimeError, a traceback from `speculate`, `generate` and `info gpt2`."""
    from picogpt.errors import PicoGPTError

    monkeypatch.setenv("HF_HUB_CACHE", "~nosuchuser/hub")
    with pytest.raises(PicoGPTError, match="HF_HUB_CACHE='~nosuchuser/hub' starts with a home folder"):
        load("gpt2")


def test_a_remembered_verdict_nested_too_deeply_is_ignored(hub, monkeypatch, tmp_path):
    """100 kB of `[` planted as hf-cache.json was a RecursionError (config.json's reader caught it)."""
    snapshot, _ = put_in_hub(hub, "models--gpt2", "gpt2")
    pin(monkeypatch, "gpt2", snapshot)
    record = tmp_path / "weights" / "gpt2" / "hf-cache.json"
    record.parent.mkdir(parents=True)
    record.write_text("[" * 100_000)
    assert load("gpt2").checkpoint == snapshot


def test_download_says_why_a_file_in_the_cache_was_not_used_and_what_works_offline(hub, monkeypatch, capsys, tmp_path):
    """Only `info gpt2` said why; offline, the one line did not name the two ways that need no network."""
    snapshot, sha256 = put_in_hub(hub, "models--gpt2", "gpt2", spoil=flip_last_byte)
    pin(monkeypatch, "gpt2", snapshot, sha256=sha256)

    def offline(url, start_byte=0):
        raise dl.Unreachable(f"could not connect to {url} (no network)")

    monkeypatch.setattr(dl, "open_url", offline)
    assert main(["download", "-q", "gpt2"]) == 2
    out, err = capsys.readouterr()
    assert f"{snapshot} in the Hugging Face cache does not match the pinned file, so it was not used: its sha256 is" in out
    line = err.strip().splitlines()[-1]
    assert "without a network" in line and "Hugging Face cache" in line and str(tmp_path / "weights" / "gpt2") in line


@given(n_bytes=st.integers(min_value=0, max_value=10**15), exact=st.sampled_from([None, 548_105_171]))
def test_a_size_is_refused_exactly_when_the_checkpoint_cannot_have_it(n_bytes, exact):
    """size_problem's verdict, over every size: None inside the pinned size (or bounds), and
    outside it a sentence that gives the size and what the file has."""
    spec = WeightSpec(name="gpt2-xl", repo="openai-community/gpt2-xl", revision=REVISION, sha256="0" * 64,
                      n_bytes=exact, n_layer=48, n_head=25, n_embd=1600,
                      n_bytes_bounds=None if exact else PINNED["gpt2-xl"].n_bytes_bounds)
    low, high = (exact, exact) if exact else spec.n_bytes_bounds
    problem = spec.size_problem(n_bytes)
    assert (problem is None) == (low <= n_bytes <= high)
    if problem:
        assert problem.startswith(f"{n_bytes:,} bytes, where gpt2-xl's file has ") and f"{high:,}" in problem
