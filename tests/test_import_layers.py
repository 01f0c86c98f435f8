"""The layers of docs/architecture.md hold: every module of the package sits in one layer of its
table, no import runs upward (a module imports only its own layer and the layers below), no
imports go round in a circle, and the teaching core imports only NumPy: the forward pass, the KV
cache, sampling, the rejection step, the speculative loop and the theory never reach the fast
path, the bench, the course helpers, the downloads or the command line — directly or through
another module. Imports inside functions count: they run as surely as the others, only later."""

import ast
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "picogpt"
ARCHITECTURE = REPO / "docs" / "architecture.md"
CORE = ("gpt2", "kv_cache", "sampling", "rejection", "loop", "speculative", "theory", "tree")
FORBIDDEN = ("fast", "measure", "bench", "course", "io", "cli", "model")  # picogpt.<these> and below
ALLOWED_OUTSIDE = {"numpy"}  # besides Python's standard library


def module_path(package, dotted):
    """picogpt.a.b -> package/a/b.py or package/a/b/__init__.py (None if not a file of ours)."""
    parts = dotted.split(".")[1:]
    for candidate in (package.joinpath(*parts).with_suffix(".py"), package.joinpath(*parts, "__init__.py")):
        if parts and candidate.is_file():
            return candidate
    return package / "__init__.py" if not parts else None


def imports_of(path, dotted, package_name="picogpt"):
    """The absolute module names a source file imports (relative imports resolved)."""
    is_package = path.name == "__init__.py"
    here = dotted.split(".") if is_package else dotted.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            if module != package_name:  # `from . import x` imports picogpt.x, listed below
                found.add(module)
            if module.startswith(package_name):
                found.update(f"{module}.{alias.name}" for alias in node.names)  # maybe a module
    return found


def reachable(package, start, package_name="picogpt"):
    """Every module reachable by imports from picogpt.<start>, with one import chain each."""
    seen, todo = {f"{package_name}.{start}": [f"{package_name}.{start}"]}, [f"{package_name}.{start}"]
    while todo:
        dotted = todo.pop()
        path = module_path(package, dotted)
        if path is None:
            continue
        for imported in imports_of(path, dotted, package_name):
            if imported.startswith(package_name + ".") and module_path(package, imported) is None:
                continue  # `from .x import name` also lists picogpt.x.name: not a module
            if imported not in seen:
                seen[imported] = seen[dotted] + [imported]
                if imported.startswith(package_name + ".") or imported == package_name:
                    todo.append(imported)
    return seen


def violations(package, start, package_name="picogpt"):
    """Import chains from picogpt.<start> to a forbidden module or a third-party package."""
    bad = []
    for module, chain in reachable(package, start, package_name).items():
        top = module.split(".")[0]
        ours = module.startswith(package_name + ".")
        if ours and module.split(".")[1] in FORBIDDEN or module == package_name:
            bad.append(" -> ".join(chain))
        elif not ours and top not in ALLOWED_OUTSIDE and top not in sys.stdlib_module_names:
            bad.append(" -> ".join(chain))
    return bad


@pytest.mark.parametrize("module", CORE)
def test_the_teaching_core_imports_only_numpy(module):
    assert violations(PACKAGE, module) == []


def test_the_rule_catches_a_forward_pass_that_imports_the_fast_path_again(tmp_path):
    package = tmp_path / "picogpt"
    (package / "fast").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "fast" / "__init__.py").write_text("")
    (package / "fast" / "kernels.py").write_text("import numpy as np\n")
    (package / "errors.py").write_text("")
    (package / "gpt2.py").write_text("import numpy as np\nfrom .errors import X\n")
    assert violations(package, "gpt2") == []
    (package / "gpt2.py").write_text("import numpy as np\nfrom .fast import kernels\n")
    assert "picogpt.gpt2 -> picogpt.fast" in violations(package, "gpt2")
    (package / "gpt2.py").write_text("from .errors import X\n")  # through another module
    (package / "errors.py").write_text("from .fast.kernels import matmul\n")
    assert "picogpt.gpt2 -> picogpt.errors -> picogpt.fast.kernels" in violations(package, "gpt2")
    (package / "errors.py").write_text("import torch\n")  # a third-party package
    assert violations(package, "gpt2") == ["picogpt.gpt2 -> picogpt.errors -> torch"]



# ---------------------------------------------------------------------------------------------
# Every layer: the table of docs/architecture.md, read as the rule
# ---------------------------------------------------------------------------------------------

def layer_table(text):
    """[(layer, [files and folders/])] of the text block under '## The layers', top layer first.
    A row is 'layer  files  what it holds', columns two or more spaces apart; a row that starts
    with spaces continues the files of the row above."""
    block = text.split("## The layers", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    layers = []
    for line in block.splitlines():
        if line.startswith(" "):
            files = re.split(r"\s{2,}", line.strip())[0]
        else:
            name, files = re.split(r"\s{2,}", line.strip())[:2]
            layers.append((name, []))
        layers[-1][1].extend(name for name in (f.strip() for f in files.split(",")) if name)
    return layers


def modules_of(package):
    """{dotted name: path} of every module of the package (a folder's __init__.py is the folder)."""
    found = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def layer_of(dotted, layers, package_name="picogpt"):
    """The index of the layer (0 = top) that holds module picogpt.<...>, or None."""
    relative = dotted.split(".")[1:]
    for index, (_, files) in enumerate(layers):
        for entry in files:
            if entry.endswith("/") and relative[:1] == [entry.rstrip("/")]:
                return index
            if entry.endswith(".py") and relative == entry[:-3].split("/"):
                return index
            if entry == "__init__.py" and not relative:
                return index
    return None


def import_graph(package, package_name="picogpt"):
    """{module: {modules of the package it imports}}, each import resolved to the module that holds it."""
    modules = modules_of(package)
    graph = {}
    for dotted, path in modules.items():
        graph[dotted] = set()
        for imported in imports_of(path, dotted, package_name):
            parts = imported.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()  # `from .x import name`: the module is picogpt.x
            if parts and ".".join(parts) != dotted:
                graph[dotted].add(".".join(parts))
    return graph


def upward_imports(package, layers, package_name="picogpt"):
    """['a (layer) imports b (layer above)'] for every import that runs upward, and every module
    in no layer."""
    graph = import_graph(package, package_name)
    where = {module: layer_of(module, layers, package_name) for module in graph}
    found = [f"{module} is in no layer of the table" for module, index in where.items() if index is None]
    for module, imported in graph.items():
        for other in sorted(imported):
            if None not in (where[module], where[other]) and where[other] < where[module]:
                found.append(f"{module} ({layers[where[module]][0]}) imports {other} ({layers[where[other]][0]})")
    return found


def cycles(package, package_name="picogpt"):
    """Every import cycle among the package's modules, each as 'a -> b -> a' (depth-first search)."""
    graph = import_graph(package, package_name)
    found, state, path = [], {}, []

    def visit(module):
        state[module] = "open"
        path.append(module)
        for other in sorted(graph[module]):
            if state.get(other) == "open":
                found.append(" -> ".join(path[path.index(other):] + [other]))
            elif other not in state:
                visit(other)
        path.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return found


def test_the_table_names_every_layer_of_the_package():
    layers = layer_table(ARCHITECTURE.read_text())
    assert [name for name, _ in layers][-1] == "teaching core" and len(layers) >= 8
    teaching_core = {name[:-3] for name in layers[-1][1]}
    assert set(CORE) <= teaching_core  # the NumPy-only rule below is about the same modules


def test_every_module_sits_in_a_layer_and_imports_only_its_own_and_those_below():
    assert upward_imports(PACKAGE, layer_table(ARCHITECTURE.read_text())) == []


def test_no_imports_go_round_in_a_circle():
    assert cycles(PACKAGE) == []


def test_the_layer_rules_catch_an_upward_import_a_module_in_no_layer_and_a_cycle(tmp_path):
    package = tmp_path / "picogpt"
    (package / "io").mkdir(parents=True)
    table = ("## The layers\n\n```text\ncommands   cli.py    the command line\nloading    io/       files\n"
             "core       gpt2.py,  the forward pass\n           errors.py\n```\n")
    layers = layer_table(table)
    assert layers == [("commands", ["cli.py"]), ("loading", ["io/"]), ("core", ["gpt2.py", "errors.py"])]
    files = {"__init__.py": "", "cli.py": "from .io import files\n", "io/__init__.py": "",
             "io/files.py": "from ..gpt2 import GPT2Config\n", "gpt2.py": "from .errors import E\n", "errors.py": ""}
    for name, text in files.items():
        (package / name).write_text(text)
    layers = [("top", ["__init__.py"]), *layers]
    assert upward_imports(package, layers) == [] and cycles(package) == []
    (package / "gpt2.py").write_text("from .io.files import read\n")  # the core reaching up to loading
    assert upward_imports(package, layers) == ["picogpt.gpt2 (core) imports picogpt.io.files (loading)"]
    assert cycles(package) == ["picogpt.io.files -> picogpt.gpt2 -> picogpt.io.files"]
    (package / "new.py").write_text("")
    assert "picogpt.new is in no layer of the table" in upward_imports(package, layers)


# ---------------------------------------------------------------------------------------------
# The course's rule: one module per notebook, a few shared ones, no sideways import
# ---------------------------------------------------------------------------------------------

NOTEBOOK_MODULE = re.compile(r"picogpt\.course\.nb(\d\d)_\w+")


def course_rule_breaks(package, package_name="picogpt"):
    """['a imports b'] for every import of a notebook's module (course/nbNN_<name>.py) from anywhere
    but itself: a shared module, another notebook's module, or a layer outside the course."""
    graph = import_graph(package, package_name)
    return [f"{module} imports {other}" for module, imported in sorted(graph.items()) for other in sorted(imported)
            if NOTEBOOK_MODULE.fullmatch(other) and module != other]


def test_no_module_imports_a_notebooks_module():
    """What only notebook NN uses lives in course/nbNN_<name>.py; a shared course module, another
    notebook's module or the command line importing it would make it a second notebook's too."""
    assert course_rule_breaks(PACKAGE) == []
    notebooks = {match.group(1) for match in map(NOTEBOOK_MODULE.fullmatch, modules_of(PACKAGE)) if match}
    named = {path.name[:2] for path in (REPO / "notebooks").glob("[0-9][0-9]-*.ipynb")}
    assert notebooks and notebooks <= named  # each names a notebook that exists


def test_every_course_file_has_its_row_in_the_architecture():
    text = ARCHITECTURE.read_text()
    for path in sorted((PACKAGE / "course").glob("*.py")):
        if path.name != "__init__.py":
            assert f"| `picogpt/course/{path.name}` |" in text, path.name


def test_the_course_rule_catches_a_shared_module_or_a_notebook_importing_a_notebooks_module(tmp_path):
    course = tmp_path / "picogpt" / "course"
    course.mkdir(parents=True)
    files = {"../__init__.py": "", "__init__.py": "", "grading.py": "", "nb03_step.py": "from .grading import Check\n",
             "nb08_block.py": "from .grading import Check\n"}
    for name, text in files.items():
        (course / name).write_text(text)
    assert course_rule_breaks(tmp_path / "picogpt") == []
    (course / "nb08_block.py").write_text("from .nb03_step import check\n")  # sideways
    (course / "grading.py").write_text("from . import nb08_block\n")  # a shared module reaching into a notebook's
    assert course_rule_breaks(tmp_path / "picogpt") == ["picogpt.course.grading imports picogpt.course.nb08_block",
                                                        "picogpt.course.nb08_block imports picogpt.course.nb03_step"]
