"""`make lab` serves the course as whoever runs it (root in containers and cloud notebooks too),
headless, with the JupyterLab flags given in LAB_ARGS."""

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from browser_test import free_port

REPO = Path(__file__).resolve().parent.parent


def contents(port, token):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/?token={token}", timeout=5) as response:
        return json.load(response)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_serves_the_notebooks_headless_with_the_flags_given(tmp_path):
    if not (REPO / ".venv" / ".installed").exists():
        pytest.skip("make lab uses the repository's .venv, made by make test")
    port, token = free_port(), "picogpt-test"
    lab_args = f"--no-browser --port={port} --IdentityProvider.token={token}"
    env = os.environ | {"JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
    server = subprocess.Popen(["make", "-s", "lab", f"LAB_ARGS={lab_args}"], cwd=REPO, env=env, start_new_session=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, listing = time.monotonic() + 90, None
        while listing is None and time.monotonic() < deadline and server.poll() is None:
            try:
                listing = contents(port, token)
            except OSError:
                time.sleep(0.5)
        if listing is None:
            server.kill()
            pytest.fail("make lab did not serve the course:\n" + server.communicate(timeout=10)[0][-3000:])
        names = {item["name"] for item in listing["content"]}
        assert {"01-gpt2-in-numpy.ipynb", "05-speedup.ipynb"} <= names  # rooted at notebooks/
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
