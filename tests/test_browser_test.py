"""The browser test's run of a notebook also gets nbval's verdict (`make notebooks`, --nbval-lax):
the cells marked NBVAL_CHECK_OUTPUT must print what they printed when committed. CI runs each
notebook once, in the browser (.ci/run); these tests hold the comparison to nbval's."""

import copy
import json
from pathlib import Path

import nbformat
import pytest
from browser_test import marked_differences

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def outputs_of(path):
    """Every cell's outputs as JupyterLab's model gives them (JSON, texts as one string), None for a markdown cell."""
    cells = json.loads(Path(path).read_text())["cells"]
    return [copy.deepcopy(cell["outputs"]) if cell["cell_type"] == "code" else None for cell in cells]


def marked_cell(path):
    """The index of the first cell marked NBVAL_CHECK_OUTPUT that has a stream output."""
    cells = nbformat.read(str(path), as_version=4).cells
    return next(i for i, cell in enumerate(cells) if "NBVAL_CHECK_OUTPUT" in cell.source
                and any(output.output_type == "stream" for output in cell.outputs))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_a_run_that_prints_what_was_committed_passes(path):
    cells = nbformat.read(str(path), as_version=4).cells
    n_marked = sum("NBVAL_CHECK_OUTPUT" in cell.source and cell.execution_count is not None for cell in cells)
    assert marked_differences(path, outputs_of(path)) == (n_marked, [])


def test_a_marked_cell_that_prints_something_else_fails_and_an_unmarked_one_does_not():
    path = next(path for path in NOTEBOOKS if "NBVAL_CHECK_OUTPUT" in path.read_text())
    index = marked_cell(path)
    changed = outputs_of(path)
    stream = next(output for output in changed[index] if output["output_type"] == "stream")
    stream["text"] = "".join(stream["text"]) + "one line more\n"
    n_compared, differences = marked_differences(path, changed)
    assert [number for number, _ in differences] == [index + 1] and "one line more" in differences[0][1]
    unmarked = outputs_of(path)
    cells = nbformat.read(str(path), as_version=4).cells
    other = next(i for i, cell in enumerate(cells) if cell.cell_type == "code" and cell.outputs
                 and "NBVAL_CHECK_OUTPUT" not in cell.source)
    unmarked[other] = [{"output_type": "stream", "name": "stdout", "text": "anything at all\n"}]
    assert marked_differences(path, unmarked) == (n_compared, [])


def test_a_marked_cell_that_printed_nothing_fails():
    path = next(path for path in NOTEBOOKS if "NBVAL_CHECK_OUTPUT" in path.read_text())
    index = marked_cell(path)
    silent = outputs_of(path)
    silent[index] = []
    assert [number for number, _ in marked_differences(path, silent)[1]] == [index + 1]
