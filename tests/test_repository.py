"""The repository keeps its promises: README's file map lists every module (and only modules
that exist), README's example runs, `make test-oldest` tests the floors pyproject.toml declares,
and no committed file names a folder of one machine."""

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"


def readme_section(title):
    """The text of README's `## title` section, up to the next `## ` heading."""
    text = README.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def file_map():
    """Every path in the first column of README's "Where to find things" table."""
    rows = re.findall(r"^\| `([^`]+)` \|", readme_section("Where to find things"), re.MULTILINE)
    return set(rows)


def modules():
    return sorted(p.relative_to(REPO).as_posix() for p in (REPO / "picogpt").rglob("*.py"))


def test_every_module_is_in_the_readme_file_map():
    listed = file_map()
    # a package's __init__.py is listed by its folder's row (`picogpt/io/`), except the
    # top-level one, which is the public API
    missing = [m for m in modules()
               if m not in listed and not (m.endswith("/__init__.py") and m != "picogpt/__init__.py"
                                           and m[: -len("__init__.py")] in listed)]
    assert not missing, f"add a row for each of these to README.md's 'Where to find things': {missing}"


def test_the_readme_file_map_names_only_files_that_exist():
    stale = sorted(path for path in file_map() if not (REPO / path).exists())
    assert not stale, f"README.md's 'Where to find things' names files that do not exist: {stale}"


def test_every_picogpt_path_in_the_readme_exists():
    paths = set(re.findall(r"\bpicogpt/[\w/]+\.py\b", README.read_text()))
    assert paths, "README.md names no module: did the pattern break?"
    stale = sorted(path for path in paths if not (REPO / path).exists())
    assert not stale, f"README.md names modules that do not exist: {stale}"


def test_the_readme_library_example_runs(monkeypatch, capsys):
    block = re.search(r"```python\n(.*?)```", readme_section("The library in ten lines"), re.DOTALL)
    monkeypatch.setenv("PICOGPT_COURSE_MODELS", "tiny")
    exec(compile(block.group(1), "README.md", "exec"), {})
    assert capsys.readouterr().out.strip()  # it printed the sampled text


def same_version(a, b):
    """1.26 == 1.26.0: compare release numbers without trailing zeros."""
    def release(version):
        parts = [int(part) for part in version.split(".")]
        while parts and parts[-1] == 0:
            parts.pop()
        return parts
    return release(a) == release(b)


def test_constraints_oldest_pins_every_floor_of_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    floors = {}
    for requirement in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        name, _, version = requirement.partition(">=")
        assert version, f"{requirement}: give every runtime and dev dependency a floor (name>=version)"
        floors[name.strip().lower()] = version.strip()
    pins = dict(line.split("==") for line in (REPO / "constraints-oldest.txt").read_text().splitlines()
                if line.strip() and not line.startswith("#"))
    pins = {name.strip().lower(): version.strip() for name, version in pins.items()}
    assert set(pins) == set(floors), "constraints-oldest.txt must pin exactly pyproject.toml's dependencies"
    for name, floor in floors.items():
        assert same_version(pins[name], floor), \
            f"{name}: pyproject.toml says >={floor}, constraints-oldest.txt pins {pins[name]}"


# ---------------------------------------------------------------------------------------------
# The basics every open-source project ships: a licence in the wheel, a citation, a changelog,
# one version, and a first command that explains itself even outside the virtual environment
# ---------------------------------------------------------------------------------------------

def test_the_version_is_written_once_and_every_way_of_asking_says_it():
    import picogpt

    version = picogpt.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "picogpt.__version__"}
    done = subprocess.run([sys.executable, "-m", "picogpt", "--version"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == f"picogpt {version}"
    assert f"\n## {version}\n" in (REPO / "CHANGELOG.md").read_text()


def test_the_licence_is_mit_and_ships_in_the_wheel():
    licence = (REPO / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "Copyright (c) the picogpt authors" in licence
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]


def test_the_citation_names_picogpt_and_the_papers_it_implements():
    citation = (REPO / "CITATION.cff").read_text()
    assert citation.startswith("cff-version: 1.2.0") and 'title: "picogpt' in citation
    for arxiv in ("2302.01318", "2211.17192"):  # Chen et al. 2023; Leviathan et al. 2023
        assert f'value: "arXiv:{arxiv}"' in citation and f"doi: 10.48550/arXiv.{arxiv}" in citation


def test_python_m_picogpt_without_the_dependencies_says_what_to_run_in_one_line():
    # -S: no site-packages, so this Python has none of picogpt's dependencies
    done = subprocess.run([sys.executable, "-S", "-m", "picogpt", "info", "tiny-target"], cwd=REPO,
                          capture_output=True, text=True)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and done.stdout == "" and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: {sys.executable} (Python ") and "has no module 'numpy'" in lines[0]
    assert "make install" in lines[0] and ".venv/bin/python -m picogpt" in lines[0]


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("git") is None, reason="needs make and git")
def test_make_clean_leaves_the_clone_as_cloned_but_for_downloaded_weights(tmp_path):
    for name in ("Makefile", ".gitignore"):
        shutil.copy(REPO / name, tmp_path / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "clone"], cwd=tmp_path, check=True)
    made = [".venv/bin/python", ".venv-oldest/bin/python", "build/bench/bench.json", "browser-test-out/01.png",
            "classroom/wheelhouse/numpy.whl", "picogpt_speculative.egg-info/PKG-INFO", ".pytest_cache/v/x",
            "picogpt/__pycache__/model.cpython-311.pyc", "picogpt/fast/__pycache__/compiled.rows-1.nbi",
            "notebooks/.ipynb_checkpoints/01-checkpoint.ipynb", "weights/random-gpt2/model.safetensors",
            "weights/random-gpt2-xl/config.json", "weights/kernel-bench/model.safetensors"]
    kept = ["weights/gpt2/model.safetensors", "weights/gpt2-xl/model.safetensors.part"]
    for name in made + kept:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    done = subprocess.run(["make", "-s", "clean"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    status = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout
    assert sorted(line[3:] for line in status.splitlines()) == sorted(kept)
    assert "kept: downloaded GPT-2 weights in weights/gpt2*/" in done.stdout


# ---------------------------------------------------------------------------------------------
# No machine paths: a committed file must not name a folder that only exists on one machine
# ---------------------------------------------------------------------------------------------

# An absolute path starting at one of these folders (not preceded by a name character, so
# `build/tmp/` or `https://host/home/` do not count), or any Python installation's packages.
MACHINE_PATH = re.compile(
    r"(?<![\w.~/-])/(?:work|root|home|tmp|Users|mnt|scratch|private/var|var/folders|opt/conda)/"
    r"|[\w.-]*site-packages/|[\w.-]*dist-packages/|/[\w.-]+/\.?venv/|[A-Za-z]:\\\\?Users\\")


def machine_paths(text):
    """[(line number, line)] of each line of `text` that names a machine path."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if MACHINE_PATH.search(line)]


def test_the_pattern_finds_machine_paths_and_spares_the_others():
    root = "/"  # the examples are spelled root + "work/..." so that this file names no machine path itself
    for line in [f'"path": "{root}work/main/weights/gpt2/model.safetensors"', f"corpus {root}tmp/pt48/kjv.txt",
                 f"PYTHONPATH=$PWD {root}opt/conda/bin/python", f"{root}home/ada/picogpt/.venv/bin/python x.py",
                 "File \"/usr/lib/python3/site-packages/numpy/core.py\"", r"C:\Users\ada\picogpt"]:
        assert machine_paths(line), line
    for line in [".venv/bin/python tools/page_sizes.py", "weights/random-gpt2/model.safetensors",
                 "/proc/self/smaps", "#!/usr/bin/env python3", "https://huggingface.co/openai-community/gpt2",
                 "build/tmp/x", "~/picogpt/notes"]:
        assert not machine_paths(line), line


def committed_text_files():
    """{path: text} of every file git tracks that is text; for notebooks, the cells' sources
    (outputs are what a run printed, re-made on each execution)."""
    try:
        names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = {}
    for name in names.decode().split("\0"):
        path = REPO / name
        if not name or not path.is_file() or path == Path(__file__):  # this file: the pattern and its examples
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary: weights, images
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if name.endswith(".ipynb"):
            text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
        files[name] = text
    return files


def test_no_committed_file_names_a_machine_path():
    files = committed_text_files()
    assert "README.md" in files and "pyproject.toml" in files
    found = [f"{name}:{n}: {line[:120]}" for name, text in files.items() for n, line in machine_paths(text)]
    assert not found, ("paths of one machine in committed files; write them relative to the "
                       "repository:\n" + "\n".join(found))


# ---------------------------------------------------------------------------------------------
# No history: code and user docs say what is true now; dates, issue numbers and the story of
# earlier runs live in git (a reader cannot place them, and each is a line to keep up to date)
# ---------------------------------------------------------------------------------------------

HISTORY = {
    "a date": r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b",
    "a UTC timestamp": r"\b\d{1,2}:\d\d(?::\d\d)?\s?UTC\b",
    "an issue number": r"\bissues?\s*#?\d+\b|\b(?:PR|pull request)\s*#?\d+\b|(?<![\w&#/])#\d+\b",
    "the issue": r"\bthe issue(?:'s)?\b",
    "a run-history phrase": (r"\bruns? before\b|\bprevious (?:code|runs?|measurements?|versions?|sessions?)\b"
                             r"|\ban hour (?:apart|before|earlier|later)\b|\bearlier runs?\b|\bthis session\b"
                             r"|\bnew in this (?:run|version)\b|\bthe committed run\b|\bsame code(?:'s)? (?:run|ran)\b"
                             r"|\b(?:in|of) (?:both|the two|two) runs\b|\bruns? of (?:the same|this) code\b"),
    "one machine's words": r"\bthis project's (?:[\w-]+ )*?machine\b|\bthis \d+-core machine\b",
}
HISTORY_PATTERN = re.compile("|".join(f"(?P<g{i}>{p})" for i, p in enumerate(HISTORY.values())), re.IGNORECASE)


def history(text):
    """[(line number, what, the words)] of each line of `text` that quotes history."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for match in HISTORY_PATTERN.finditer(line):
            what = list(HISTORY)[int(match.lastgroup[1:])]
            found.append((n, what, match.group()))
    return found


def test_the_history_pattern_finds_dates_issues_and_run_history_and_spares_the_rest():
    for line in ["bench: run of 2026-11-24 23:27 UTC", "measured at 02:33 UTC", "(issue 13, 'Goals')",
                 "see issue #15", "fixed in #13", "PR 7 made it faster", "the issue's 2.5x",
                 "the run before, same code (22:49 UTC)", "previous code 1.21x", "XL's decode moved 10% an hour apart",
                 "new in this run", "in this session", "two runs of the same code", "in both runs",
                 "on this project's virtual machine", "35-55 min on this 2-core machine"]:
        assert history(line), line
    for line in ["a loop of this run accepted all K drafts", "the run's wall time", "results-one-row.json",
                 "date_utc = datetime.now(timezone.utc)", "## 2. The draft", "x[:, 0] # 1 row", "&#8203;",
                 "Chen et al. 2023, arXiv 2302.01318", "1.2x at 5 rows; 10:1 odds", "git keeps the history",
                 "https://github.com/openai/gpt-2/issues/13", "color='#1f77b4'", "the same code paths",
                 "What this machine can do, measured", "on a fresh clone, on a 2-core machine:"]:
        assert not history(line), line


def user_facing_texts():
    """{path: text} of what users and learners read: the package's and tools' files, README.md,
    the results documents, goals.json, and the notebooks' markdown cells."""
    files = committed_text_files()
    docs = {"README.md", "benchmarks/README.md", "benchmarks/kernels/README.md", "weights/README.md",
            "benchmarks/goals.json"}
    chosen = {name: text for name, text in files.items()
              if name in docs or (name.startswith(("picogpt/", "tools/")) and not name.startswith("picogpt/io/data/"))}
    for name in files:
        if name.startswith("notebooks/") and name.endswith(".ipynb"):
            cells = json.loads((REPO / name).read_text())["cells"]
            chosen[name] = "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")
    return chosen


def test_code_and_user_docs_quote_no_dates_issue_numbers_or_run_history():
    texts = user_facing_texts()
    assert {"README.md", "benchmarks/README.md", "picogpt/speculative.py"} <= set(texts)
    assert any(name.startswith("notebooks/") for name in texts) and any(name.startswith("tools/") for name in texts)
    found = [f"{name}:{n}: {what}: {words!r}" for name, text in sorted(texts.items()) for n, what, words in history(text)]
    assert not found, ("history in code or user docs: say what is true now (git keeps the history; figures come "
                       "from the results JSON through picogpt/tools/render_docs.py):\n" + "\n".join(found))
