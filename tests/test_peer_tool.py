"""tools/peer.py, which times picogpt beside transformers in fresh processes: the engines take turns
in an order that alternates, every figure is a median of the repeats with its quartiles, and each
ratio divides the other engine's time by picogpt's in the same repeat (above 1: picogpt faster)."""

import pytest

from picogpt.errors import PicoGPTError


@pytest.fixture(scope="module")
def peer():
    import peer  # tools/, on the path as conftest.py puts it

    return peer


def test_the_engines_take_turns_in_an_order_that_alternates(peer):
    engines = ["a", "b", "c"]
    assert [peer.turns(engines, r) for r in range(3)] == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"]]


def run(ar_s, spec_s, decode_s, in_loop=True):
    calls = {role: {"1": [decode_s] * 3, "5": [1.5 * decode_s] * 3} for role in ("draft", "target")}
    loop = {"t_draft_s": 0.1 * decode_s, "t_target_s": decode_s, "t_score_s": 1.2 * decode_s, "alpha_hat": 0.9}
    return {"calls": calls, "bytes_per_token": {"draft": 1e9, "target": 1e10}, "autoregressive_s": ar_s,
            "speculative_s": spec_s, "load_average_before": [1.0, 1.0, 1.0], **(loop if in_loop else {})}


def test_ratios_are_the_other_engines_time_over_picogpts_repeat_by_repeat(peer):
    runs = {"picogpt": [run(2.0, 1.0, 0.1), run(4.0, 2.0, 0.2)],
            "transformers": [run(3.0, 3.0, 0.2, in_loop=False), run(4.0, 8.0, 0.4, in_loop=False)]}
    settings = {"N": 2, "K": 4, "draft_name": "gpt2", "target_name": "gpt2-xl"}
    out = peer.describe(runs, [{"label": "picogpt"}, {"label": "transformers"}], settings, [10.0, 10.0])
    assert out["ratios"]["transformers"]["autoregressive"]["runs"] == [1.5, 1.0]
    assert out["ratios"]["transformers"]["speculative"]["runs"] == [3.0, 4.0]
    mine = out["picogpt"]
    assert mine["speedup"]["median"] == 2.0 and mine["autoregressive_ms_per_token"]["runs"] == [1000.0, 2000.0]
    assert mine["models"]["gpt2-xl"]["floor_ms"] == pytest.approx(1000.0)  # 1e10 bytes at 10 GB/s
    assert mine["models"]["gpt2-xl"]["decode_vs_floor"]["runs"] == pytest.approx([0.1, 0.2])
    assert mine["models"]["gpt2"]["score_vs_decode"]["median"] == pytest.approx(1.5)
    assert mine["in_loop"]["c"]["median"] == pytest.approx(0.1) and out["transformers"]["in_loop"] is None


def test_a_ceiling_script_that_prints_no_rate_is_one_error(peer, tmp_path):
    script = tmp_path / "ceiling.py"
    script.write_text("print('no rate here')")
    with pytest.raises(PicoGPTError, match="printed no rate in GB/s"):
        peer.ceiling_gb_per_s(script)
    script.write_text("print('GEMV over 40 matrices: 27.5 GB/s; sum (one thread): 14.0 GB/s')")
    assert peer.ceiling_gb_per_s(script) == 27.5
