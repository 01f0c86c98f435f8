"""`python -m picogpt bench` on tiny random models: every figure is there, saved through the real
writer (report.save) and read back through the real reader (results.bench_measurements, what
notebook 05 reads); the results documents are rendered from the JSON (tools/render_docs.py), and the bench
changes no committed file unless told to save. No timing is asserted (speed goals live in the
benchmark only)."""

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import goals
import numpy as np
import pytest
import render_docs as docs
from goals import goal_line
from hypothesis import example, given
from hypothesis import strategies as st

from picogpt.bench import checkpoints, report
from picogpt.bench import run as bench
from picogpt.cli import main
from picogpt.errors import PicoGPTError
from picogpt.io.checkpoint import read_header
from picogpt.io.params import expected_shapes
from picogpt.io.params import hf_config as hf_config_of
from picogpt.measure import machine, speedup
from picogpt.measure import results as stored
from picogpt.model import load_checkpoint

TINY = {"draft": dict(n_layer=1, n_head=2, n_embd=32), "target": dict(n_layer=2, n_head=2, n_embd=64)}
SMALL_RUN = dict(n_runs=2, n_warmup=1, contexts=(8, 16), score_context=8, score_sizes=(2, 3, 5),
                 plain_score_sizes=(2, 5), ceiling_bytes=2_000_000, prompt_tokens=4,
                 end_to_end_temperatures=(1.0, 3.0), end_to_end_Ks=(1, 2, 4), end_to_end_N=8, end_to_end_repeats=2,
                 pause_s=0)


def hf_config(n_layer, n_head, n_embd):
    return hf_config_of(n_layer, n_head, n_embd, n_ctx=64, n_vocab=300)


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench-models")
    return {label: checkpoints.random_checkpoint(label, folder / label, hf_config(**shape))
            for label, shape in TINY.items()}


@pytest.fixture(scope="module")
def results(tiny_pair):
    paths = [str(tiny_pair["draft"].parent), str(tiny_pair["target"].parent)]
    return bench.run_bench(paths, pair=("draft", "target"), teaching_pair=None, log=lambda text: None, **SMALL_RUN)


@pytest.fixture(scope="module")
def saved(results, tmp_path_factory):
    """bench.json and bench.png as report.save writes them, and the JSON read back."""
    json_path, png_path = report.save(results, tmp_path_factory.mktemp("bench-out"), "bench")
    return json_path, png_path, json.loads(json_path.read_text())


def test_random_checkpoint_has_bare_names_and_exact_shapes(tiny_pair):
    entries, _ = read_header(tiny_pair["target"])
    model = load_checkpoint(tiny_pair["target"])
    assert {name: shape for name, (dtype, shape, _, _) in entries.items()} == expected_shapes(model.config)
    assert {dtype for dtype, *_ in entries.values()} == {"F32"}
    assert np.all(model.params["ln_f"]["weight"] == 1) and np.all(model.params["h"][0]["attn"]["c_attn"]["bias"] == 0)
    assert 0.015 < float(model.params["h"][1]["mlp"]["c_fc"]["weight"].std()) < 0.025  # GPT-2's init scale
    again = checkpoints.random_checkpoint("target", tiny_pair["target"].parent)  # made once, then reused
    assert again == tiny_pair["target"] and again.stat().st_mtime_ns == tiny_pair["target"].stat().st_mtime_ns


def test_machine_and_ceiling_are_recorded(saved):
    _, _, data = saved
    recorded = data["machine"]
    assert recorded["cpu"] and recorded["cores"] >= 1 and recorded["threads_used"] >= 1
    assert recorded["versions"]["numpy"] == np.__version__ and "name" in recorded["blas"]
    ceiling = data["ceiling"]
    assert set(ceiling["ways"]) == {"openblas_gemv", "picogpt_one_row"}
    assert ceiling["gb_per_s"] == ceiling["ways"]["openblas_gemv"]["gb_per_s"]  # machine.gemv_pass
    assert all(len(way["runs_s"]) == SMALL_RUN["n_runs"] for way in ceiling["ways"].values())
    assert len(data["load_average_before"]) == 3 and data["date_utc"]


def test_the_ceiling_reads_the_bytes_of_the_bandwidth_measurement():
    matrices, x = machine.bandwidth_matrices(2_000_000)
    assert all(m.shape[1] == 1600 and m.dtype == np.float32 for m in matrices)
    assert abs(sum(m.nbytes for m in matrices) - 2_000_000) <= matrices[0].nbytes / 2
    products = machine.gemv_pass(matrices, x)
    assert [p.shape for p in products] == [(m.shape[0],) for m in matrices]
    assert np.allclose(products[0], 0.5 * 1600)


@pytest.mark.parametrize("label", ["draft", "target"])
def test_each_model_has_ready_decode_and_scoring_figures(saved, tiny_pair, label):
    _, _, data = saved
    m = data["models"][label]
    assert m["source"] == "file"
    assert m["weight_bytes_per_token"] == load_checkpoint(tiny_pair[label]).bytes_per_token
    ready = m["ready"]
    assert ready["ready_s"] == pytest.approx(ready["load_s"] + ready["prepare_s"])
    assert ready["prompt_tokens"] == 4
    assert ready["written_beside_checkpoint"] == {} and ready["bytes_written_beside_checkpoint"] == 0
    ceiling = m["ceiling"]  # measured again in the same rounds as this model's decoding, per context
    assert all(len(way["runs_s"]) == 2 * SMALL_RUN["n_runs"] for way in ceiling["ways"].values())
    assert set(m["engines"]) == {"picogpt", "picogpt-plain"}
    for engine in m["engines"].values():
        assert set(engine["decode"]) == {"8", "16"}
        for decode in engine["decode"].values():
            assert len(decode["runs_s"]) == len(decode["after_pause"]["runs_s"]) == SMALL_RUN["n_runs"]
    for name, engine in m["engines"].items():
        assert set(engine["score"]) == ({"2", "5"} if name == "picogpt-plain" else {"2", "3", "5"})
        assert {score["context"] for score in engine["score"].values()} == {8}


def test_speculative_section_reads_back_as_notebook_05_reads_it(results, saved):
    json_path, _, _ = saved
    found, note = stored.bench_measurements(json_path)
    assert "measured" in note and results["date_utc"] in note
    assert [m.controls["temperature"] for m, _ in found] == [1.0, 3.0]
    for (m, source), entry in zip(found, results["speculative"]):
        assert source == {"draft": "as given", "target": "as given"}
        assert (m.draft, m.target, m.N, m.repeats, m.Ks) == ("draft", "target", 8, 2, [1, 2, 4])
        assert speedup.as_dict(m) == entry["measurement"]  # JSON round trip loses nothing
        assert len(m.load_average_before) == 3


def test_goals_come_from_the_goals_file(results, tmp_path):
    path = tmp_path / "goals.json"
    path.write_text(json.dumps({"alpha_within": 1.0, "goals": [
        {"goal": "speedup", "metric": "speedup", "params": {"alpha": 0.5, "K": 2}, "at_least": 1e9},
        {"goal": "bytes", "metric": "bytes_beside_checkpoint", "params": {"model": "target"}, "at_most": 0},
        {"goal": "teaching", "metric": "best_speedup", "params": {"pair": "teaching"}, "at_least": 2.0},
        {"goal": "best K", "metric": "best_speedup_at_alpha", "params": {"alpha": 0.0}, "at_least": 1.0},
        {"goal": "c", "metric": "in_loop_cost_ratio", "params": {"alpha": 0.0}, "at_most": 1.0},
        {"goal": "not by the bench", "metric": None, "at_most": 1.6, "measured_by": "tools/x.py"}]}))
    scored = {g["goal"]: g for g in goals.score_goals(results, path)}
    lowest = min((speedup.from_dict(e["measurement"]) for e in results["speculative"]), key=lambda m: m.alpha_hat)
    assert scored["best K"]["value"] == max(at.speedup for at in lowest.by_K.values())
    assert scored["c"]["value"] == lowest.t_draft_s / lowest.t_target_s
    assert scored["speedup"]["met"] is False and scored["speedup"]["direction"] == "at_least"
    assert scored["bytes"] == {"goal": "bytes", "value": 0, "limit": 0, "direction": "at_most", "stretch": None,
                               "unit": "", "met": True, "measured_by": None, "unmeasured": None}
    assert scored["teaching"]["value"] is None and scored["teaching"]["met"] is None  # teaching_pair=None
    assert scored["not by the bench"]["met"] is None
    assert goal_line(scored["not by the bench"]) == (
        "goal not measured in this run: not by the bench (goal: at most 1.60; tools/x.py measures it)")
    assert goal_line(scored["speedup"]).startswith("goal missed: speedup: ")


@given(st.floats(0.01, 3.0), st.floats(0.5, 2.0))
@example(0.45, 1.15)
@example(1.0, 1.10)
def test_a_decode_below_its_floor_is_never_a_goal_met(vs_floor, limit):
    """A decode's time in floors under 1 means the bandwidth moved between the ceiling's measurement
    and the decode's: the goal is not judged (no "met"), and the line says why."""
    bench = {"pairs": {"main": ["gpt2", "gpt2-xl"]},
             "models": {"gpt2-xl": {"engines": {"picogpt": {"decode": {"128": {"vs_floor": vs_floor}}}}}}}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "goals.json"
        path.write_text(json.dumps({"goals": [{"goal": "XL", "metric": "decode_vs_floor",
                                               "params": {"model": "target"}, "at_most": limit, "unit": "x"}]}))
        g, = goals.score_goals(bench, path)
    line = goal_line(g)
    if vs_floor < 1:
        assert g["met"] is None and line.startswith("goal not judged by this run: XL") and "bandwidth moved" in line
    else:
        assert g["met"] is (vs_floor <= limit) and line.startswith(f"goal {'met' if vs_floor <= limit else 'missed'}")


def test_goals_measured_by_another_tool_are_read_from_its_committed_results(results, tmp_path):
    (tmp_path / "busy.json").write_text(json.dumps({"slower_when_busy": {"speculative": 1.5}}))
    (tmp_path / "goals.json").write_text(json.dumps({"goals": [
        {"goal": "busy", "metric": "result_file", "params": {"file": "busy.json", "key": "slower_when_busy.speculative"},
         "at_most": 1.6, "unit": "x", "measured_by": "tools/busy_machine.py"},
        {"goal": "cache", "metric": "result_file", "params": {"file": "page-cache.json", "key": "bytes", "scale": 1e-9},
         "at_most": 6.5, "unit": " GB", "measured_by": "tools/page_cache.py"}]}))
    busy, cache = goals.score_goals(results, tmp_path / "goals.json")
    assert (busy["value"], busy["met"]) == (1.5, True) and (cache["value"], cache["met"]) == (None, None)
    assert goal_line(busy) == ("goal met: busy: 1.50x (goal: at most 1.60x; from tools/busy_machine.py)")


def test_the_printed_goals_speak_plain_words():
    committed, _ = goals.load_goals()
    for g in committed:
        assert not re.search(r"issue|alpha_hat|->|_", g["goal"]), g["goal"]  # no tracker numbers, no code names


def test_the_committed_goals_are_scored_by_name(results):
    committed, _ = goals.load_goals()
    assert [g["goal"] for g in goals.score_goals(results)] == [g["goal"] for g in committed]
    assert {g["metric"] for g in committed} - {None} <= {
        "speedup", "prediction_error", "in_loop_score_ratio", "score_ratio", "decode_vs_floor",
        "in_loop_decode_vs_floor", "bytes_beside_checkpoint", "ready_minus_decode_s", "best_speedup", "result_file",
        "best_speedup_at_alpha", "in_loop_cost_ratio"}


def test_results_are_saved_with_a_figure_and_tables(results, saved):
    _, png_path, data = saved
    assert png_path.stat().st_size > 10_000
    assert docs.decode_table(data, None) == docs.decode_table(results, None)  # from bench.json too
    text = report.table(results)
    assert "draft (file)" in text and "target (file)" in text and "K+1 positions: time / decode" in text
    assert "speculative vs autoregressive sampling, draft -> target, T=3" in text
    # every verdict the bench prints is measure/compare.py's: the best K and the verifiers, pair by pair
    assert "  the best K: " in text and "block verification against token by token, draft -> target" in text


def test_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="unknown bench settings: n_rums"):
        bench.settings(n_rums=3)


def test_bench_command_writes_json(tiny_pair, tmp_path, monkeypatch, capsys):
    small = bench.settings

    monkeypatch.setattr(bench, "settings", lambda quick=False, **o: small(quick, **{**SMALL_RUN, **o}))
    paths = [str(path.parent) for path in tiny_pair.values()]
    assert main(["bench", "--models", *paths, "--json", "--out", str(tmp_path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed["models"]) == {"draft", "target"}
    assert json.loads((tmp_path / "bench.json").read_text())["models"].keys() == printed["models"].keys()
    assert printed["speculative"] == []  # the default pairs are gpt2 -> gpt2-xl and the teaching pair
    assert any("end to end needs both gpt2 and gpt2-xl" in note for note in printed["notes"])


ESCAPES = "\x1b]0;pwned\x07\x1b[31m"  # retitles a terminal, then turns its text red


def test_a_model_folder_s_name_is_printed_escaped_in_progress_and_table(tiny_pair, tmp_path, monkeypatch, capsys):
    """The folder's name used to reach the terminal raw, in the progress lines and the table."""
    small_settings(monkeypatch)
    folder = shutil.copytree(tiny_pair["draft"].parent, tmp_path / ("draft" + ESCAPES))
    assert main(["bench", "--models", str(folder), "--out", str(tmp_path / "out")]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err
    assert "draft\\x1b]0;pwned\\x07" in out and "draft\\x1b]0;pwned\\x07" in err


@pytest.mark.parametrize("first", ["gpt2", "draft"])
@pytest.mark.parametrize("bad", ["fifo", "corrupt", "missing"])
def test_every_model_is_checked_before_anything_is_measured_or_written(tiny_pair, tmp_path, monkeypatch, capsys,
                                                                       first, bad):
    """A FIFO given last used to be found after 0.75 GB of bandwidth had been measured and the
    progress lines printed."""
    monkeypatch.setenv("PICOGPT_WEIGHTS_DIR", str(tmp_path / "weights"))  # gpt2 is not downloaded there
    monkeypatch.setattr(machine, "bandwidth_matrices", lambda n_bytes: pytest.fail("measured first"))
    monkeypatch.setattr(checkpoints, "random_checkpoint", lambda *a, **k: pytest.fail("wrote random weights first"))
    path = tmp_path / "model.safetensors"
    if bad == "fifo":
        os.mkfifo(path)
    elif bad == "corrupt":
        path.write_bytes(b"\xff" * 8)
    first = str(tiny_pair["draft"].parent) if first == "draft" else first
    assert main(["bench", "--quick", "--models", first, str(path), "--out", str(tmp_path / "out")]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith("error: ") and str(path) in lines[0], err
    assert {"fifo": "FIFO", "corrupt": "header length", "missing": "no such checkpoint"}[bad] in lines[0]


def test_contexts_longer_than_a_model_are_skipped_not_an_error(tiny_pair):
    # the teaching pair's n_ctx is 384, below the default context 512: measure what fits
    settings = dict(SMALL_RUN, contexts=(16, 512))
    results = bench.run_bench([str(tiny_pair["draft"].parent)], pair=None, teaching_pair=None,
                              log=lambda text: None, **settings)
    decode = next(iter(results["models"].values()))["engines"]["picogpt"]["decode"]
    assert list(decode) == [16]


# ---------------------------------------------------------------------------------------------
# The results documents, rendered from the JSON
# ---------------------------------------------------------------------------------------------

def block(name, source="benchmarks/bench.json"):
    return f"{docs.begin_marker(name, source)}\nstale text\n{docs.end_marker(name)}"


def test_a_document_is_rendered_from_the_results_json(saved, tmp_path):
    json_path, _, data = saved
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(json_path, tmp_path / "benchmarks" / "bench.json")
    shutil.copy(goals.GOALS_JSON, tmp_path / "benchmarks" / "goals.json")
    blocks = {name: docs.BLOCKS["benchmarks/README.md"][name] for name in ("decode", "end-to-end", "goals")}
    text = f"# Prose stays\n\n{block('decode')}\n\nmore prose\n\n{block('end-to-end')}\n\n{block('goals')}\n"
    rendered = docs.render_text(text, blocks, tmp_path)
    assert "stale text" not in rendered and rendered.startswith("# Prose stays\n") and "\nmore prose\n" in rendered
    rows = rendered.splitlines()
    decode = [row for row in rows if row.startswith(("| draft | ", "| target | "))]
    assert [row.split(" | ")[1] for row in decode] == ["picogpt", "picogpt-plain"] * 2
    median = data["models"]["draft"]["engines"]["picogpt"]["decode"]["8"]["median_s"]
    assert decode[0].split(" | ")[2].startswith(docs.ms(median) + " ms (")  # the median, then its IQR
    end_to_end = [row for row in rows if row.startswith("| draft -> target | ")]
    assert [row.split(" | ")[1] for row in end_to_end] == ["1", "3"]  # one row per temperature
    assert any(row.startswith("| GPT-2 small drafting for GPT-2 XL") for row in rows)  # the goals, by name
    assert docs.render_text(rendered, blocks, tmp_path) == rendered  # rendering again changes nothing


def test_block_verification_is_raced_beside_token_wise_and_rendered(saved, tmp_path):
    json_path, _, data = saved
    for entry in data["speculative"]:
        token, by_block = speedup.from_dict(entry["measurement"]), speedup.from_dict(entry["block"])
        assert by_block.Ks == [4] and 4 in token.Ks and by_block.repeats == token.repeats
        assert by_block.autoregressive_s == token.autoregressive_s  # the same autoregressive runs: paired
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(json_path, tmp_path / "benchmarks" / "bench.json")
    rendered = docs.render_text(block("speed-verifiers"), {"speed-verifiers": docs.BLOCKS["docs/speed.md"]["speed-verifiers"]},
                                tmp_path)
    rows = [row for row in rendered.splitlines() if row.startswith("| draft -> target | ")][1:]  # the header first
    assert [row.split(" | ")[1] for row in rows] == ["1", "3"]  # one row per temperature
    assert all(re.search(r"\| [0-9.]+ / [0-9.]+ \|", row) for row in rows)  # tokens per call, token / block
    from picogpt.course import nb08_verify_the_block as nb08
    lines = nb08.bench_verifier_lines(json_path)  # what notebook 08 prints
    assert sum("block verification emitted" in line for line in lines) == 2
    # per pair and temperature, measure/compare.py's verdicts on tokens per target call and on time
    assert sum("resolved" in line or " than token by token: " in line for line in lines) == 4
    assert "not measured" not in "".join(lines)


def test_a_block_the_renderer_does_not_know_or_a_missing_block_is_an_error(saved, tmp_path):
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(saved[0], tmp_path / "benchmarks" / "bench.json")
    blocks = {"decode": docs.BLOCKS["benchmarks/README.md"]["decode"]}
    with pytest.raises(PicoGPTError, match="unknown: \\['nonsense'\\], missing: \\['decode'\\]"):
        docs.render_text(block("nonsense"), blocks, tmp_path)
    with pytest.raises(PicoGPTError, match="twice: \\['decode'\\]"):
        docs.render_text(block("decode") + "\n" + block("decode"), blocks, tmp_path)


def test_the_quick_start_block_shows_what_the_command_printed_and_each_step(tmp_path):
    run = {"seconds": 11.2, "speedup": 1.1, "compiled_here": True, "load_average": [0.4, 0.5, 0.6],
           "stdout": "And God said unto Moses\n[speculative: ...]\n"}
    busy_run = {**run, "seconds": 21.0, "compiled_here": False, "load_average": [3.7, 2.0, 1.0]}
    results = {"cores": 2, "steps": {"lab_first_s": 95.0, "make_test_s": 290.0, "make_quick_s": 150.0,
                                     "lab_start_s": 6.0},
               "speculate": {"command": ".venv/bin/python -m picogpt speculate --seed 0 --compare",
                             "median_speedup": 1.6, "low": 1.1, "high": 1.7,
                             "runs": [run, {**run, "seconds": 4.4, "speedup": 1.6, "compiled_here": False},
                                      {**run, "seconds": 3.9, "speedup": 1.7, "compiled_here": False,
                                       "load_average": [1.2, 0.5, 0.6]}]},
               "busy": {"busy_processes": 2, "median_speedup": 1.3, "low": 1.2, "high": 1.4,
                        "steps": {"lab_first_s": 140.0, "lab_start_s": 9.0},
                        "runs": [busy_run, {**busy_run, "speedup": 1.4, "load_average": [4.4, 2.0, 1.0]}]},
               "in_process": {"speedup": 1.55}}
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "first-hour.json").write_text(json.dumps(results))
    blocks = {"quick-start": docs.BLOCKS["README.md"]["quick-start"]}
    text = docs.render_text(block("quick-start", "benchmarks/first-hour.json"), blocks, tmp_path)
    assert ("```text\n$ .venv/bin/python -m picogpt speculate --seed 0 --compare\nAnd God said unto Moses\n"
            "[speculative: ...]\n```") in text
    # one sentence for the speedup's range, alone and beside busy processes, with the load; one for the durations
    assert ("it printed 1.10x to 1.70x in 3 runs alone and 1.10x to 1.40x in 2 runs beside 2 busy processes (the load "
            "of a browser and a second notebook kernel), at load averages 0.4 to 4.4.") in text
    assert "compiles picogpt's kernels, served the course in 95 s (140 s beside busy processes)," in text
    assert "a later one in 6 s (9 s beside busy processes)" in text
    assert "the command above ran in 4-11 s (21 s beside busy processes)" in text
    assert "; `make test` took 4.8 minutes and `make quick` took 2.5 minutes, as" in text
    with pytest.raises(PicoGPTError, match="missing: \\['quick-start'\\]"):  # committed results need their block
        docs.render_text("no markers", blocks, tmp_path)


def test_the_committed_documents_are_what_the_committed_json_renders():
    stale = docs.render_docs(check=True)
    assert not stale, (f"{stale}: a generated block differs from its JSON; run `python tools/render_docs.py` "
                       "(and edit tools/render_docs.py, not the block)")


def test_every_rendered_document_names_its_blocks_and_sources():
    committed = 0
    for document, blocks in docs.BLOCKS.items():
        text = (docs.REPOSITORY / document).read_text()
        for name, (source, _) in blocks.items():
            if (docs.REPOSITORY / source).is_file():  # a block is required once its results are committed
                assert docs.begin_marker(name, source) in text and docs.end_marker(name) in text, (document, name)
                committed += 1
    assert committed >= 15


# ---------------------------------------------------------------------------------------------
# No surprise writes: a scratch folder git ignores, unless told to save
# ---------------------------------------------------------------------------------------------

def git(*args):
    try:
        return subprocess.run(["git", *args], cwd=stored.SOURCE_TREE, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")


def test_the_default_output_folder_is_one_git_ignores():
    folder = stored.scratch_dir()
    assert folder.is_relative_to(stored.SOURCE_TREE) and not folder.is_relative_to(stored.BENCH_DIR)
    ignored = folder.relative_to(stored.SOURCE_TREE) / "bench.json"
    assert git("check-ignore", "--no-index", str(ignored)).strip() == str(ignored)


def small_settings(monkeypatch):
    small = bench.settings
    monkeypatch.setattr(bench, "settings", lambda quick=False, **o: small(quick, **{**SMALL_RUN, **o}))


def test_the_bench_by_default_leaves_git_status_as_it_was(tiny_pair, monkeypatch, capsys):
    small_settings(monkeypatch)
    before = git("status", "--porcelain", "--untracked-files=all")
    committed = stored.BENCH_JSON.read_bytes()
    paths = [str(path.parent) for path in tiny_pair.values()]
    assert main(["bench", "--quick", "--models", *paths]) == 0
    err = capsys.readouterr().err
    assert f"saved {stored.scratch_dir() / 'bench-quick.json'}" in err and "--save writes benchmarks/" in err
    assert git("status", "--porcelain", "--untracked-files=all") == before
    assert stored.BENCH_JSON.read_bytes() == committed


def test_save_writes_the_committed_folder_and_names_the_renderer(tiny_pair, tmp_path, monkeypatch, capsys):
    small_settings(monkeypatch)
    monkeypatch.setattr(stored, "BENCH_DIR", tmp_path)
    paths = [str(path.parent) for path in tiny_pair.values()]
    assert main(["bench", "--save", "--models", *paths, "--json"]) == 0
    assert set(json.loads((tmp_path / "bench.json").read_text())["models"]) == {"draft", "target"}
    assert "python tools/render_docs.py" in capsys.readouterr().err


def test_quick_results_are_never_saved(capsys):
    assert main(["bench", "--save", "--quick"]) == 2
    assert "--quick is a first look" in capsys.readouterr().err


def test_a_checkpoint_under_a_linked_weights_folder_is_recorded_inside_the_repository(tmp_path):
    """Results name a checkpoint relative to the repository, also when weights/ (or a model folder
    in it) is a link to a disk elsewhere: no machine path in a committed file."""
    from picogpt.bench.checkpoints import REPO, shown_path

    (tmp_path / "random-gpt2").mkdir()
    link = REPO / "build" / "test-linked-weights"
    link.parent.mkdir(exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(tmp_path / "random-gpt2")
    try:
        assert shown_path(link / "model.safetensors") == "build/test-linked-weights/model.safetensors"
        assert shown_path(tmp_path / "model.safetensors") == str(tmp_path / "model.safetensors")
    finally:
        link.unlink()


def test_the_quick_start_states_the_range_of_every_kept_save_and_first_hour_keeps_each(tmp_path):
    """first_hour.py --save keeps each earlier save's runs (speedup, load after), and the quick
    start states the range over all of them, alone and beside busy processes, with the days."""
    import first_hour

    def save(date, alone, busy=()):
        def runs(pairs):
            return [{"seconds": 4.0, "speedup": x, "compiled_here": False, "load_average": [load, 0, 0],
                     "stdout": "text\n"} for x, load in pairs]
        return {"date_utc": date, "commit": "c", "cores": 2, "steps": {"lab_first_s": 30.0, "lab_start_s": 2.0},
                "speculate": {"command": "cmd", "runs": runs(alone), "low": min(x for x, _ in alone),
                              "high": max(x for x, _ in alone), "median_speedup": alone[0][0]},
                **({"busy": {"busy_processes": 2, "runs": runs(busy), "low": min(x for x, _ in busy),
                             "high": max(x for x, _ in busy), "median_speedup": busy[0][0]}} if busy else {})}

    out = tmp_path / "first-hour.json"
    assert first_hour.with_earlier(save("2026-01-02 10:00", [(1.5, 1.0)]), out) == save("2026-01-02 10:00", [(1.5, 1.0)])
    out.write_text(json.dumps(first_hour.with_earlier(save("2026-01-01 09:00", [(1.9, 0.5), (2.1, 0.7)]), out)))
    out.write_text(json.dumps(first_hour.with_earlier(save("2026-01-02 10:00", [(1.2, 3.0)], [(1.1, 5.0)]), out)))
    out.write_text(json.dumps(first_hour.with_earlier(save("2026-01-02 18:00", [(1.6, 2.0)], [(1.4, 6.5)]), out)))
    kept = json.loads(out.read_text())
    assert [s["date_utc"] for s in kept["earlier"]] == ["2026-01-01 09:00", "2026-01-02 10:00"]
    assert kept["earlier"][1]["alone"] == [[1.2, 3.0, 4.0]] and kept["earlier"][1]["busy"] == [[1.1, 5.0, 4.0]]
    assert kept["earlier"][1]["steps"] == {"lab_first_s": 30.0, "lab_start_s": 2.0}
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "first-hour.json").write_text(out.read_text())
    blocks = {"quick-start": docs.BLOCKS["README.md"]["quick-start"]}
    text = docs.render_text(block("quick-start", "benchmarks/first-hour.json"), blocks, tmp_path)
    assert "it printed 1.20x to 2.10x in 4 runs alone and 1.10x to 1.40x in 2 runs beside 2 busy processes" in text
    assert "at load averages 0.5 to 6.5" in text and "served the course in 30 s, a later one" in text


def test_first_hour_times_every_step_of_the_quick_start_alone_and_beside_busy_processes(monkeypatch, tmp_path):
    """make lab the first time and once .venv exists, make test and make quick, the command; then
    beside the busy processes the command, make lab again, and make lab on the clone without its
    .venv (a first install and compile again): the README's durations include a busy machine."""
    from types import SimpleNamespace

    import first_hour

    labs = []

    def lab(clone, env, limit_s=120):
        labs.append((clone / ".venv").exists())
        (clone / ".venv").mkdir(parents=True, exist_ok=True)  # make lab makes .venv
        return 10.0 * len(labs)

    made = []
    monkeypatch.setattr(first_hour, "lab_start_s", lab)
    monkeypatch.setattr(first_hour, "timed", lambda command, cwd, env: made.append(command[-1]) or (60.0, None))
    monkeypatch.setattr(first_hour, "command_runs", lambda clone, env, n_runs, label: {"runs": [], "label": label})
    monkeypatch.setattr(first_hour, "busy_processes", lambda n, seconds: [])
    monkeypatch.setattr(first_hour, "in_process", lambda clone, env: {"speedup": 1.5})
    monkeypatch.setattr(first_hour.time, "sleep", lambda s: None)
    monkeypatch.setattr(first_hour.subprocess, "run", lambda *a, **k: SimpleNamespace(stdout="commit\n"))
    results = first_hour.measure(skip_make_test=False, n_runs=2, n_busy=2, settle_s=60)
    assert made == ["test", "quick"]
    assert results["steps"] == {"lab_first_s": 10.0, "lab_start_s": 20.0, "make_test_s": 60.0, "make_quick_s": 60.0}
    assert results["busy"]["steps"] == {"lab_start_s": 30.0, "lab_first_s": 40.0}
    assert labs == [False, True, True, False]  # the last make lab found no .venv: a first time, beside busy processes


RUN = st.tuples(st.floats(0.1, 10), st.floats(0, 20), st.floats(0.5, 600))  # [speedup, load after, seconds]
SAVE = st.fixed_dictionaries({"cores": st.just(2), "alone": st.lists(RUN, min_size=1, max_size=6),
                              "busy": st.lists(RUN, max_size=6), "busy_processes": st.just(2),
                              "steps": st.fixed_dictionaries({"lab_first_s": st.floats(1, 600)}),
                              "busy_steps": st.just({})})


@given(saves=st.lists(SAVE, min_size=1, max_size=4))
def test_the_quick_start_sentences_state_every_kept_run_s_range(saves):
    """The speedup sentence gives the lowest and highest speedup of every run kept, alone and
    beside busy processes, and how many; the durations sentence the first make lab's range."""
    saves = [{**save, "alone": [list(run) for run in save["alone"]], "busy": [list(run) for run in save["busy"]]}
             for save in saves]
    alone = [run[0] for save in saves for run in save["alone"]]
    busy = [run[0] for save in saves for run in save["busy"]]
    sentence = docs.speedup_sentence(saves)
    assert f"it printed {min(alone):.2f}x to {max(alone):.2f}x in {len(alone)} runs alone" in sentence
    if busy:
        assert f"and {min(busy):.2f}x to {max(busy):.2f}x in {len(busy)} runs beside 2 busy processes" in sentence
    else:
        assert "beside" not in sentence
    firsts = [save["steps"]["lab_first_s"] for save in saves]
    assert f"served the course in {docs.value_range(firsts, lambda v: f'{v:.0f}')} s, a later" in \
        docs.durations_sentence(saves)
