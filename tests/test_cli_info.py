"""`python -m picogpt info MODEL` prints a model's config and size; a bad name is one line, exit 2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import PARITY

from picogpt.cli import main

REPO = Path(__file__).resolve().parent.parent


def test_info_prints_config_parameters_and_bytes(capsys):
    folder = PARITY / "head16"
    hf = json.loads((folder / "config.json").read_text())
    assert main(["info", str(folder)]) == 0
    out = capsys.readouterr().out
    fields = dict(line.split(None, 1) for line in out.splitlines() if line and not line.startswith("ln"))
    assert fields["n_layer"] == str(hf["n_layer"]) and fields["n_head"] == str(hf["n_head"])
    assert fields["n_embd"] == str(hf["n_embd"]) and fields["n_ctx"] == str(hf["n_positions"])
    assert fields["n_vocab"] == str(hf["vocab_size"])
    n, v, c, L = hf["n_embd"], hf["vocab_size"], hf["n_positions"], hf["n_layer"]
    n_params = v * n + c * n + 2 * n + L * (12 * n * n + 13 * n)
    assert fields["parameters"] == f"{n_params:,}"
    assert fields["bytes"].startswith(f"{4 * n_params:,} as float32")
    assert "ln epsilon  1e-05" in out


def test_info_on_a_safetensors_file_path(capsys):
    assert main(["info", str(PARITY / "eps1e-2" / "bare-f16.safetensors")]) == 0
    assert "ln epsilon  0.01" in capsys.readouterr().out


def test_unknown_model_name_is_one_line_and_exit_2():
    result = subprocess.run([sys.executable, "-m", "picogpt", "info", "gpt5-turbo"], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown model 'gpt5-turbo'")
    assert "gpt2-xl" in lines[0]  # it says what the names are


def test_pretrained_name_not_downloaded_says_how_to_get_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PICOGPT_WEIGHTS_DIR", str(tmp_path))
    assert main(["info", "gpt2-xl"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "python -m picogpt download gpt2-xl" in err


def test_corrupt_checkpoint_is_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x00" * 5)
    assert main(["info", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and "too short" in err


# `python -m picogpt info tiny-target`, with Ctrl-C (a KeyboardInterrupt) raised exactly when
# the module named by argv[1] is first imported: the package's dependencies, its own modules,
# the command line, and a module a command imports as it runs
INTERRUPTED_AT_IMPORT = """
import runpy, sys

class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == module:
            raise KeyboardInterrupt

module = sys.argv[1]
sys.meta_path.insert(0, Interrupt())
sys.argv = ["-m", "info", "tiny-target"]  # as `python -m picogpt info tiny-target` starts
runpy._run_module_as_main("picogpt")
"""


@pytest.mark.parametrize("module", ["numpy", "tiktoken", "picogpt.gpt2", "picogpt.model", "picogpt.cli", "argparse",
                                    "picogpt.measure.results"])
def test_ctrl_c_while_the_command_starts_is_one_line(module):
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_AT_IMPORT, module], cwd=REPO, capture_output=True,
                          text=True)
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "interrupted\n")
