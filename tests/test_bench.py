"""`python -m picogpt bench` on tiny random models: every figure is there, consistent with the
others, saved as JSON + PNG. No timing is asserted (speed goals live in the benchmark only)."""

import json
import time

import numpy as np
import pytest

from picogpt import theory
from picogpt.bench import run as bench
from picogpt.io.checkpoint import read_header
from picogpt.cli import main
from picogpt.io.params import expected_shapes, hf_config as hf_config_of
from picogpt.model import load_checkpoint

TINY = {"draft": dict(n_layer=1, n_head=2, n_embd=32), "target": dict(n_layer=2, n_head=2, n_embd=64)}
SMALL_RUN = dict(n_runs=2, n_warmup=1, contexts=(8, 16), score_context=8, score_sizes=(2, 3, 5),
                 plain_score_sizes=(2, 5),
                 ceiling_bytes=2_000_000, prompt_tokens=4, speculative_tokens=6, speculative_K=2,
                 with_torch=False, pause_s=0)


def hf_config(n_layer, n_head, n_embd):
    return hf_config_of(n_layer, n_head, n_embd, n_ctx=64, n_vocab=300)


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench-models")
    return {label: bench.random_checkpoint(label, folder / label, hf_config(**shape))
            for label, shape in TINY.items()}


@pytest.fixture(scope="module")
def results(tiny_pair):
    paths = [str(tiny_pair["draft"].parent), str(tiny_pair["target"].parent)]
    return bench.run_bench(paths, pair=("draft", "target"), measured_pair=("draft", "target"),
                           log=lambda text: None, **SMALL_RUN)


def test_random_checkpoint_has_bare_names_and_exact_shapes(tiny_pair):
    entries, _ = read_header(tiny_pair["target"])
    model = load_checkpoint(tiny_pair["target"])
    assert {name: shape for name, (dtype, shape, _, _) in entries.items()} == expected_shapes(model.config)
    assert {dtype for dtype, *_ in entries.values()} == {"F32"}
    assert np.all(model.params["ln_f"]["weight"] == 1) and np.all(model.params["h"][0]["attn"]["c_attn"]["bias"] == 0)
    assert 0.015 < float(model.params["h"][1]["mlp"]["c_fc"]["weight"].std()) < 0.025  # GPT-2's init scale
    again = bench.random_checkpoint("target", tiny_pair["target"].parent)  # made once, then reused
    assert again == tiny_pair["target"] and again.stat().st_mtime_ns == tiny_pair["target"].stat().st_mtime_ns


def test_machine_and_ceiling_are_recorded(results):
    machine = results["machine"]
    assert machine["cpu"] and machine["cores"] >= 1 and machine["threads_used"] >= 1
    assert machine["versions"]["numpy"] == np.__version__ and "name" in machine["blas"]
    ceiling = results["ceiling"]
    assert set(ceiling["ways"]) == {"openblas_gemv", "picogpt_streamed"}
    assert ceiling["gb_per_s"] == max(way["gb_per_s"] for way in ceiling["ways"].values()) > 0
    assert all(len(way["runs_s"]) == SMALL_RUN["n_runs"] for way in ceiling["ways"].values())
    assert len(results["load_average_before"]) == 3 and results["date_utc"]


@pytest.mark.parametrize("label", ["draft", "target"])
def test_each_model_has_ready_decode_and_scoring_figures(results, label):
    m = results["models"][label]
    assert m["source"] == "file" and m["weight_bytes_per_token"] > 0
    ready = m["ready"]
    assert ready["ready_s"] == pytest.approx(ready["load_s"] + ready["prepare_s"])
    assert ready["first_token_s"] >= ready["ready_s"] > 0 and ready["prompt_tokens"] == 4
    assert ready["fast_file"] is None and ready["fast_file_made_s"] is None  # tiny: kept in memory
    assert ready["prepare_in_memory_s"] > 0 and ready["plain_first_token_s"] > ready["plain_ready_s"] > 0
    ceiling = m["ceiling"]  # measured again in the same rounds as this model's decoding
    assert all(len(way["runs_s"]) == 2 * SMALL_RUN["n_runs"] for way in ceiling["ways"].values())
    assert m["floor_s"] == pytest.approx(m["weight_bytes_per_token"] / 1e9 / ceiling["gb_per_s"])
    assert set(m["engines"]) == {"picogpt", "picogpt-plain"}
    for engine in m["engines"].values():
        assert set(engine["decode"]) == {8, 16}
        for decode in engine["decode"].values():
            assert len(decode["runs_s"]) == SMALL_RUN["n_runs"]
            assert decode["median_s"] == pytest.approx(np.median(decode["runs_s"]), rel=1e-4)
            assert decode["gb_per_s"] == pytest.approx(m["weight_bytes_per_token"] / decode["median_s"] / 1e9)
            assert decode["vs_floor"] == pytest.approx(decode["median_s"] / m["floor_s"])
        for decode in engine["decode"].values():  # the first call of each pair, right after the pause
            assert len(decode["after_pause"]["runs_s"]) == SMALL_RUN["n_runs"]
    for name, engine in m["engines"].items():
        assert set(engine["score"]) == ({2, 5} if name == "picogpt-plain" else {2, 3, 5})
        for score in engine["score"].values():
            assert score["after_pause"]["ratio_to_decode"] == pytest.approx(
                score["after_pause"]["median_s"] / engine["decode"][8]["after_pause"]["median_s"])
        for score in engine["score"].values():
            assert score["context"] == 8
            assert score["ratio_to_decode"] == pytest.approx(score["median_s"] / engine["decode"][8]["median_s"])


def test_predicted_speedup_uses_the_measured_costs(results):
    predicted = results["predicted"]
    draft = results["models"]["draft"]["engines"]["picogpt"]
    target = results["models"]["target"]["engines"]["picogpt"]
    assert predicted["t_draft_s"] == draft["decode"][8]["median_s"]
    assert predicted["t_target_s"] == target["decode"][8]["median_s"]
    assert set(predicted["speedup"]) == set(bench.ALPHAS)
    for alpha, by_K in predicted["speedup"].items():
        assert set(by_K) == {1, 2, 4}  # K + 1 in score_sizes
        for K, value in by_K.items():
            expected = (theory.expected_tokens_per_loop(alpha, K) * predicted["t_target_s"]
                        / (K * predicted["t_draft_s"] + target["score"][K + 1]["median_s"]))
            assert value == pytest.approx(expected)


def test_speculative_sampling_is_measured_against_autoregressive(results):
    measured = results["speculative"]
    assert measured["N"] == 6 and measured["K"] == 2
    assert measured["speedup"] == pytest.approx(measured["autoregressive"]["median_s"]
                                                / measured["speculative"]["median_s"])
    assert 0 <= measured["alpha_hat"] <= 1 and 1 <= measured["tokens_per_loop"] <= 3


def test_goals_are_checked_and_results_saved(results, tmp_path):
    goals = {g["goal"]: g for g in results["goals"]}
    assert any("scoring 5 positions" in text for text in goals)
    assert any("bandwidth floor" in text for text in goals)
    assert all(g["met"] == (g["value"] >= g["limit"] if ">=" in g["goal"] and "speedup" in g["goal"]
                            else g["value"] <= g["limit"]) for g in goals.values())
    json_path, png_path = bench.save(results, tmp_path, "bench-test")
    saved = json.loads(json_path.read_text())
    assert saved["models"]["target"]["engines"]["picogpt"]["score"]["5"]["context"] == 8
    assert png_path.stat().st_size > 10_000
    assert bench.markdown(saved) == bench.markdown(results)  # from bench.json too
    text = bench.table(results)
    assert "draft (file)" in text and "target (file)" in text and "K+1 positions: time / decode" in text


def test_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="unknown bench settings: n_rums"):
        bench.settings(n_rums=3)


def test_bench_command_writes_json(tiny_pair, tmp_path, monkeypatch, capsys):
    small = bench.settings

    monkeypatch.setattr(bench, "settings", lambda quick=False, **o: small(quick, **{**SMALL_RUN, **o}))
    paths = [str(path.parent) for path in tiny_pair.values()]
    assert main(["bench", "--models", *paths, "--no-torch", "--json", "--out", str(tmp_path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed["models"]) == {"draft", "target"}
    assert json.loads((tmp_path / "bench.json").read_text())["models"].keys() == printed["models"].keys()
    assert any("predicted speedup needs" in note for note in printed["notes"])  # pair is gpt2/gpt2-xl


def test_contexts_longer_than_a_model_are_skipped_not_an_error(tiny_pair):
    # the teaching pair's n_ctx is 384, below the default context 512: measure what fits
    settings = dict(SMALL_RUN, contexts=(16, 512))
    results = bench.run_bench([str(tiny_pair["draft"].parent)], pair=("draft", "target"), measured_pair=("draft", "target"),
                              log=lambda text: None, **settings)
    decode = next(iter(results["models"].values()))["engines"]["picogpt"]["decode"]
    assert list(decode) == [16]


def test_mapped_models_are_also_measured_with_their_weights_in_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(bench.layout, "CACHE_MIN_BYTES", 0)  # as for GPT-2 small and XL: mapped from files
    paths = [str(bench.random_checkpoint(label, tmp_path / label, hf_config(**shape)).parent)
             for label, shape in TINY.items()]
    results = bench.run_bench(paths, pair=("draft", "target"), measured_pair=None, log=lambda text: None,
                              **{**SMALL_RUN, "with_plain": False})
    for m in results["models"].values():
        assert set(m["engines"]) == {"picogpt", "picogpt-in-memory"}
        assert m["ready"]["fast_file"] and m["ready"]["in_memory_copy_s"] >= m["ready"]["in_memory_ready_s"] > 0
        in_memory = m["engines"]["picogpt-in-memory"]
        assert set(in_memory["decode"]) == {8, 16} and set(in_memory["score"]) == {2, 3, 5}
        for engine in m["engines"].values():
            fraction = engine["huge_page_fraction"]
            assert fraction is None or 0 <= fraction <= 1
        assert set(m["page_cache_after"]) == {m["ready"]["fast_file"], m["path"]}
        assert m["memory_while_timing"] is None or m["memory_while_timing"]["free_gb_before"] > 0
    goals = [g["goal"] for g in results["goals"]]
    assert "target (in memory): decode per token <= 1.25x the bandwidth floor (context 8)" in goals
    assert "target (in memory): decode no slower than transformers (context 16), picogpt / torch" not in goals  # no torch
    assert "target (in_memory='background'): ready <= 2 s" in goals
    in_memory = results["predicted_in_memory"]  # from the in-memory engines' costs
    assert in_memory["engine"] == "picogpt-in-memory" and in_memory["t_target_s"] == (
        results["models"]["target"]["engines"]["picogpt-in-memory"]["decode"][8]["median_s"])
    assert any(g.endswith("(picogpt-in-memory costs)") for g in goals)
    assert "picogpt-in-memory" in bench.table(results) and "weights in 2 MB pages" in bench.markdown(results)


def test_no_in_memory_engine_where_it_would_crowd_out_the_page_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(bench.layout, "CACHE_MIN_BYTES", 0)
    monkeypatch.setattr(bench, "memory_total_gb", lambda: 1.0)
    path = bench.random_checkpoint("target", tmp_path / "target", hf_config(**TINY["target"]))
    results = bench.run_bench([str(path.parent)], pair=("draft", "target"), measured_pair=None,
                              log=lambda text: None, **{**SMALL_RUN, "with_plain": False})
    m = results["models"]["target"]
    assert set(m["engines"]) == {"picogpt"} and "in_memory_copy_s" not in m["ready"]
    assert m["in_memory_skipped"].startswith("target: in-memory engine skipped, it needs")
    assert "in memory skipped" in bench.table(results)


def test_interleaved_times_the_second_call_and_keeps_the_first_apart():
    calls = []

    def run():  # the first call of each pair is the slow one, as after a pause
        calls.append(1)
        time.sleep(0.004 if len(calls) % 2 else 0)

    after_pause = {}
    times = bench.interleaved({"task": (run, lambda: None)}, n_runs=3, n_warmup=1, pause_s=0,
                              after_pause=after_pause)
    assert len(calls) == 8  # (1 warm-up + 3) rounds x 2 calls
    assert len(times["task"]) == len(after_pause["task"]) == 3
    assert min(after_pause["task"]) >= 0.004 > max(times["task"])
    assert len(bench.interleaved({"task": (run, lambda: None)}, 3, 1, 0)["task"]) == 3 and len(calls) == 12
