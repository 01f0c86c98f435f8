"""The solutions the notebooks let a learner reveal (markdown <details> cells) pass the notebooks'
own checkers: a solution that the checker refuses would be worse than none."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import random_gpt2

from picogpt.course import nb03_speculative_sampling as nb03
from picogpt.course import nb04_theorem_1 as nb04
from picogpt.course.nb03_speculative_sampling import check_speculative_loop, check_speculative_step

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def cells(name):
    return json.loads((NOTEBOOKS / name).read_text())["cells"]


def solutions(name):
    """The python blocks of every <details> markdown cell, in order."""
    blocks = []
    for cell in cells(name):
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and "<details>" in text:
            blocks += re.findall(r"```python\n(.*?)```", text, flags=re.S)
    return blocks


def run(blocks, namespace):
    for block in blocks:
        if block.startswith(("def ", "from ", "import ")):  # whole definitions; fragments are handled below
            exec(block, namespace)
    return namespace


def test_notebook_03_solutions_pass():
    blocks = solutions("03-speculative-sampling.ipynb")
    namespace = run(blocks, {"np": np})
    check = check_speculative_step(namespace["speculative_step"])
    assert check, check
    assert nb03.check_tokens_per_loop_simulation(namespace["simulate"])

    # the loop: the notebook's scaffold with the solution's lines in place of `...` and `break`
    scaffold = next("".join(c["source"]) for c in cells("03-speculative-sampling.ipynb")
                    if "def my_speculative_sampling" in "".join(c["source"]))
    fragment = next(b for b in blocks if "target_cache.truncate" in b)
    body = re.sub(r"        \.\.\.  # your code.*\n", fragment, scaffold)
    body = re.sub(r"        break  # remove.*\n", "", body).split("\n\ncheck_speculative_loop(")[0]
    exec("from picogpt.speculative import draft_tokens, score\n" + body, namespace)
    draft, target = random_gpt2(1), random_gpt2(2)
    check = check_speculative_loop(namespace["my_speculative_sampling"], draft, target, [3, 1, 4])
    assert check, check


def test_notebook_04_solutions_pass():
    namespace = run(solutions("04-theorem-1.ipynb"), {"np": np})
    assert nb04.check_residual(namespace["my_residual"])
    assert nb04.check_residual_at_temperature(namespace["residual_at"])


def test_notebook_04_capstone_solution_runs_and_passes_its_check(capsys):
    """The capstone's solution, on small random models and 12 tokens instead of 64 (their context
    is 64): it measures alpha and c, predicts with theory, and runs the measurement."""
    from picogpt import theory
    block = next(b for b in solutions("04-theorem-1.ipynb") if "check_capstone_prediction" in b)
    target = random_gpt2(2, n_layer=24, n_ctx=64)
    namespace = {"np": np, "theory": theory, "check_capstone_prediction": nb04.check_capstone_prediction,
                 "draft": random_gpt2(1, n_ctx=64), "target": target, "ids": [3, 1, 4]}
    exec(block.replace("64", "12"), namespace)
    alpha, c, best_K = namespace["alpha"], namespace["c"], namespace["best_K"]
    assert 0 < alpha <= 1 and c > 0 and best_K == theory.best_K(alpha, c, 16)
    assert sorted(namespace["measurement"].by_K) == sorted({1, best_K})
    assert "✔ right" in capsys.readouterr().out or c >= 1  # a 1-layer draft as slow as a 24-layer step: never seen


def test_notebook_07_solution_passes_and_runs_in_the_tree_loop():
    from picogpt import tree_sampling
    from picogpt.course.nb07_token_trees import check_multi_candidate_step
    step = run(solutions("07-token-trees.ipynb"), {"np": np})["my_accept_among"]
    check = check_multi_candidate_step(step)
    assert check, check
    assert len(tree_sampling(random_gpt2(1), random_gpt2(2), [3, 1], 10, shape=(2, 2), seed=0, verify=step).tokens) == 10


def test_notebook_09_solution_passes():
    from picogpt.course.nb09_traversal_verification import check_traversal
    check = check_traversal(run(solutions("09-traversal-verification.ipynb"), {"np": np})["my_traverse"])
    assert check, check


def test_notebook_08_solution_passes_with_no_drafts_too():
    from picogpt.course.nb08_verify_the_block import check_block_step
    step = run(solutions("08-verify-the-block.ipynb"), {"np": np})["my_block_step"]
    check = check_block_step(step)
    assert check, check


def test_notebook_02_top_k_solution_passes():
    from picogpt.course.nb02_autoregressive_sampling import check_top_k
    assert check_top_k(run(solutions("02-autoregressive-sampling.ipynb"), {"np": np})["my_top_k"])


@pytest.mark.parametrize("name", ["01-gpt2-in-numpy.ipynb", "02-autoregressive-sampling.ipynb",
                                  "03-speculative-sampling.ipynb", "04-theorem-1.ipynb",
                                  "06-beyond-one-draft-model.ipynb", "07-token-trees.ipynb",
                                  "09-traversal-verification.ipynb"])
def test_every_placeholder_exercise_has_a_solution_to_reveal(name):
    texts = ["".join(c["source"]) for c in cells(name)]
    exercises = [i for i, t in enumerate(texts) if "answer = None" in t or "(None" in t]
    for i in exercises:
        following = texts[i + 1] if i + 1 < len(texts) else ""
        assert "<details>" in following, f"{name}: the exercise in cell {i} has no solution after it"
