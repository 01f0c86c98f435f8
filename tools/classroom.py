"""A room with no internet: build the offline bundle, and check that it installs and runs.

    .venv/bin/python tools/classroom.py build              # classroom/: wheelhouse + notebooks (`make classroom`)
    .venv/bin/python tools/classroom.py check classroom    # install it as a room's machine would, and run it

`build` needs the package index once (on a machine with internet): it collects a wheel of
picogpt-speculative (the teaching pair and GPT-2's tokenizer files are inside it) and of every
dependency of the course into classroom/wheelhouse/, and copies the notebooks beside it. In the
room, with no network at all:

    python3 -m venv .venv
    .venv/bin/pip install --no-index --find-links wheelhouse 'picogpt-speculative[dev]'
    .venv/bin/jupyter lab notebooks/

`--no-index` keeps pip away from the package index, where the name `picogpt` belongs to an
unrelated project. `check` does exactly that in a fresh virtual environment in a temporary
folder outside the repository, then runs the course pair there (course_models() and
speculative_sampling, and the command line's speculate --compare). `--extras ''` builds or
checks the library alone (numpy, tiktoken, tqdm): what CI checks, in seconds.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DISTRIBUTION = "picogpt-speculative"
INSTALL = f"""\
picogpt's course, for a room with no internet.

  python3 -m venv .venv
  .venv/bin/pip install --no-index --find-links wheelhouse '{DISTRIBUTION}[dev]'
  .venv/bin/jupyter lab notebooks/

Python 3.11 or newer, on the same operating system and processor as the machine that built this
folder (the wheels of numpy and numba are made for one platform). notebooks/TEACHING.md plans
the lessons.
"""

# run in the fresh environment, from a folder outside the repository
COURSE_RUN = """\
import picogpt
draft, target = picogpt.course_models()
for model in (draft, target):
    assert "site-packages" in str(model.checkpoint), f"{model.name} was not read from the installed package: {model.checkpoint}"
tok = picogpt.tokenizer()
result = picogpt.speculative_sampling(draft, target, tok.encode("And God said"), N=24, K=4, seed=0)
assert len(result.tokens) == 24
print("course pair from the installed package:", repr(tok.decode(result.tokens)))
"""


def requirement(extras):
    return f"{DISTRIBUTION}[{extras}]" if extras else DISTRIBUTION


def run(*command, **options):
    print("+", " ".join(map(str, command)), flush=True)
    subprocess.run([str(c) for c in command], check=True, **options)


def build(out, extras):
    """out/wheelhouse/ (every wheel the course installs), out/notebooks/, out/INSTALL.txt."""
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    (out / "wheelhouse").mkdir(parents=True)
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", out / "wheelhouse",
        f"{REPO}[{extras}]" if extras else REPO)
    shutil.copytree(REPO / "notebooks", out / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    (out / "INSTALL.txt").write_text(INSTALL)
    size = sum(f.stat().st_size for f in (out / "wheelhouse").iterdir())
    print(f"{out}: {len(list((out / 'wheelhouse').iterdir()))} wheels, {size / 1e6:.0f} MB; see {out / 'INSTALL.txt'}")


def check(bundle, extras):
    """Install the bundle's wheels into a fresh venv with --no-index, then run the course pair
    from a temporary folder, with a home folder of its own (no cache, no weights from here)."""
    wheelhouse = Path(bundle).resolve() / "wheelhouse"
    with tempfile.TemporaryDirectory(prefix="picogpt-classroom-") as tmp:
        tmp = Path(tmp)
        env = {key: value for key, value in os.environ.items() if not key.startswith(("PICOGPT_", "PIP_"))}
        env |= {"HOME": str(tmp / "home"), "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        # the venv without a pip of its own (installing one takes ~10 s on 2 busy cores); this pip
        # installs into it (--python), with --no-index, as the room's own pip would
        run(sys.executable, "-m", "venv", "--without-pip", tmp / "venv")
        python = tmp / "venv" / "bin" / "python"
        run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-index", "--find-links",
            wheelhouse, requirement(extras), env=env, cwd=tmp)
        run(python, "-c", COURSE_RUN, env=env, cwd=tmp)
        run(python, "-m", "picogpt", "speculate", "--prompt", "And God said", "-n", "16", "--seed", "0", "--compare",
            env=env, cwd=tmp)
    print("classroom check passed: installed with --no-index, the course pair ran outside the repository")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["build", "check"])
    parser.add_argument("bundle", nargs="?", default=str(REPO / "classroom"), help="the bundle's folder (default classroom/)")
    parser.add_argument("--extras", default="dev", help="the extras to bundle or install (default dev; '' for the library alone)")
    args = parser.parse_args(argv)
    (build if args.action == "build" else check)(args.bundle, args.extras)


if __name__ == "__main__":
    main()
