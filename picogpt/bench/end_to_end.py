"""Speculative against autoregressive sampling, end to end, with measure/speedup.py's one
measurement: GPT-2 small drafting for GPT-2 XL on random weights of the published shapes (the
acceptance rate alpha is set by the temperature: two random models agree more the flatter their
distributions), and the teaching pair as trained; block verification at one K in the same
interleaved repeats (paired seeds); then token trees against a chain of the same size, by
measure/trees.py (the same method: costs read inside the loops, predicted vs measured)."""

from ..io.registry import PRETRAINED
from ..measure import speedup, trees
from ..model import load_checkpoint
from ..speculative import Chain
from .checkpoints import random_checkpoint
from .decode import prompt_ids


def end_to_end_path(label, path):
    """Published names run on their random-weight checkpoint (written once, even where the real
    weights are downloaded: their alpha by temperature is what the settings are chosen for);
    the others on the checkpoint given."""
    if label in PRETRAINED:
        return random_checkpoint(label), "random weights, published shapes"
    return path, "as given"


def end_to_end(pair, paths, temperatures, s, log):
    """One speedup.measure_chains per temperature for draft -> target (token-wise at every K of
    s["end_to_end_Ks"], block verification at s["block_K"]), then at the first temperature
    measure/trees.py's chains and trees of s["tree_shapes"] (each tree walked and traversed):
    ([{pair, source, measurement, block}], [{pair, source, trees}]) as bench.json holds them under "speculative" and "trees"
    (report.bench_measurements reads the first back)."""
    (draft_path, draft_source), (target_path, target_source) = (end_to_end_path(label, paths[label]) for label in pair)
    draft, target = load_checkpoint(draft_path, pair[0]), load_checkpoint(target_path, pair[1])
    ids = prompt_ids(s["prompt_tokens"], target.config.n_vocab)
    source = {pair[0]: draft_source, pair[1]: target_source}
    entries, tree_entries = [], []
    for temperature in temperatures:
        log(f"speculative vs autoregressive sampling: {pair[0]} -> {pair[1]}, temperature {temperature}, "
            f"K = {', '.join(map(str, s['end_to_end_Ks']))} (and K = {s['block_K']} by block verification), "
            f"N = {s['end_to_end_N']}, {s['end_to_end_repeats']} repeats")
        chains = [Chain(K) for K in s["end_to_end_Ks"]] + [Chain(s["block_K"], "block")]
        measured = speedup.measure_chains(draft, target, ids, s["end_to_end_N"], chains,
                                          repeats=s["end_to_end_repeats"], temperature=temperature, progress=True)
        entries.append({"pair": list(pair), "source": source, "measurement": speedup.as_dict(measured["token"]),
                        "block": speedup.as_dict(measured["block"])})
    if s["tree_shapes"]:
        log(f"chains and trees: {pair[0]} -> {pair[1]}, temperature {temperatures[0]}, shapes "
            f"{', '.join(map(str, s['tree_shapes']))}, N = {s['end_to_end_N']}, {s['end_to_end_repeats']} repeats")
        measured = trees.measure_trees(draft, target, ids, s["end_to_end_N"], trees.methods(s["tree_shapes"]),
                                       repeats=s["end_to_end_repeats"], temperature=temperatures[0])
        tree_entries.append({"pair": list(pair), "source": source, "trees": trees.as_dict(measured)})
    return entries, tree_entries
