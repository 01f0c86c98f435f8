"""Downloads are verified, resumable and fail with one clear message (exit status 2).

Every test serves a small file from a local HTTP server on 127.0.0.1 (HF_ENDPOINT points at
it) under a test WeightSpec whose sha256 the test supplies; the real 6 GB files are never needed.
"""

import builtins
import errno
import hashlib
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import namedtuple

import numpy as np
import pytest
from helpers import FillingFile

import picogpt.io.download as dl
from picogpt.cli import main
from picogpt.errors import DownloadError
from picogpt.io.params import config_from_json
from picogpt.io.pins import WeightSpec
from picogpt.io.registry import PRETRAINED

PAYLOAD = np.random.default_rng(0).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
SHA256 = hashlib.sha256(PAYLOAD).hexdigest()
N_BYTES = len(PAYLOAD)
REVISION = "0123456789abcdef0123456789abcdef01234567"
PATH = f"/test-org/toy/resolve/{REVISION}/model.safetensors"
SLOW_PIECES, SLOW_PAUSE_S = 10, 0.15  # the "slow" server sends the file in 1.5 s, once released


BAD_LENGTHS = {"bad-length": "abc", "superscript-length": "\u00b2", "huge-length": "9" * 5000}
REDIRECTS = {"loop": PATH, "to-file": "file:///etc/passwd"}
STALL_S = 3  # the "stall" server waits this long mid-body, longer than the client's timeout


class Server:
    """A tiny file server. `mode`: "ok" (honours Range), "cut" (the first response stops
    halfway and closes the connection), "ignore-range" (always 200 with the whole file),
    BAD_LENGTHS (a Content-Length that is no number of bytes), REDIRECTS (to itself, or to a
    file:// address), "slow" (the body in SLOW_PIECES pieces, SLOW_PAUSE_S apart, the rest
    after the first only once the test sets `release`, or after 30 s), "long" (no
    Content-Length, and the file followed by as many bytes again), "stall" (half the body, then
    nothing for STALL_S), "escape-reason" (HTTP 503 with terminal escapes in its reason phrase)."""

    def __init__(self):
        self.mode, self.requests, self.n_served = "ok", [], 0
        self.release = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(dict(path=self.path, range=self.headers.get("Range")))
                if self.path != PATH:
                    self.send_error(404, "Not Found")
                    return
                if server.mode == "escape-reason":
                    self.send_response(503, "\x1b]0;pwned\x07\x1b[31mBusy")
                    self.end_headers()
                    return
                if server.mode in REDIRECTS:
                    self.send_response(302)
                    self.send_header("Location", REDIRECTS[server.mode])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start = 0
                if self.headers.get("Range") and server.mode != "ignore-range":
                    start = int(self.headers["Range"].removeprefix("bytes=").rstrip("-"))
                    if start >= len(PAYLOAD):
                        self.send_error(416, "Range Not Satisfiable")
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(PAYLOAD) - 1}/{len(PAYLOAD)}")
                else:
                    self.send_response(200)
                body = PAYLOAD[start:]
                if server.mode == "long":
                    body += PAYLOAD  # no length: the body ends when the connection closes
                    self.close_connection = True
                else:
                    self.send_header("Content-Length", BAD_LENGTHS.get(server.mode, str(len(body))))
                self.end_headers()
                if server.mode == "cut" and server.n_served == 0:
                    body = body[: len(body) // 2]  # then the connection closes mid-file
                    self.close_connection = True
                server.n_served += 1
                if server.mode == "stall":
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    time.sleep(STALL_S)
                    return
                pieces = SLOW_PIECES if server.mode == "slow" else 1
                try:
                    for i in range(pieces):
                        self.wfile.write(body[i * len(body) // pieces:(i + 1) * len(body) // pieces])
                        self.wfile.flush()
                        time.sleep(SLOW_PAUSE_S if server.mode == "slow" else 0)
                        if server.mode == "slow" and i == 0:
                            server.release.wait(30)
                except (BrokenPipeError, ConnectionResetError):  # the client went away (a killed download)
                    self.close_connection = True

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture()
def server(monkeypatch):
    srv = Server()
    monkeypatch.setenv("HF_ENDPOINT", srv.endpoint)
    yield srv
    srv.close()


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Downloads go to a temporary weights folder; every network wait is bounded."""
    monkeypatch.setenv("PICOGPT_WEIGHTS_DIR", str(tmp_path / "weights"))
    monkeypatch.setattr(dl, "TIMEOUT_S", 5)
    monkeypatch.setattr(dl, "CHUNK_BYTES", 1 << 14)


Files = namedtuple("Files", "final part config")


def toy_spec(sha256=SHA256, n_bytes=N_BYTES, revision=REVISION):
    return WeightSpec(name="toy", repo="test-org/toy", revision=revision, sha256=sha256,
                         n_bytes=n_bytes, n_layer=2, n_head=3, n_embd=192)


def register(monkeypatch, **kwargs):
    """Make `python -m picogpt download toy` fetch the toy spec; returns the paths it will use."""
    monkeypatch.setitem(dl.PINNED, "toy", toy_spec(**kwargs))
    folder = dl.weights_dir() / "toy"
    return Files(folder / "model.safetensors", folder / "model.safetensors.part", folder / "config.json")


def run_cli(capsys, *names, quiet=True):
    status = main(["download", *(["-q"] if quiet else []), *names])
    out, err = capsys.readouterr()
    return status, out, err


def error_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# ---- success -----------------------------------------------------------------------------------

def test_download_verifies_installs_and_writes_config(server, monkeypatch, capsys):
    files = register(monkeypatch)
    status, out, err = run_cli(capsys, "toy", quiet=False)
    assert status == 0, err
    assert files.final.read_bytes() == PAYLOAD and not files.part.exists()
    assert "downloaded and verified" in out
    assert "toy" in err and "293k" in err  # the progress bar: 300,000 bytes = 293 KiB
    assert server.requests == [dict(path=PATH, range=None)]
    config = config_from_json(files.config)
    assert (config.n_layer, config.n_head, config.n_embd, config.n_ctx, config.n_vocab) == (2, 3, 192, 1024, 50257)
    assert config.layer_norm_epsilon == 1e-5
    assert json.loads(files.config.read_text())["model_type"] == "gpt2"


def test_present_and_verified_file_is_skipped(server, monkeypatch, capsys):
    files = register(monkeypatch)
    assert run_cli(capsys, "toy")[0] == 0
    server.requests.clear()
    status, out, _ = run_cli(capsys, "toy")
    assert status == 0 and "already present and verified" in out and "skipped" in out
    assert server.requests == []  # not even a connection
    assert files.final.read_bytes() == PAYLOAD


def test_unpinned_size_is_taken_from_content_length(server, monkeypatch, capsys):
    files = register(monkeypatch, n_bytes=None)
    status, out, err = run_cli(capsys, "toy")
    assert status == 0, err
    assert f"Content-Length, {len(PAYLOAD):,} bytes" in out
    assert files.final.read_bytes() == PAYLOAD


# ---- resume --------------------------------------------------------------------------------------

def test_cut_connection_keeps_the_part_and_the_next_run_resumes_with_range(server, monkeypatch, capsys):
    files = register(monkeypatch)
    server.mode = "cut"
    status, _, err = run_cli(capsys, "toy")
    assert status == 2
    line = error_line(err)
    assert "connection" in line and "kept" in line and "run the same command again" in line
    assert not files.final.exists()
    n_part = files.part.stat().st_size
    assert 0 < n_part < len(PAYLOAD)

    status, out, err = run_cli(capsys, "toy")
    assert status == 0, err
    assert server.requests[-1]["range"] == f"bytes={n_part}-"  # resumed, not restarted
    assert f"resuming {files.part.name} at {n_part:,}" in out
    assert files.final.read_bytes() == PAYLOAD and not files.part.exists()


def test_server_that_ignores_range_restarts_from_zero(server, monkeypatch, capsys):
    files = register(monkeypatch)
    files.part.parent.mkdir(parents=True)
    files.part.write_bytes(b"\xff" * 1000)  # garbage that must not end up in the file
    server.mode = "ignore-range"
    status, out, err = run_cli(capsys, "toy")
    assert status == 0, err
    assert server.requests[0]["range"] == "bytes=1000-"
    assert "ignored the resume request" in out
    assert files.final.read_bytes() == PAYLOAD


def test_part_longer_than_the_file_is_discarded(server, monkeypatch, capsys):
    files = register(monkeypatch)
    files.part.parent.mkdir(parents=True)
    files.part.write_bytes(bytes(len(PAYLOAD) + 10))
    assert run_cli(capsys, "toy")[0] == 0
    assert files.final.read_bytes() == PAYLOAD


def test_unsatisfiable_range_restarts_from_zero(server, monkeypatch, capsys):
    files = register(monkeypatch, n_bytes=None)  # no pinned size, so the server must say 416
    files.part.parent.mkdir(parents=True)
    files.part.write_bytes(bytes(len(PAYLOAD) + 10))
    status, _, err = run_cli(capsys, "toy")
    assert status == 0, err
    assert [r["range"] for r in server.requests] == [f"bytes={len(PAYLOAD) + 10}-", None]
    assert files.final.read_bytes() == PAYLOAD


# ---- failures: one line, exit status 2, never an unverified file at the final path --------------

def test_hash_mismatch_deletes_the_partial_file(server, monkeypatch, capsys):
    files = register(monkeypatch, sha256="0" * 64)
    status, _, err = run_cli(capsys, "toy")
    line = error_line(err)
    assert status == 2
    assert SHA256 in line and "0" * 64 in line and "was deleted" in line
    assert not files.final.exists() and not files.part.exists()


def test_resumed_garbage_fails_the_hash_and_is_deleted(server, monkeypatch, capsys):
    files = register(monkeypatch)
    files.part.parent.mkdir(parents=True)
    files.part.write_bytes(b"\xff" * 1000)  # not the file's first 1000 bytes
    status, _, err = run_cli(capsys, "toy")
    assert status == 2 and server.requests[0]["range"] == "bytes=1000-"
    assert "was deleted" in error_line(err)  # the bytes already held were hashed too
    assert not files.final.exists() and not files.part.exists()
    assert run_cli(capsys, "toy")[0] == 0  # and the next run starts clean
    assert files.final.read_bytes() == PAYLOAD


def test_size_mismatch_is_refused_before_downloading(server, monkeypatch, capsys):
    files = register(monkeypatch, n_bytes=len(PAYLOAD) + 1)
    status, _, err = run_cli(capsys, "toy")
    assert status == 2 and "not the pinned file" in error_line(err)
    assert not files.final.exists() and not files.part.exists()


def test_404_names_the_url(server, monkeypatch, capsys):
    files = register(monkeypatch, revision="f" * 40)
    status, _, err = run_cli(capsys, "toy")
    line = error_line(err)
    assert status == 2
    assert "HTTP 404" in line and f"{server.endpoint}/test-org/toy/resolve/{'f' * 40}/model.safetensors" in line
    assert not files.final.exists() and not files.part.exists()


def test_connection_refused(monkeypatch, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    files = register(monkeypatch)
    status, _, err = run_cli(capsys, "toy")
    line = error_line(err)
    assert status == 2
    assert "could not connect" in line and f"127.0.0.1:{port}" in line and "run the same command again" in line
    assert "teaching pair" in line  # what runs meanwhile
    assert not files.final.parent.exists()  # no empty weights/<name>/ left behind


def test_a_failed_download_into_an_existing_folder_leaves_the_folder(monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: refused
    files = register(monkeypatch)
    files.final.parent.mkdir(parents=True)
    (files.final.parent / "notes.txt").write_text("mine")
    assert run_cli(capsys, "toy")[0] == 2
    assert (files.final.parent / "notes.txt").read_text() == "mine"
    files.config.parent.joinpath("notes.txt").unlink()
    assert run_cli(capsys, "toy")[0] == 2
    assert files.final.parent.is_dir()  # it was there before this download: not ours to remove


def test_not_enough_disk_space(server, monkeypatch, capsys):
    files = register(monkeypatch)
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(dl.shutil, "disk_usage", lambda path: Usage(10**9, 10**9 - 1000, 1000))
    status, _, err = run_cli(capsys, "toy")
    assert status == 2 and "not enough disk space" in error_line(err) and "PICOGPT_WEIGHTS_DIR" in err
    assert server.requests == [] and not files.final.exists()


def test_a_different_file_at_the_final_path_is_left_alone(server, monkeypatch, capsys):
    files = register(monkeypatch)
    files.final.parent.mkdir(parents=True)
    files.final.write_bytes(b"my own file")
    status, _, err = run_cli(capsys, "toy")
    assert status == 2 and "does not match" in error_line(err)
    assert files.final.read_bytes() == b"my own file"


def test_unknown_and_embedded_names(capsys):
    status, _, err = run_cli(capsys, "gpt5")
    assert status == 2 and "unknown model 'gpt5'" in error_line(err) and "gpt2-xl" in err
    status, _, err = run_cli(capsys, "tiny-draft")
    assert status == 2 and "ships with the repository" in error_line(err)


def test_download_spec_raises_download_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: refused
    with pytest.raises(DownloadError, match="could not connect"):
        dl.download_spec(toy_spec(), tmp_path, progress=False, log=lambda message: None)


# ---- the environment: full disks, unwritable folders, odd servers ------------------------------

@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EFBIG])
def test_disk_filling_during_the_download_deletes_the_part_and_says_what_to_do(server, monkeypatch, capsys, error):
    files = register(monkeypatch)
    monkeypatch.setattr(dl, "open", lambda path, mode="r", **kw: FillingFile(builtins.open(path, mode, **kw), 50_000, error),
                        raising=False)
    status, _, err = run_cli(capsys, "toy")
    line = error_line(err)
    assert status == 2 and os.strerror(error) in line and "PICOGPT_WEIGHTS_DIR" in line
    assert "run the same command again" in line
    assert not files.final.exists() and not files.part.exists()


def test_weights_folder_under_a_regular_file(server, monkeypatch, capsys, tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("PICOGPT_WEIGHTS_DIR", str(tmp_path / "a-file" / "weights"))
    register(monkeypatch)
    status, _, err = run_cli(capsys, "toy")
    assert status == 2 and "cannot write to the weights folder" in error_line(err)
    assert server.requests == []


def test_weights_folder_that_cannot_be_written(server, monkeypatch, capsys):
    """chmod does not stop root, so a refused write is simulated."""
    files = register(monkeypatch)
    files.final.parent.mkdir(parents=True)

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    status, _, err = run_cli(capsys, "toy")
    line = error_line(err)
    assert status == 2 and "cannot write to the weights folder" in line and "Permission denied" in line
    assert "PICOGPT_WEIGHTS_DIR" in line and server.requests == []


@pytest.mark.parametrize("mode", BAD_LENGTHS)
def test_invalid_content_length_is_one_line(server, monkeypatch, capsys, mode):
    """'²' passes str.isdigit() and 5,000 digits are more than int() converts: both used to
    end in a ValueError traceback."""
    files = register(monkeypatch)
    server.mode = mode
    status, _, err = run_cli(capsys, "toy")
    line = error_line(err)
    assert status == 2 and "invalid Content-Length header" in line and len(line) < 400
    assert not files.final.exists()


def test_redirect_loop_is_one_line(server, monkeypatch, capsys):
    files = register(monkeypatch)
    server.mode = "loop"
    status, _, err = run_cli(capsys, "toy")
    assert status == 2 and "redirects in a loop" in error_line(err)
    assert not files.final.exists()


def test_a_redirect_to_a_file_address_says_so(server, monkeypatch, capsys):
    """It used to be reported as a redirect loop."""
    register(monkeypatch)
    server.mode = "to-file"
    status, _, err = run_cli(capsys, "toy")
    line = error_line(err)
    assert status == 2 and "redirects to file:///etc/passwd, a file: address" in line and "loop" not in line


def test_a_reason_phrase_s_terminal_escapes_are_printed_escaped(server, monkeypatch, capsys):
    """A server's reason phrase used to reach the terminal raw: ESC ] 0 retitled it."""
    register(monkeypatch)
    server.mode = "escape-reason"
    status, _, err = run_cli(capsys, "toy")
    line = error_line(err)
    assert status == 2 and "HTTP 503" in line and "\\x1b]0;pwned\\x07\\x1b[31mBusy" in line
    assert "\x1b" not in err and "\x07" not in err


def test_a_server_that_stalls_mid_body_keeps_every_byte_received(server, monkeypatch, capsys):
    """Bytes read before the timeout, short of a whole chunk, used to be lost."""
    files = register(monkeypatch)
    monkeypatch.setattr(dl, "TIMEOUT_S", 0.5)
    server.mode = "stall"
    status, _, err = run_cli(capsys, "toy")
    assert status == 2 and "kept" in error_line(err)
    assert files.part.read_bytes() == PAYLOAD[: len(PAYLOAD) // 2]
    server.mode = "ok"
    assert run_cli(capsys, "toy")[0] == 0 and files.final.read_bytes() == PAYLOAD


# ---- the pinned table ------------------------------------------------------------------------------

def test_every_pretrained_model_is_pinned():
    assert set(dl.PINNED) == set(PRETRAINED)
    for name, spec in dl.PINNED.items():
        assert re.fullmatch(r"[0-9a-f]{40}", spec.revision), f"{name}: a revision is a git commit, 40 hex digits"
        assert re.fullmatch(r"[0-9a-f]{64}", spec.sha256), f"{name}: a sha256 is 64 lowercase hex digits"
        assert (spec.n_layer, spec.n_head, spec.n_embd) == tuple(PRETRAINED[name][k] for k in ("n_layer", "n_head", "n_embd"))
    assert dl.PINNED["gpt2"].n_bytes == 548_105_171


def test_url_defaults_to_the_hub(monkeypatch):
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert dl.PINNED["gpt2-xl"].url() == ("https://huggingface.co/openai-community/gpt2-xl/resolve/"
                                          "15ea56dee5df4983c59b2538573817e1667135e2/model.safetensors")


# ---- one writer per file, verified on disk ----------------------------------------------------------

DOWNLOAD_TOY = """
import sys
import picogpt.io.download as dl
from picogpt.io.pins import WeightSpec
from picogpt.cli import main

dl.PINNED["toy"] = WeightSpec(name="toy", repo="test-org/toy", revision=sys.argv[1], sha256=sys.argv[2],
                              n_bytes=int(sys.argv[3]) if sys.argv[3] != "none" else None,
                              n_layer=2, n_head=3, n_embd=192)
dl.CHUNK_BYTES = 1 << 14
sys.exit(main(["download", "-q", "toy"]))
"""


def start_download_process(n_bytes=N_BYTES):
    """`python -m picogpt download toy` in its own process (HF_ENDPOINT and PICOGPT_WEIGHTS_DIR
    from the test's environment); n_bytes=None: no size pinned."""
    return subprocess.Popen([sys.executable, "-c", DOWNLOAD_TOY, REVISION, SHA256, str(n_bytes).lower()],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ | {"PYTHONUNBUFFERED": "1"})


def wait_for(condition, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_two_downloads_of_one_model_at_once_install_one_verified_file(server, monkeypatch):
    """Both used to append to the same .part and install the interleaved file as verified."""
    files = register(monkeypatch)
    server.mode = "slow"
    first = start_download_process()
    wait_for(lambda: server.requests)  # the first is streaming: the second must wait for it
    second = start_download_process()
    waiting = second.stdout.readline()  # the second says it waits (however long it took to start) ...
    server.release.set()  # ... then the first may finish
    outputs = [process.communicate(timeout=60) for process in (first, second)]
    outputs[1] = (waiting + outputs[1][0], outputs[1][1])
    assert [first.returncode, second.returncode] == [0, 0], outputs
    assert "downloaded and verified" in outputs[0][0]
    assert "another download (process" in outputs[1][0] and "waiting" in outputs[1][0]
    assert "already present and verified" in outputs[1][0]
    assert len(server.requests) == 1  # the second never downloaded
    assert files.final.read_bytes() == PAYLOAD
    assert sorted(p.name for p in files.final.parent.iterdir()) == ["config.json", "model.safetensors"]


def test_a_download_killed_mid_file_leaves_its_lock_free_and_the_next_one_resumes(server, monkeypatch, capsys):
    files = register(monkeypatch)
    server.mode = "slow"
    first = start_download_process()
    wait_for(lambda: files.part.exists() and files.part.stat().st_size > 0)
    first.send_signal(signal.SIGKILL)  # no cleanup at all: the OS releases the lock
    first.communicate(timeout=30)
    n_part = files.part.stat().st_size
    server.mode = "ok"
    status, out, err = run_cli(capsys, "toy")
    assert status == 0, err
    assert f"resuming {files.part.name} at {n_part:,}" in out
    assert files.final.read_bytes() == PAYLOAD
    assert sorted(p.name for p in files.final.parent.iterdir()) == ["config.json", "model.safetensors"]


def test_the_file_on_disk_is_verified_not_the_bytes_received(server, monkeypatch, capsys):
    """Another writer (or the disk) may change the .part after this process wrote it: the
    size and sha256 are those of the file as it is just before the rename."""
    files = register(monkeypatch)
    stream = dl.stream_to_part

    def stream_then_another_writer_appends(response, part, *args):
        n_have = stream(response, part, *args)
        with open(part, "ab") as f:
            f.write(b"interleaved")
        return n_have

    monkeypatch.setattr(dl, "stream_to_part", stream_then_another_writer_appends)
    status, _, err = run_cli(capsys, "toy")
    line = error_line(err)
    assert status == 2 and f"gave {len(PAYLOAD) + 11:,} bytes" in line and "was deleted" in line
    assert not files.final.exists() and not files.part.exists()


def test_a_body_longer_than_the_pinned_size_is_cut_off(server, monkeypatch, capsys):
    files = register(monkeypatch)
    server.mode = "long"
    # a write past the file's size would fail as on a full disk, with another message
    monkeypatch.setattr(dl, "open", lambda path, mode="r", **kw: FillingFile(builtins.open(path, mode, **kw), len(PAYLOAD),
                                                                        errno.ENOSPC), raising=False)
    status, _, err = run_cli(capsys, "toy")
    line = error_line(err)
    assert status == 2 and f"sent more than the {len(PAYLOAD):,} bytes of toy" in line and "was deleted" in line
    assert not files.final.exists() and not files.part.exists()


# ---- HF_ENDPOINT is checked before any request -------------------------------------------------------

@pytest.mark.parametrize("value", ["http://127.0.0.1:eighty", "http://127.0.0.1:8080\n", "http://[::1",
                                   " ", "ftp://mirror.example", "http://", "http://127.0.0.1:99999",
                                   "https://mirror .example"])
def test_a_malformed_hf_endpoint_is_one_line_before_any_request(monkeypatch, capsys, value):
    files = register(monkeypatch)
    monkeypatch.setenv("HF_ENDPOINT", value)
    status, out, err = run_cli(capsys, "toy")
    line = error_line(err)
    assert status == 2 and out == "" and "HF_ENDPOINT=" in line and "not a usable server address" in line
    assert not files.final.parent.exists()  # nothing was made either
    with pytest.raises(DownloadError, match="HF_ENDPOINT"):
        toy_spec().url()


def test_an_empty_hf_endpoint_means_the_hub(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "")
    assert toy_spec().url().startswith("https://huggingface.co/test-org/toy/")


# ---- a shared weights folder: names planted by someone else -----------------------------------------

def plant(tmp_path, files, name, kind):
    """Put `kind` at files.<name> ("final", "part" or "lock"), as another user of a shared
    weights folder could: a symbolic link or a hard link to a victim file outside the folder
    (which holds the file's genuine first bytes), a FIFO, a folder, or a link to /dev/zero. Returns the
    victim, whose bytes must never change."""
    victim = tmp_path / "victim.bin"
    victim.write_bytes(PAYLOAD[:1000])
    path = files.final.with_name({"final": "model.safetensors", "part": "model.safetensors.part",
                                  "lock": "model.safetensors.lock"}[name])
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "hardlink":
        os.link(victim, path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    return victim


@pytest.mark.parametrize("name, kind", [("lock", "symlink"), ("lock", "hardlink"), ("part", "symlink"),
                                        ("part", "hardlink"), ("part", "fifo"), ("final", "symlink"),
                                        ("lock", "folder"), ("part", "folder"), ("final", "folder")])
def test_a_link_planted_in_the_weights_folder_is_refused_and_its_target_untouched(server, monkeypatch, capsys,
                                                                                 tmp_path, name, kind):
    """A planted lock link got its target truncated and overwritten with a process id; a .part
    link got its target extended by the download, and then installed as model.safetensors: a
    link to a file its planter could change at will. A folder at the lock's name gave a raw
    IsADirectoryError (the command line blamed the disk's free space)."""
    files = register(monkeypatch)
    victim = plant(tmp_path, files, name, kind)
    status, out, err = run_cli(capsys, "toy")
    line = error_line(err)
    assert status == 2 and "not a file picogpt may use" in line and "delete it and run the same command again" in line
    assert victim.read_bytes() == PAYLOAD[:1000]
    assert not files.final.exists() or name == "final"
    assert not os.path.islink(files.final) or name == "final"


def test_the_write_probe_creates_nothing_where_a_planted_link_points(server, monkeypatch, capsys, tmp_path):
    files = register(monkeypatch)
    files.final.parent.mkdir(parents=True)
    target = tmp_path / "created-through-the-link"
    (files.final.parent / f".picogpt-write-test-{os.getpid()}").symlink_to(target)
    assert run_cli(capsys, "toy")[0] == 0 and files.final.read_bytes() == PAYLOAD
    assert not target.exists()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_final_path_that_is_a_fifo_or_a_device_is_refused_not_hashed_forever(server, tmp_path, kind):
    """Hashing it used to wait on the FIFO, or read /dev/zero, forever, holding the lock."""
    files = Files(*(tmp_path / "weights" / "toy" / name for name in ("model.safetensors", "model.safetensors.part",
                                                                     "config.json")))
    plant(tmp_path, files, "final", kind)
    process = start_download_process(n_bytes=None)  # no size pinned: nothing tells it is the wrong file
    try:
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 2 and "not a file picogpt may use" in error_line(err), err
    assert server.requests == []


def test_a_part_swapped_for_another_file_while_it_is_hashed_is_not_installed(server, monkeypatch, capsys):
    """What lands at the final path must be the file that was hashed: a swapped one (here with
    the genuine bytes, but another's, to change at will) used to be renamed into place."""
    files = register(monkeypatch)
    hash_it = dl.sha256_of

    def hash_then_swap(f, label=None):
        digest = hash_it(f, label)
        swapped = files.part.with_name("swapped")
        swapped.write_bytes(PAYLOAD)
        os.replace(swapped, files.part)
        return digest

    monkeypatch.setattr(dl, "sha256_of", hash_then_swap)
    status, _, err = run_cli(capsys, "toy")
    assert status == 2 and "was replaced while it was being verified" in error_line(err)
    assert not files.final.exists()
