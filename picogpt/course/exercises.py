"""The questions of notebooks 01, 02, 04, 05 and 06: a number to work out, or a short function
tried on a few inputs (notebooks 03, 07 and 08 keep theirs in their own modules, nb03_…, nb07_…,
nb08_…, beside their write-a-step exercises).

Every `check_...` is a pure function of the student's answer returning a `Check` (grading.py,
the course's one grader contract): "✔ right: ..." with the worked solution, or "✘ not yet: ..."
with a hint (the method, or the known mistake it matches) but not the number, so the exercise
stays an exercise. The defaults of each checker are the numbers its notebook's question asks about.
"""

import itertools
import math

import numpy as np

from .. import rejection, theory
from ..sampling import distribution
from .grading import Check, as_number, check_number, not_answered

# ---------------------------------------------------------------------------------------------
# Notebook 01: GPT-2 in NumPy
# ---------------------------------------------------------------------------------------------

def block_params(n_embd):
    """Parameters of one GPT-2 block: 2 LayerNorms, attention (c_attn, c_proj), MLP (c_fc, c_proj)."""
    d = n_embd
    layer_norms = 2 * (d + d)  # ln_1, ln_2: weight + bias
    attention = (d * 3 * d + 3 * d) + (d * d + d)  # c_attn [d, 3d] + bias, c_proj [d, d] + bias
    mlp = (d * 4 * d + 4 * d) + (4 * d * d + d)  # c_fc [d, 4d] + bias, c_proj [4d, d] + bias
    return layer_norms + attention + mlp  # = 12 d**2 + 13 d


def check_block_params(answer, n_embd=768):
    """How many parameters does one transformer block of GPT-2 small (n_embd = 768) hold?"""
    how = ("add up every array of one block (params['h'][0] in the notebook): ln_1 and ln_2 "
           "(weight and bias), attn's c_attn and c_proj, mlp's c_fc and c_proj (weights and biases); "
           "write their shapes in terms of n_embd.")
    solution = (f"ln_1 + ln_2: 4 n_embd; c_attn: 3 n_embd² + 3 n_embd; attn c_proj: n_embd² + n_embd; "
                f"c_fc: 4 n_embd² + 4 n_embd; mlp c_proj: 4 n_embd² + n_embd. In all "
                f"12 n_embd² + 13 n_embd = {block_params(n_embd):,} for n_embd = {n_embd}.")
    mistakes = [(12 * n_embd**2, "close, but the biases and the LayerNorm weights count too")]
    return check_number(answer, block_params(n_embd), how, solution, mistakes, rel_tol=1e-9)


def positions_processed(n_prompt, N, use_cache):
    """Positions the model runs over to generate N tokens after an n_prompt-token prompt."""
    if use_cache:
        return n_prompt + (N - 1)  # the prompt once, then one new position per further token
    return sum(n_prompt + t for t in range(N))  # token t recomputes all n_prompt + t positions


def check_kv_cache_saving(answer, n_prompt=10, N=100):
    """How many times fewer positions does a decoder with a KV cache run the model over, to
    generate N = 100 tokens after a prompt of n_prompt = 10?"""
    without = positions_processed(n_prompt, N, use_cache=False)
    with_cache = positions_processed(n_prompt, N, use_cache=True)
    how = ("without a cache, token t (t = 0 .. N-1) reruns all n_prompt + t positions: add those "
           "up. With one, the prompt runs once and every later token runs 1 new position. "
           "Divide the first total by the second.")
    solution = (f"Without a cache: N n_prompt + N(N-1)/2 = {without:,} positions. With one: "
                f"n_prompt + N - 1 = {with_cache:,}. Ratio {without / with_cache:.1f}, and it grows "
                f"with N: without a cache, generation is quadratic in its length.")
    mistakes = [(with_cache / without, "that is with/without; the question asks without/with"),
                (without / (n_prompt + N), f"with the cache the prompt runs once and each of the N − 1 tokens after the "
                 f"first adds one position: n_prompt + N − 1 = {with_cache}, not n_prompt + N"),
                (sum(n_prompt + t for t in range(1, N + 1)) / with_cache,
                 "without a cache, token t = 0 .. N − 1 reruns n_prompt + t positions: the first token runs "
                 "the prompt alone")]
    # 3 significant digits: rounding is fine, an off-by-one in either count (54.1, 55.5) is not
    return check_number(answer, without / with_cache, how, solution, mistakes, rel_tol=0.002)


def kv_cache_bytes(n_layer, n_embd, n_positions, bytes_per_number=4):
    """Bytes of a KV cache: a key and a value vector of n_embd numbers per layer and position."""
    return 2 * n_layer * n_positions * n_embd * bytes_per_number


def kv_cache_slips(n_layer):
    """Each factor of the KV cache's size: (its right value, {a wrong value: the slip that gives it})."""
    return [(2, {1: "counting keys or values but not both"}),
            (4, {1: "counting numbers rather than bytes", 2: "counting 2 bytes per number (float16)",
                 8: "counting 8 bytes per number (float64)"}),
            (n_layer, {1: "counting one layer instead of all of them"})]


def kv_cache_mistakes(n_layer, n_embd, n_positions):
    """[(a wrong size, [every way of getting it])]: each combination of slips, grouped by the size
    it gives (two slips can give one number: keys only, or float16, both halve it), so that a hint
    names every cause a number could have, never only one of them."""
    by_size = {}
    choices = [[(right, None), *((value, slip) for value, slip in wrong.items() if value != right)]
               for right, wrong in kv_cache_slips(n_layer)]  # with n_layer = 1, one layer is no slip
    for factors in itertools.product(*choices):
        slips = [slip for _, slip in factors if slip]
        size = math.prod(value for value, _ in factors) * n_positions * n_embd
        if slips and size != kv_cache_bytes(n_layer, n_embd, n_positions):
            by_size.setdefault(size, []).append(" and ".join(slips))
    return list(by_size.items())


def check_kv_cache_bytes(answer, n_layer=48, n_embd=1600, n_positions=1024):
    """How many bytes does GPT-2 XL's KV cache hold at its full context of 1024 positions (float32)?"""
    expected = kv_cache_bytes(n_layer, n_embd, n_positions)
    how = ("for every layer and every position the cache keeps a key and a value, each a vector "
           "of n_embd float32 numbers (all heads together).")
    solution = (f"2 (key and value) × {n_layer} layers × {n_positions} positions × {n_embd} numbers "
                f"× 4 bytes = {expected:,} bytes ({expected / 2**20:,.0f} MiB), read again, on "
                f"top of the weights, for every new token.")
    mistakes = [(size, "that is the size you get by " + ", or by ".join(ways) + ": the cache holds keys and values, "
                 "4 bytes each (float32), in every layer")
                for size, ways in kv_cache_mistakes(n_layer, n_embd, n_positions)]
    return check_number(answer, expected, how, solution, mistakes, rel_tol=1e-9)


# ---------------------------------------------------------------------------------------------
# Notebook 02: autoregressive sampling
# ---------------------------------------------------------------------------------------------

def trial_logits(seed=0, n_vocab=1000):
    """A few logit vectors to try a student's sampling function on (one with a huge gap)."""
    rng = np.random.default_rng(seed)
    peaked = rng.normal(size=n_vocab)
    peaked[7] += 30
    return [rng.normal(scale=3, size=n_vocab), rng.normal(size=20), peaked]


def check_top_k(my_top_k, ks=(1, 5, 50)):
    """Does my_top_k(logits, k) return the top-k distribution: softmax over the k largest logits,
    probability 0 elsewhere? Tried against picogpt.sampling.distribution on a few logit vectors."""
    if not_answered(my_top_k):
        return Check(False, "write your function my_top_k(logits, k), then pass it in instead of None.")
    if not callable(my_top_k):
        return Check(False, f"expected a function my_top_k(logits, k), got {type(my_top_k).__name__}.")
    for logits in trial_logits():
        for k in (k for k in ks if k <= len(logits)):
            expected = distribution(logits, top_k=k)
            case = f"for k = {k} on {len(logits)} logits"
            try:
                probs = np.asarray(my_top_k(logits.copy(), k), dtype=np.float64)
            except Exception as e:  # the student's code: report it, don't crash the notebook
                return Check(False, f"{case}, my_top_k raised {type(e).__name__}: {e}")
            if probs.shape != expected.shape:
                return Check(False, f"{case} it returned shape {probs.shape}, expected "
                                    f"{expected.shape}: one probability per token.")
            if not math.isclose(probs.sum(), 1.0, rel_tol=1e-6):
                return Check(False, f"{case} the probabilities sum to {probs.sum():.6g}, not 1: "
                                    "renormalise after zeroing the tokens outside the top k.")
            if np.count_nonzero(probs) != k:
                return Check(False, f"{case}, {np.count_nonzero(probs)} tokens have nonzero "
                                    f"probability; expected exactly k = {k}.")
            if not np.allclose(probs, expected, atol=1e-9):
                return Check(False, f"{case} the probabilities differ from a softmax over the "
                                    "k largest logits (the *largest*? a softmax, not logits / sum?).")
    return Check(True, "a softmax over the k largest logits and zero elsewhere, on every trial.")


def check_min_time_per_token_ms(answer, bandwidth_gbs, n_params=1_557_611_200, bytes_per_param=4):
    """At bandwidth_gbs, the least time in milliseconds GPT-2 XL (float32) can take per token."""
    n_bytes = n_params * bytes_per_param
    expected_ms = n_bytes / (bandwidth_gbs * 1e9) * 1e3
    how = ("each decoded token reads every weight once: bytes of weights / (bytes per second) "
           "= seconds; then convert to milliseconds. 1 GB/s = 10⁹ bytes per second.")
    solution = (f"{n_params:,} parameters × {bytes_per_param} bytes = {n_bytes / 1e9:.2f} GB read "
                f"per token; at {bandwidth_gbs:.3g} GB/s that is {expected_ms:,.3g} ms, however "
                f"fast the arithmetic is.")
    mistakes = [(expected_ms / 1e3, "that is in seconds; the question asks for milliseconds"),
                (expected_ms * 1e3, "that is in microseconds; the question asks for milliseconds"),
                (expected_ms / bytes_per_param, f"each float32 parameter is {bytes_per_param} bytes")]
    return check_number(answer, expected_ms, how, solution, mistakes)


DECODING_FLOPS_PER_BYTE = 0.5  # a float32 weight: 4 bytes read, one multiply-add (2 FLOPs)


def machine_line(machine_flops_per_byte):
    """Where decoding stands on a machine that does machine_flops_per_byte FLOPs in the time its
    memory delivers a byte, as a sentence. The verdict is read from the ratio as printed (3
    significant digits), so that the number and the words beside it always agree."""
    need = DECODING_FLOPS_PER_BYTE
    if machine_flops_per_byte is None:
        return (f"Compare it with a machine's FLOPs per byte (its GFLOP/s over its GB/s): where that "
                f"ratio is above {need}, decoding waits on memory.")
    ratio = float(f"{machine_flops_per_byte:.3g}")
    said = f"This machine does {ratio:.3g} FLOPs in the time its memory delivers one byte"
    if ratio > need:
        return f"{said}, {ratio / need:.3g} times what decoding needs: decoding waits on memory."
    if ratio == need:
        return f"{said}, just what decoding needs: memory and arithmetic would finish together."
    return f"{said}, less than the {need} decoding needs: here the arithmetic, not memory, sets the pace."


def check_arithmetic_intensity(answer, machine_flops_per_byte=None):
    """How many FLOPs per byte of weights read does decoding one token (float32) do? The
    notebook passes this machine's ratio, matmul GFLOP/s over bandwidth GB/s, for the solution."""
    how = ("in x @ W with x a single vector, each weight of W is read once and used in one "
           "multiply and one add; a float32 weight takes 4 bytes.")
    machine = machine_line(machine_flops_per_byte)
    solution = f"2 FLOPs (a multiply and an add) per weight / 4 bytes per weight = 0.5 FLOP per byte. {machine}"
    mistakes = [(2, "that is FLOPs per weight; divide by the 4 bytes each float32 weight takes"),
                (0.25, "a multiply-add is 2 FLOPs, not 1")]
    return check_number(answer, 0.5, how, solution, mistakes)


# ---------------------------------------------------------------------------------------------
# Notebook 04: Theorem 1
# ---------------------------------------------------------------------------------------------

P_EXERCISE = (0.6, 0.3, 0.1)  # draft p over three tokens
Q_EXERCISE = (0.2, 0.5, 0.3)  # target q


def check_p_accept(answer, p=P_EXERCISE, q=Q_EXERCISE):
    """With p = (0.6, 0.3, 0.1) and q = (0.2, 0.5, 0.3), what is P(accept), the chance that a
    token drafted from p is kept?"""
    p, q = np.asarray(p), np.asarray(q)
    expected = float(np.minimum(p, q).sum())
    how = "P(accept) = Σ_x p(x) min(1, q(x)/p(x)); simplify each term first."
    solution = (f"p(x) min(1, q(x)/p(x)) = min(p(x), q(x)), so P(accept) = Σ min(p, q) = "
                f"{' + '.join(f'{v:g}' for v in np.minimum(p, q))} = {expected:g}.")
    mistakes = [(1 - expected, "that is P(reject) = Σ max(0, q − p)"),
                (float(np.minimum(1, q / p).mean()), "average min(1, q/p) weighted by p(x), how often x is drafted")]
    return check_number(answer, expected, how, solution, mistakes)


def check_output_probability(answer, token=2, p=P_EXERCISE, q=Q_EXERCISE):
    """With the same p and q, what is the probability that one accept/resample step emits
    token 2 (accepted or resampled)?"""
    p, q = np.asarray(p), np.asarray(q)
    overlap, excess = min(p[token], q[token]), max(0.0, q[token] - p[token])
    expected = float(rejection.output_distribution(p, q)[token])
    how = ("add two ways to emit the token: drafted and accepted (min(p, q)), or rejected and then "
           "resampled (P(reject) × (q − p)+ of the token).")
    solution = (f"accepted: min(p, q) = {overlap:g}; resampled: P(reject) × (q − p)+ = "
                f"{1 - np.minimum(p, q).sum():g} × {excess / np.maximum(0, q - p).sum():g} = {excess:g}. "
                f"Together {expected:g} = q({token}), as Theorem 1 says.")
    mistakes = [(overlap, "that counts only accepted drafts; rejected steps resample and can emit it too"),
                (excess / np.maximum(0, q - p).sum(), "that is (q − p)+ alone; multiply by P(reject) and add the accepted part"),
                (p[token], "that is p: the draft's distribution, before the accept/resample step corrects it")]
    return check_number(answer, expected, how, solution, mistakes)


def residual_trials(seed=0):
    """(p, q) pairs to try a student's residual on: random, one with zeros in p, one almost equal."""
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(10)), rng.dirichlet(np.ones(10))
    sparse_p = np.array([0.5, 0.5, 0.0, 0.0])
    near_q = np.array([0.3, 0.3, 0.2, 0.2])
    return [(np.array(P_EXERCISE), np.array(Q_EXERCISE)), (p, q), (sparse_p, near_q),
            (near_q, np.array([0.31, 0.29, 0.2, 0.2]))]


def check_residual(my_residual):
    """Does my_residual(p, q) return (q − p)+ = max(0, q − p) / Σ max(0, q − p)?"""
    if not_answered(my_residual):
        return Check(False, "write your function my_residual(p, q), then pass it in instead of None.")
    if not callable(my_residual):
        return Check(False, f"expected a function my_residual(p, q), got {type(my_residual).__name__}.")
    for i, (p, q) in enumerate(residual_trials()):
        expected = rejection.residual(p, q)
        case = f"on trial pair {i + 1} (p = {np.round(p, 3).tolist()}, q = {np.round(q, 3).tolist()})"
        try:
            got = np.asarray(my_residual(p.copy(), q.copy()), np.float64)
        except Exception as e:  # the student's code: report it, don't crash the notebook
            return Check(False, f"{case} my_residual raised {type(e).__name__}: {e}")
        if got.shape != expected.shape:
            return Check(False, f"{case} it returned shape {got.shape}, expected {expected.shape}.")
        if np.any(got < -1e-12):
            return Check(False, f"{case} some probabilities are negative: take max(0, q − p), not q − p.")
        if not math.isclose(got.sum(), 1.0, rel_tol=1e-9):
            return Check(False, f"{case} it sums to {got.sum():.6g}: divide by Σ max(0, q − p).")
        if np.allclose(got, rejection.residual(q, p), atol=1e-12):
            return Check(False, f"{case} that is max(0, p − q) renormalised: the residual keeps what the target "
                                "wants more than the draft, max(0, q − p).")
        if not np.allclose(got, expected, atol=1e-12):
            first = int(np.argmax(np.abs(got - expected)))
            return Check(False, f"{case} token {first} gets {got[first]:.4g}, (q − p)+ gives it {expected[first]:.4g}: "
                                "take max(0, q − p) token by token, then divide by its sum.")
    return Check(True, "max(0, q − p), renormalised: where the target wants more than the draft "
                       "offered, in proportion to the shortfall.")


CAPSTONE_K_MAX = 16
CAPSTONE_C_SPREAD = 0.25  # a c within 25% of the runs' in-loop median ratio is the same measurement, estimated otherwise


def in_loop_c(run, autoregressive, per_token=True, steady=True, statistic=np.median):
    """c = t_draft / t_target from a speculative run and an autoregressive one, as the capstone's
    step 1 says (per_token, steady and the median: one drafted token's time, the first loop and the
    first token left out since they also read the prompt) or with one of the slips the answer key
    marks down (a loop's whole t_draft_s; the first loop and token kept; a mean)."""
    loops = run.loops[1:] if steady else run.loops
    times = autoregressive.token_times_s[1:] if steady else autoregressive.token_times_s
    drafted = [loop.t_draft_s / loop.K if per_token else loop.t_draft_s for loop in loops if loop.K]
    return float(statistic(drafted) / statistic(times))


PER_LOOP = ("a loop's t_draft_s is the time of all its K drafts: one drafted token's time is loop.t_draft_s / loop.K, "
            "and c compares one drafted token with one target token")
WITH_PROMPT = ("the first loop's draft calls and the first autoregressive token also read the whole prompt: leave out "
               "run.loops[0] and token_times_s[0], and take medians (one slow call moves a mean, not a median)")


def capstone_slips(run, autoregressive):
    """[(c, what went wrong)] for the ways of computing c from these runs that the answer key marks down."""
    slips = []
    for per_token in (True, False):
        for steady in (True, False):
            for statistic in (np.median, np.mean):
                wrong = ([] if per_token else [PER_LOOP]) + ([] if steady else [WITH_PROMPT])  # a mean is fair
                if wrong:
                    slips.append((in_loop_c(run, autoregressive, per_token, steady, statistic), "; and ".join(wrong)))
    first = run.loops[0]
    if first.K:
        slips += [(first.t_draft_s / first.K / autoregressive.token_times_s[0], WITH_PROMPT),
                  (first.t_draft_s / autoregressive.token_times_s[0], f"{PER_LOOP}; and {WITH_PROMPT}")]
    return slips


def capstone_runs_problem(run, autoregressive):
    """Why the runs handed to the capstone's check cannot be read (a sentence), or None."""
    try:
        loops, times = list(run.loops), list(autoregressive.token_times_s)
        steady = [loop.t_draft_s / loop.K for loop in loops[1:] if loop.K]
    except (AttributeError, TypeError):
        return ("pass the runs themselves: run = speculative_sampling(my_draft, target, ids, N=64, K=4, seed=0) and "
                "autoregressive = autoregressive_sampling(target, ids, 64, seed=0)")
    if not steady or len(times) < 2:
        return ("the runs are too short to leave out their first loop and first token (they also read the prompt): "
                "generate N = 64 tokens with each")
    return None


def capstone_c_slip(c, run, autoregressive):
    """A slip the answer key names in the learner's c, given the runs it was measured from (a
    sentence), or None: c is a slip's own value, or about K times the runs' (a loop's draft time)."""
    right = in_loop_c(run, autoregressive)
    for wrong, why in capstone_slips(run, autoregressive):
        if math.isclose(c, wrong, rel_tol=1e-6) and not math.isclose(wrong, right, rel_tol=0.01):
            return f"c = {c:.3g}: {why}."
    K = float(np.median([loop.K for loop in run.loops]))
    if abs(c / right - 1) > CAPSTONE_C_SPREAD and abs(c / (right * K) - 1) <= CAPSTONE_C_SPREAD:
        return f"c = {c:.3g}, about K = {K:g} times what your runs give: {PER_LOOP}."
    return None


def capstone_c_problem(c, run, autoregressive):
    """What is wrong with the learner's c, given the runs it was measured from (a sentence), or None."""
    right = in_loop_c(run, autoregressive)
    if abs(c / right - 1) <= CAPSTONE_C_SPREAD:
        return None
    return (f"c = {c:.3g} is not what the runs you passed give: timed inside their loops, c = {right:.3g} (the median "
            "of loop.t_draft_s / loop.K over the loops after the first, over the median of token_times_s after the "
            "first). Time the calls where the loops make them: the runs' own t_draft_s and token_times_s.")


def check_capstone_prediction(alpha, c, best_K, predicted_speedup, run=None, autoregressive=None, K_max=CAPSTONE_K_MAX):
    """The capstone (notebook 04): the alpha and c you measured for your draft, from the two runs you
    measured them with (`run`, speculative_sampling's result; `autoregressive`, autoregressive_sampling's),
    then the K in 1..K_max with the highest speedup by Leviathan et al.'s Theorem 3.8,
    (1 - alpha^(K+1)) / ((1 - alpha)(K c + 1)), and the speedup it predicts there. The runs let the
    check see how alpha and c were measured: the slips the answer key marks down (a loop's draft
    time taken for a token's, the first loop or token, which also read the prompt, kept in) are
    named; a c within 25% of the runs' in-loop ratio (a mean of the steady loops, say) is accepted."""
    if any(not_answered(x) for x in (alpha, c, best_K, predicted_speedup, run, autoregressive)):
        return Check(False, "fill in run, autoregressive, alpha, c, best_K and predicted_speedup (None marks what is left), "
                            "then run the cell again.")
    problem = capstone_runs_problem(run, autoregressive)
    if problem:
        return Check(False, problem + ".")
    alpha, c = as_number(alpha), as_number(c)
    if alpha is None or not 0 < alpha <= 1:
        return Check(False, f"alpha = {alpha!r}: the acceptance rate is a probability between 0 and 1 (accepted drafts / "
                            "drafts judged: result.alpha_hat of a run with your draft).")
    if not math.isclose(alpha, run.alpha_hat, rel_tol=1e-6):
        drafted = sum(loop.n_accepted for loop in run.loops) / max(1, sum(loop.K for loop in run.loops))
        why = ("that is accepted / drafted, which counts the drafts after a rejection, never judged; alpha_hat divides "
               "by the decisions made" if math.isclose(alpha, drafted, rel_tol=1e-6) else
               "alpha is the run's alpha_hat, accepted drafts / drafts judged")
        return Check(False, f"alpha = {alpha:.4g}, your run's alpha_hat is {run.alpha_hat:.4g}: {why}.")
    if c is None or not c > 0:
        return Check(False, f"c = {c!r}: the cost coefficient is a positive ratio, t_draft / t_target.")
    slip = capstone_c_slip(c, run, autoregressive)  # before c >= 1: a loop's draft time can be that large
    if slip:
        return Check(False, slip)
    if c >= 1:
        return Check(False, f"c = {c:.3g}: a draft step would cost as much as a target step or more. c is t_draft / "
                            "t_target (a drafted token's time over an autoregressive token's), not its inverse; a "
                            "draft that slow never pays (Leviathan et al.'s Corollary 3.9 asks alpha > c).")
    problem = capstone_c_problem(c, run, autoregressive)
    if problem:
        return Check(False, problem)
    expected_K = int(theory.best_K(alpha, c, K_max))
    if as_number(best_K) != expected_K:
        return Check(False, f"best_K = {best_K!r} is not where the formula peaks for alpha = {alpha:.3g}, c = {c:.3g}: "
                            f"compute theory.predicted_speedup_leviathan(alpha, K, c) for K = 1 .. {K_max} and take the "
                            "K with the largest value.")
    tokens = float(theory.expected_tokens_per_loop(alpha, expected_K))
    expected = float(theory.predicted_speedup_leviathan(alpha, expected_K, c))
    how = ("tokens per loop (1 − alpha^(K+1)) / (1 − alpha), divided by what a loop costs in target steps, "
           "K c + 1.")
    solution = (f"alpha and c measured inside the loops; at K = {expected_K} a loop yields {tokens:.2f} tokens for "
                f"{expected_K} × {c:.3g} + 1 = {expected_K * c + 1:.2f} target steps: {expected:.2f}x. Now run it and "
                "compare: the formula prices the scoring call as one target step and leaves out the loop's own work.")
    mistakes = [(tokens, "that is tokens per loop; a loop also costs K drafts: divide by K c + 1"),
                (tokens / expected_K / c, "the loop costs K c + 1 target steps (K drafts, then one scoring call), not K c")]
    return check_number(answer=predicted_speedup, expected=expected, how=how, solution=solution, mistakes=mistakes)


# ---------------------------------------------------------------------------------------------
# Notebook 05: speedup
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Notebook 06: other drafts
# ---------------------------------------------------------------------------------------------

def check_point_mass_residual(answer, q_x=0.3, q_y=0.2):
    """Prompt lookup drafts x̃ with p(x̃) = 1; the target gives it q(x̃) = 0.3. If x̃ is rejected,
    with what probability is the replacement a token y with q(y) = 0.2?"""
    expected = q_y / (1 - q_x)
    how = ("with p a point mass on x̃, max(0, q − p) is q everywhere except at x̃, where it is 0; "
           "then divide by its sum.")
    solution = (f"(q − p)+ is q without x̃, renormalised: q(y) / (1 − q(x̃)) = {q_y} / {1 - q_x:g} = {expected:.4f}. "
                f"Check Theorem 1: P(emit y) = P(reject) · {expected:.4f} = {1 - q_x:g} × {expected:.4f} = {q_y} = q(y).")
    mistakes = [(q_y, "that is q(y) itself; after a rejection the residual leaves x̃ out, so the rest is renormalised"),
                (q_y * (1 - q_x), "that multiplies q(y) by P(reject); the residual renormalises q without x̃: divide "
                 "by the mass left, 1 − q(x̃)"),
                (q_x, "that is the chance x̃ is accepted (r < q(x̃)); the question asks about the replacement")]
    return check_number(answer, expected, how, solution, mistakes)


def check_first_layers_cost(answer, n_layer=12, total_layers=48, n_embd=1600, n_vocab=50257, n_ctx=1024):
    """GPT-2 XL (48 layers, n_embd = 1600) drafting with its own first 12 layers, final layer norm
    and LM head. If a decoding step's time is proportional to the bytes of weights it reads,
    what is c = t_draft / t_target?"""
    from ..gpt2 import GPT2Config
    from .strategies import bytes_per_token
    full = GPT2Config(n_layer=total_layers, n_head=1, n_embd=n_embd, n_ctx=n_ctx, n_vocab=n_vocab)
    draft = GPT2Config(n_layer=n_layer, n_head=1, n_embd=n_embd, n_ctx=n_ctx, n_vocab=n_vocab)
    expected = bytes_per_token(draft) / bytes_per_token(full)
    block = 12 * n_embd**2 + 13 * n_embd
    how = ("count the weights each step reads: n_layer blocks of 12 n_embd² + 13 n_embd each (notebook 01), "
           "plus the token embedding, which is also the LM head (n_vocab × n_embd), the final layer norm and one "
           "row of positions; take the draft's over the target's.")
    solution = (f"({n_layer} × {block:,} + {n_vocab} × {n_embd} + ...) / ({total_layers} × {block:,} + ...) = {expected:.3f}: "
                f"more than {n_layer}/{total_layers} = {n_layer / total_layers:.2f}, because both read the whole "
                "embedding-and-head matrix every step.")
    mistakes = [(n_layer / total_layers, "that counts the blocks only; the draft also reads the embedding and LM head, "
                 "as large as several blocks, on every step")]
    return check_number(answer, expected, how, solution, mistakes)


# ---------------------------------------------------------------------------------------------
# A code exercise: the residual under temperature (notebook 04)
# ---------------------------------------------------------------------------------------------

def check_residual_at_temperature(residual_at, temperatures=(0.5, 1.0, 2.0), seed=0):
    """Does residual_at(logits_p, logits_q, temperature) return the residual the library's loop
    uses at that temperature, (q - p)+ of both models' distributions at it? The loop samples its
    drafts with the same controls as the target, so the p its drafts came from is at the
    temperature too. (What exactness needs is only that the residual uses the p the drafts were
    sampled from; the target's controls define the output.)"""
    if not_answered(residual_at) or not callable(residual_at):
        return Check(False, "write residual_at(logits_p, logits_q, temperature), then pass the function itself.")
    rng = np.random.default_rng(seed)
    logits_p, logits_q = rng.standard_normal(12) * 2, rng.standard_normal(12) * 2
    for temperature in temperatures:
        expected = rejection.residual(distribution(logits_p, temperature), distribution(logits_q, temperature))
        try:
            got = np.asarray(residual_at(logits_p.copy(), logits_q.copy(), temperature), np.float64)
        except Exception as e:  # the student's code: report it, don't crash the notebook
            return Check(False, f"at temperature {temperature} residual_at raised {type(e).__name__}: {e}")
        if got.shape == expected.shape and np.allclose(got, expected, atol=1e-9):
            continue
        mistakes = {
            "the temperature applied to q only": (distribution(logits_p), distribution(logits_q, temperature),
                "that is the residual of a draft sampled at temperature 1 against q at the temperature. A loop that "
                "drafted at temperature 1 would use exactly that, and still be exact (what exactness needs is a "
                "residual with the p the drafts were sampled from), only accepted less often; but the library's "
                "loop drafts at the target's temperature, so its p is at the temperature too"),
            "the temperature applied to p only": (distribution(logits_p, temperature), distribution(logits_q),
                "that residual is against q at temperature 1: the target's controls define what the text is "
                "distributed as, so with q left at temperature 1 the loop would sample from q at temperature 1, "
                "not at the temperature asked"),
            "the temperature ignored": (distribution(logits_p), distribution(logits_q),
                "that is the residual at temperature 1 for both: the loop would sample from q at temperature 1, "
                "not at the temperature asked")}
        for name, (p, q, why) in mistakes.items():
            wrong = rejection.residual(p, q)
            if got.shape == wrong.shape and np.allclose(got, wrong, atol=1e-9):
                return Check(False, f"at temperature {temperature}, {name}: {why}. Divide both models' logits by the "
                                    "temperature, softmax each, then take (q − p)+.")
        return Check(False, f"at temperature {temperature} the values differ from (q − p)+ of softmax(logits / temperature) "
                            "of each model.")
    return Check(True, "the controls reshape p and q first; the rejection step then works on the reshaped pair, "
                       "so the loop returns q at that temperature.")
