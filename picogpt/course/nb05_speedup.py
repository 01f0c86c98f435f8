"""Notebook 05 (speedup): what only it uses, its questions: the speedup Jay Mody's arithmetic
predicts, and the best K.

Every `check_...` is a pure function of the learner's answer returning a `Check` (grading.py):
"✔ right: ..." with the worked solution, or "✘ not yet: ..." with a hint (the method, or the known
mistake it matches) but not the number. The defaults of each checker are the numbers its
notebook's question asks about.
"""



from .. import theory
from .grading import check_number


def check_predicted_speedup(answer, alpha=0.7, K=4, t_draft_ms=1.8, t_target_ms=14.1):
    """With the paper's measured costs (t_draft = 1.8 ms, t_target = 14.1 ms, K = 4), what speedup
    does Jay Mody's arithmetic (K t_draft + t_target per loop) predict if each draft is accepted
    independently with alpha = 0.7? (Chen et al. write down no speedup formula.)"""
    tokens = float(theory.expected_tokens_per_loop(alpha, K))
    expected = tokens / (K * t_draft_ms + t_target_ms) * t_target_ms
    how = ("tokens per loop = (1 − alpha^(K+1)) / (1 − alpha); a loop costs K t_draft + t_target; "
           "autoregressive sampling makes one token per t_target.")
    solution = (f"{tokens:.3f} tokens per loop / ({K} × {t_draft_ms} + {t_target_ms} = "
                f"{K * t_draft_ms + t_target_ms:.1f} ms) × {t_target_ms} ms = {expected:.2f}x.")
    mistakes = [(alpha * (K + 1) / (K * t_draft_ms + t_target_ms) * t_target_ms,
                 "alpha is a per-draft acceptance rate, not the share β of the K + 1 possible tokens a loop emits: "
                 "tokens per loop is (1 − alpha^(K+1)) / (1 − alpha)"),
                (tokens, "that is tokens per loop; a loop also costs more than one target step: K drafts + the scoring call"),
                (tokens / (K * t_draft_ms + t_target_ms), "that is tokens per millisecond; multiply by t_target for the ratio")]
    return check_number(answer, expected, how, solution, mistakes)


def check_best_K(answer, alpha=0.8, c=0.05, K_max=16):
    """With alpha = 0.8 and a draft step costing c = 0.05 target steps, which K gives the highest
    speedup by Leviathan et al.'s formula?"""
    expected = int(theory.best_K(alpha, c, K_max))
    how = ("compute picogpt.theory.predicted_speedup_leviathan(alpha, K, c) for K = 1 .. 16 and "
           "take the K with the largest value.")
    solution = (f"K = {expected}: speedup {theory.predicted_speedup_leviathan(alpha, expected, c):.2f}x. "
                "Each extra draft adds c to the loop's cost but an ever smaller alpha^K to its tokens; "
                "the best K is where the two balance. A cheaper draft (smaller c) or a better one (alpha "
                "nearer 1) pushes it up.")
    mistakes = [(4, "K = 4 is the paper's choice for Chinchilla, not the best for alpha = 0.8, c = 0.05")]
    return check_number(answer, expected, how, solution, mistakes, rel_tol=1e-9)
