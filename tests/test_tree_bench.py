"""The bench's tree row: chains and trees measured as the chain rows are (costs inside the loops,
predicted vs measured), kept in bench.json and printed."""

import json

import pytest
from helpers import write_random_checkpoint

from picogpt import bench
from picogpt.bench import report
from picogpt.measure import trees


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tree-bench")
    paths = [str(write_random_checkpoint(folder / name, seed, n_vocab=300, n_ctx=64)) for name, seed in
             (("draft", 1), ("target", 2))]
    return bench.run_bench(paths, pair=("draft", "target"), teaching_pair=None, log=lambda text: None, n_runs=2,
                           contexts=(8,), score_context=8, score_sizes=(2,), plain_score_sizes=(2,),
                           ceiling_bytes=2_000_000, prompt_tokens=4, end_to_end_temperatures=(1.0,),
                           end_to_end_Ks=(2,), end_to_end_N=8, end_to_end_repeats=2, pause_s=0,
                           tree_shapes=((1, 1, 1), (2, 1)))


def test_the_bench_measures_a_chain_and_trees_of_its_settings(results):
    (entry,) = results["trees"]
    m = trees.from_dict(json.loads(report.to_json(results))["trees"][0]["trees"])
    assert entry["pair"] == ["draft", "target"] and list(m.variants) == ["chain K = 3", "tree (2, 1)",
                                                                               "tree (2, 1), traversal"]
    for v in m.variants.values():
        assert v.predicted > 0 and v.t_score.median > 0 and v.speedup_runs.q1 <= v.speedup <= v.speedup_runs.q3
    assert "chains and trees vs autoregressive sampling, draft -> target" in report.table(results)


def test_the_speed_page_renders_the_tree_rows_from_the_bench_results(results):
    import render_docs

    lines = render_docs.speed_trees(json.loads(report.to_json(results)), None)
    rows = [line for line in lines if line.startswith(("| chain K", "| tree ("))]
    assert [row.split(" | ")[0] for row in rows] == ["| chain K = 3", "| tree (2, 1)", "| tree (2, 1), traversal"]
    assert all(row.count("x") >= 2 for row in rows)  # the speedup and its prediction
    assert render_docs.speed_trees({}, None)[0].startswith("The committed results hold no measurement of token trees")
