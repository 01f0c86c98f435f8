"""Session set-up shared by every test file. The repository's development tools (tools/) import
one another by name, as they do when run as scripts: the tests that check them import them so."""

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parent.parent / "tools"))


def pytest_configure(config):
    """Load or compile picogpt's compiled kernels once, before any test (and, under
    pytest-xdist, in the controller before the workers start), so that no test sees numba's
    one-time compile message on stderr or two workers compile at once."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller has done it
        return
    from picogpt.fast import compiled

    compiled.loops()


@pytest.fixture(autouse=True)
def no_hugging_face_cache(monkeypatch, tmp_path_factory):
    """No test sees the Hugging Face cache of the machine it runs on (a GPT-2 there would be
    found and used: io/hf_cache.py); tests/test_hf_cache.py builds its own."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path_factory.getbasetemp() / "no-hugging-face-cache"))
