"""Every shell command in README.md (and in the pages it links to in docs/ and CONTRIBUTING.md)
runs as written, in a fresh shell with the virtual environment active, from the repository's
root: the commands a newcomer copies first.

A command that needs the network, starts a server or runs for many minutes is not run here; it
must match one of NOT_RUN, with the reason and the test that covers it instead, so a new command
in the README is run by default."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCUMENTS = ["README.md", "CONTRIBUTING.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]

NOT_RUN = {  # a command's start -> why it is not run here, and what tests it instead
    "make test": "the test suite itself (CI runs its steps: .ci/run)",
    "make install": "the installation every make target runs first (this test runs inside it)",
    "make lab": "serves until stopped: tests/test_make_lab.py starts it headless and reads the course",
    "make weights": "downloads 7 GB from the hub: tests/test_download.py runs the download against a local mirror",
    "python -m picogpt download": "downloads from the hub: tests/test_download.py runs it against a local mirror",
    "make classroom": "needs the package index: CI runs make classroom-check",
    "conda ": "conda is not part of this machine",
    "git clone": "needs the network",
}


def shell_blocks(text):
    """The README's ```bash blocks, each as a list of commands (comment-only lines dropped)."""
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    return [[line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith("#")]
            for block in blocks]


def why_not_run(command):
    return next((why for start, why in NOT_RUN.items() if command.startswith(start)), None)


def venv_shell_env():
    """A fresh shell's environment with .venv activated (as `source .venv/bin/activate` leaves it),
    without the test session's own PICOGPT_ settings."""
    venv = Path(sys.prefix)
    env = {key: value for key, value in os.environ.items() if not key.startswith("PICOGPT_")}
    env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    return env


BLOCKS = [(document, block) for document in DOCUMENTS for block in shell_blocks((REPO / document).read_text())]


def test_the_readme_has_shell_commands_and_runs_most_of_them():
    commands = [command for document, block in BLOCKS if document == "README.md" for command in block]
    run = [command for command in commands if why_not_run(command) is None]
    assert len(commands) >= 8 and len(run) >= 6, commands


@pytest.mark.parametrize("document, block", BLOCKS, ids=[f"{document}-{i}" for i, (document, _) in enumerate(BLOCKS)])
def test_each_shell_block_runs_as_written(document, block):
    runnable = [command for command in block if why_not_run(command) is None]
    if not runnable:
        pytest.skip("; ".join(f"{command}: {why_not_run(command)}" for command in block))
    if any(".venv/bin/" in command for command in runnable) and not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip(f"{document} uses the repository's .venv (made by make install), and this run has none")
    before = git_status()
    script = "set -euo pipefail\n" + "\n".join(runnable)
    done = subprocess.run(["bash", "-c", script], cwd=REPO, env=venv_shell_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"{script}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr
    assert git_status() == before, f"a command of {document} changed the repository's files"


def git_status():
    done = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None
