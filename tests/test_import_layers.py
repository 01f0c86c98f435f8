"""The teaching core imports only NumPy: the forward pass, the KV cache, sampling, the rejection
step, the speculative loop and the theory never reach the fast path, the bench, the course
helpers, the downloads or the command line — directly or through another module."""

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "picogpt"
CORE = ("gpt2", "kv_cache", "sampling", "rejection", "speculative", "theory", "tree")
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
