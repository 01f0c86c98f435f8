"""Notebook 06 (beyond one draft model): what only it uses, its questions: the residual of a point-mass
draft, and what a draft made of the target's first layers costs.

Every `check_...` is a pure function of the learner's answer returning a `Check` (grading.py):
"✔ right: ..." with the worked solution, or "✘ not yet: ..." with a hint (the method, or the known
mistake it matches) but not the number. The defaults of each checker are the numbers its
notebook's question asks about.
"""



from .grading import check_number


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
