"""`python -m picogpt generate` and `speculate`: streamed text, JSON, and one-line errors."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_random_checkpoint

from picogpt import autoregressive_sampling, load, speculative_sampling, tokenizer
from picogpt.cli import GPT2_PROMPT, TEACHING_PROMPT, IncrementalText, encode_prompt, main

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Tiny random draft and target with GPT-2's vocabulary (the real tiny pair may not exist)."""
    folder = tmp_path_factory.mktemp("cli-models")
    sizes = dict(n_vocab=50257, n_ctx=48, n_embd=16)
    return dict(draft=str(write_random_checkpoint(folder / "draft", 1, **sizes)),
                target=str(write_random_checkpoint(folder / "target", 2, **sizes)),
                short=str(write_random_checkpoint(folder / "short", 3, **(sizes | dict(n_ctx=12)))),
                small_vocab=str(write_random_checkpoint(folder / "small-vocab", 4, n_vocab=8)))


def run_main(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_incremental_text_holds_back_a_character_split_across_tokens():
    tok = tokenizer()
    text = "naïve 日本語🙂"  # GPT-2 splits each CJK character and the emoji over byte-level tokens
    tokens = tok.encode(text)
    assert tok.decode_single_token_bytes(tokens[-1]) == b"\x99\x82"  # the emoji's last two bytes alone
    stream = IncrementalText(tok)
    pieces = [stream.add([t]) for t in tokens] + [stream.finish()]
    assert "".join(pieces) == text
    assert all("\ufffd" not in piece for piece in pieces)
    assert pieces[-2].endswith("🙂") and "" in pieces  # held back, then released whole


def test_generate_streams_the_text_of_the_sampled_tokens(capsys, checkpoints):
    code, out, err = run_main(capsys, "generate", "--model", checkpoints["target"], "--prompt", "Once upon",
                              "-n", "12", "--seed", "5", "--top-k", "50")
    assert code == 0 and err == ""
    expected = autoregressive_sampling(load(checkpoints["target"]), encode_prompt("Once upon"), 12, seed=5, top_k=50)
    text, summary = out.rsplit("\n\n", 1)
    assert text == "Once upon" + tokenizer().decode(expected.tokens)
    assert "12 tokens in" in summary and "seed 5" in summary


def test_speculate_json_reports_tokens_acceptance_and_speedup(capsys, checkpoints):
    code, out, err = run_main(capsys, "speculate", "--draft", checkpoints["draft"], "--target", checkpoints["target"],
                              "--prompt", "Hello world", "-n", "10", "-K", "3", "--seed", "7", "--compare", "--json")
    assert code == 0 and err == ""
    report = json.loads(out)
    ids = encode_prompt("Hello world")
    expected = speculative_sampling(load(checkpoints["draft"]), load(checkpoints["target"]), ids, 10, K=3, seed=7)
    assert report["tokens"] == expected.tokens and report["accepted"] == expected.accepted
    assert report["text"] == tokenizer().decode(expected.tokens)
    assert report["alpha_hat"] == expected.alpha_hat
    assert report["ars_tokens"] == autoregressive_sampling(load(checkpoints["target"]), ids, 10, seed=7).tokens
    # with --compare, the medians are over --repeats runs of each (by default the fewest pairs a 95% sign test
    # can conclude from); "seconds" and "tokens_per_loop" are the first run's, the one "tokens" holds
    assert report["repeats"] == 6 and report["seconds"] == report["seconds"] and "median_seconds" in report
    assert report["tokens_per_loop"] == expected.tokens_per_loop and report["verdict"]
    runs = report["speedup_runs"]  # the ratios of the runs of the same seed: their median is the speedup
    assert runs["q1"] <= report["speedup"] == runs["median"] <= runs["q3"]
    assert report["seconds"] > 0 and report["K"] == 3 and report["seed"] == 7


def test_speculate_streams_text_and_compares(capsys, checkpoints):
    code, out, err = run_main(capsys, "speculate", "--draft", checkpoints["draft"], "--target", checkpoints["target"],
                              "--prompt", "Hi", "-n", "8", "--temperature", "0", "--compare")
    assert code == 0 and err == ""
    ids = encode_prompt("Hi")
    greedy = autoregressive_sampling(load(checkpoints["target"]), ids, 8, temperature=0).tokens
    assert out.startswith("Hi" + tokenizer().decode(greedy) + "\n")
    assert "tokens per loop" in out and "speedup" in out and "identical (greedy)" in out


def test_speculate_verify_block_compares_both_verifiers_on_the_same_seeds(capsys, checkpoints):
    models = ("--draft", checkpoints["draft"], "--target", checkpoints["target"])
    code, out, err = run_main(capsys, "speculate", *models, "--prompt", "Hello world", "-n", "10", "-K", "3",
                              "--seed", "7", "--verify", "block", "--compare", "--json", "--repeats", "2")
    assert code == 0 and err == ""
    report = json.loads(out)
    ids = encode_prompt("Hello world")
    expected = speculative_sampling(load(checkpoints["draft"]), load(checkpoints["target"]), ids, 10, K=3, seed=7,
                                    verify="block")
    assert report["tokens"] == expected.tokens and report["verify"] == "block"
    assert set(report["verifiers"]) == {"token", "block"}
    for verifier in report["verifiers"].values():
        runs = verifier["speedup_runs"]
        assert runs["q1"] <= verifier["speedup"] == runs["median"] <= runs["q3"] and verifier["tokens_per_loop_all_runs"] >= 1
        assert len(verifier["runs_s"]) == len(verifier["tokens_per_loop_runs"]) == 2
    assert report["speedup"] == report["verifiers"]["block"]["speedup"]
    code, out, err = run_main(capsys, "speculate", *models, "--prompt", "Hi", "-n", "6", "--seed", "4",
                              "--verify", "block", "--compare", "--repeats", "2")
    assert code == 0 and "K=4, block verification" in out
    lines = {verify: re.search(rf"{verify} +([0-9.]+) tokens per loop \(all 2 runs together\), speedup ([0-9.]+)x \(IQR", out)
             for verify in ("token by token", "block verification")}
    assert all(lines.values()), out
    assert "cannot resolve block verification against token by token" in out  # 2 pairs conclude nothing
    # the text streamed is block verification's own first run, the one the header names
    expected = speculative_sampling(load(checkpoints["draft"]), load(checkpoints["target"]), encode_prompt("Hi"), 6,
                                    seed=4, verify="block")
    assert out.split("\n\n[speculative")[0] == "Hi" + tokenizer().decode(expected.tokens)
    assert "the run above: 6 tokens in" in out and f"({expected.tokens_per_loop:.2f} tokens per loop)" in out


def test_repeats_without_compare_is_one_line(capsys, checkpoints):
    code, out, err = run_main(capsys, "speculate", "--draft", checkpoints["draft"], "--target", checkpoints["target"],
                              "--prompt", "Hi", "-n", "4", "--repeats", "3")
    assert code == 2 and out == "" and "--repeats 3" in err and "--compare" in err and len(err.strip().splitlines()) == 1


def test_a_K_the_context_cannot_hold_is_said_capped(capsys, checkpoints):
    code, out, err = run_main(capsys, "speculate", "--draft", checkpoints["draft"], "--target", checkpoints["target"],
                              "--prompt", "Hi", "-n", "4", "-K", "100000", "--seed", "1")
    assert code == 0 and "K capped at " in out and "(asked -K 100000)" in out and "K=100000" not in out


def test_speculate_refuses_an_unknown_verifier_in_one_line(capsys, checkpoints):
    with pytest.raises(SystemExit) as exit_:
        main(["speculate", "--draft", checkpoints["draft"], "--target", checkpoints["target"], "--verify", "tree"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--verify" in err and "block" in err and "Traceback" not in err


def test_speculate_uses_the_course_pair_by_default(capsys, checkpoints, monkeypatch):
    import picogpt.course
    monkeypatch.setattr(picogpt.course, "course_pair_names", lambda: (checkpoints["draft"], checkpoints["target"]))
    code, out, err = run_main(capsys, "speculate", "--prompt", "Hi", "-n", "4", "--seed", "1", "--json")
    report = json.loads(out)
    assert code == 0 and report["draft"] == "draft" and report["target"] == "target"


def test_the_command_runs_as_a_module(checkpoints):
    done = subprocess.run([sys.executable, "-m", "picogpt", "speculate", "--draft", checkpoints["draft"],
                           "--target", checkpoints["target"], "-n", "5", "--seed", "3", "--compare", "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) >= {"tokens", "text", "accepted", "alpha_hat", "seconds", "ars_seconds", "speedup"}


BAD_INPUT = {
    "N = 0": (["-n", "0"], "N, the number of tokens"),
    "K = 0": (["-K", "0"], "K, the number of draft tokens"),
    "negative temperature": (["--temperature", "-1"], "temperature must be"),
    "top-p 0": (["--top-p", "0"], "top_p must be in"),
    "top-p above 1": (["--top-p", "1.5"], "top_p must be in"),
    "top-k 0": (["--top-k", "0"], "top_k must be"),
    "empty prompt": (["--prompt", ""], "the prompt is empty"),
    "beyond the context": (["-n", "48"], "exceed draft's context of 48 tokens"),
    "a draft with a shorter context": (["--draft", "{short}", "-n", "12"], "exceed short's context of 12"),
    "not GPT-2's vocabulary": (["--draft", "{small_vocab}"], "vocabulary of 8 tokens"),
    "unknown model": (["--target", "no-such-model"], "unknown model 'no-such-model'"),
    "missing checkpoint folder": (["--target", "{missing}"], "not found"),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_is_one_readable_line_and_exit_status_2(capsys, checkpoints, tmp_path, case):
    extra, message = BAD_INPUT[case]
    paths = checkpoints | dict(missing=str(tmp_path / "nothing.safetensors"))
    argv = ["speculate", "--draft", checkpoints["draft"], "--target", checkpoints["target"], "--prompt", "Hello"]
    argv += [arg.format(**paths) for arg in extra]
    code, out, err = run_main(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert "Traceback" not in err


def test_generate_rejects_bad_input_the_same_way(capsys, checkpoints):
    code, out, err = run_main(capsys, "generate", "--model", checkpoints["target"], "--top-p", "2")
    assert code == 2 and out == "" and err.startswith("error: top_p") and err.count("\n") == 1


def test_in_memory_flag_loads_copies_and_samples_the_same_tokens(capsys, checkpoints, monkeypatch):
    import picogpt.model

    loaded = []
    real_load = picogpt.model.load
    monkeypatch.setattr(picogpt.model, "load", lambda name, in_memory=False: loaded.append(
        in_memory) or real_load(name, in_memory))
    argv = ["speculate", "--draft", checkpoints["draft"], "--target", checkpoints["target"],
            "--prompt", "Hello world", "-n", "8", "-K", "2", "--seed", "3", "--json"]
    reports = [json.loads(run_main(capsys, *argv, *flag)[1]) for flag in ([], ["--in-memory"])]
    assert loaded == [False, False, True, True]
    assert reports[0]["tokens"] == reports[1]["tokens"]
    code, out, err = run_main(capsys, "generate", "--model", checkpoints["target"], "--in-memory", "-n", "3",
                              "--seed", "1")
    assert code == 0 and loaded[-1] is True and "3 tokens in" in out


def test_the_streamed_text_is_exactly_the_runs_n_tokens(capsys, checkpoints):
    """The last loop may emit more than N tokens; the run keeps N, and so does the text printed."""
    argv = ["speculate", "--draft", checkpoints["draft"], "--target", checkpoints["target"], "--prompt", "Hi",
            "-K", "8", "--seed", "2"]
    for n in ("3", "10", "11"):
        code, out, _ = run_main(capsys, *argv, "-n", n)
        expected = speculative_sampling(load(checkpoints["draft"]), load(checkpoints["target"]), encode_prompt("Hi"),
                                        int(n), K=8, seed=2)
        assert code == 0 and out.split("\n\n[speculative")[0] == "Hi" + tokenizer().decode(expected.tokens)


def test_compare_times_the_runs_it_reports(capsys, checkpoints):
    code, out, err = run_main(capsys, "speculate", "--draft", checkpoints["draft"], "--target", checkpoints["target"],
                              "--prompt", "Hi", "-n", "6", "--seed", "4", "--compare", "--repeats", "2")
    assert code == 0
    assert "the same seeds 4-5" in out and "median of 2 runs of each after a warm-up, in alternating order" in out
    assert "median of 2 runs: " in out and "the run above: " in out  # every time says which run it is
    speedup = re.search(r"speedup ([0-9.]+)x \(IQR ([0-9.]+)-([0-9.]+)\): autoregressive seconds / speculative", out)
    assert float(speedup[2]) <= float(speedup[1]) <= float(speedup[3])  # the point inside its own bracket
    code, out, err = run_main(capsys, "speculate", "--draft", checkpoints["draft"], "--target", checkpoints["target"],
                              "--compare", "--repeats", "0")
    assert code == 2 and out == "" and "--repeats 0" in err


@pytest.mark.parametrize("command", [[], ["info"], ["download"], ["generate"], ["speculate"], ["bench"]])
def test_help_describes_and_shows_examples(capsys, command):
    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    assert "examples:" in out and f"python -m picogpt {command[0] if command else ''}" in out


MISTYPED = {
    "a flag of speculate": (["speculate", "--promt", "x"], "unrecognized arguments: --promt x (did you mean --prompt?)",
                            "see `python -m picogpt speculate --help`"),
    "a flag with its value": (["generate", "--temprature=1"], "(did you mean --temperature?)",
                              "see `python -m picogpt generate --help`"),
    "a flag in the wrong case": (["speculate", "-k", "4"], "unrecognized arguments: -k 4 (did you mean -K?)"),
    "a command": (["speculat"], "invalid choice: 'speculat'", "(did you mean speculate?)"),
    "a value": (["generate", "-n", "ten"], "argument -n/--n-tokens: invalid int value: 'ten'"),
}


@pytest.mark.parametrize("case", MISTYPED)
def test_a_mistyped_command_or_flag_is_one_line_that_suggests_the_closest(capsys, case):
    argv, *expected = MISTYPED[case]
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and all(text in err for text in expected), err
    assert err.startswith("error: ") and err.count("\n") == 1 and "usage:" not in err, err  # no usage block


def test_nothing_close_suggests_nothing(capsys):
    with pytest.raises(SystemExit):
        main(["speculate", "--zzzzzz"])
    assert "did you mean" not in capsys.readouterr().err


def test_a_negative_seed_is_refused_in_words_the_command_line_can_act_on(capsys):
    code, out, err = run_main(capsys, "speculate", "--prompt", "Hi", "--seed", "-3")
    assert code == 2 and out == ""
    assert "--seed -3" in err and "leave --seed out" in err and "None" not in err


def test_the_loop_line_says_what_it_counts(capsys, checkpoints):
    """'L loops emitted E tokens (E / L tokens per loop), the last E - N past N not kept': the figures multiply out."""
    argv = ["speculate", "--draft", checkpoints["draft"], "--target", checkpoints["target"], "--prompt", "Hi", "-K", "8"]
    seen_extra = False
    for seed in range(4):
        code, out, _ = run_main(capsys, *argv, "-n", "10", "--seed", str(seed))
        run = speculative_sampling(load(checkpoints["draft"]), load(checkpoints["target"]), encode_prompt("Hi"), 10,
                                   K=8, seed=seed)
        emitted = sum(len(loop.tokens) for loop in run.loops)
        assert code == 0
        assert f"{len(run.loops)} loops emitted {emitted} tokens ({emitted / len(run.loops):.2f} tokens per loop)" in out
        assert (f"the last {emitted - 10} past N = 10 not kept" in out) == (emitted > 10)
        seen_extra |= emitted > 10
    assert seen_extra  # the case the line explains happened at least once


def test_the_default_prompt_suits_the_target(capsys, checkpoints):
    """The teaching pair learned its English from the King James Bible; any other target gets a general sentence."""
    code, out, _ = run_main(capsys, "generate", "--model", "tiny-target", "-n", "2", "--seed", "1")
    assert code == 0 and out.startswith(TEACHING_PROMPT)
    code, out, _ = run_main(capsys, "speculate", "--draft", checkpoints["draft"], "--target", checkpoints["target"],
                            "-n", "2", "--seed", "1")
    assert code == 0 and out.startswith(GPT2_PROMPT)


def test_greedy_output_names_no_seed(capsys, checkpoints):
    """At temperature 0 nothing is drawn at random: a seed would be a number that changes nothing."""
    pair = ["--draft", checkpoints["draft"], "--target", checkpoints["target"], "-n", "4", "--temperature", "0"]
    for argv in (["generate", "--model", checkpoints["target"], "-n", "4", "--temperature", "0"],
                 ["speculate", *pair, "--compare", "--repeats", "2"], ["speculate", *pair, "--seed", "3"]):
        code, out, _ = run_main(capsys, *argv)
        assert code == 0 and "seed" not in out and "greedy" in out, out
    code, out, _ = run_main(capsys, "speculate", *pair, "--json")
    assert json.loads(out)["seed"] is None
    code, out, _ = run_main(capsys, "generate", "--model", checkpoints["target"], "-n", "4")  # sampling: its seed
    assert re.search(r"seed \d+\]", out)


def test_bench_says_what_it_will_write_and_how_long_a_run_took_before_it_writes(capsys, monkeypatch, tmp_path):
    import picogpt.bench
    from picogpt.io.registry import published_weights_bytes
    from picogpt.measure.results import bench_seconds

    weights = tmp_path / "weights"
    monkeypatch.setenv("PICOGPT_WEIGHTS_DIR", str(weights))

    def ctrl_c(*args, **kwargs):  # the user, having read what it will cost, presses Ctrl-C
        raise KeyboardInterrupt
    monkeypatch.setattr(picogpt.bench, "run_bench", ctrl_c)
    code, out, err = run_main(capsys, "bench", "--out", str(tmp_path / "results"))
    gb = (published_weights_bytes("gpt2") + published_weights_bytes("gpt2-xl")) / 1e9
    assert code == 130 and out == "" and err.endswith("interrupted\n")
    assert f"random-weight checkpoints of the published shapes, {gb:.1f} GB" in err
    assert f"{weights / 'random-gpt2'}/ (0.5 GB), {weights / 'random-gpt2-xl'}/ (6.2 GB)" in err
    took = bench_seconds()
    assert took is None or f"took {took[0] / 60:.0f} minutes on a {took[1]}-core machine" in err
    assert not weights.exists()  # nothing written before the user could stop it
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    assert f"{gb:.1f} GB" in capsys.readouterr().out
