"""Token trees: many drafts scored in one target call, and verified exactly (notebook 07).

Algorithm 2 drafts one chain x~_1 .. x~_K; a rejection at x~_1 throws the whole chain away.
A token tree drafts several candidates for a position and continues each of them, so a rejected
candidate leaves its siblings to try. The target scores every node in ONE call (each node sees
the text, its ancestors and itself: `attention_mask`, at the position of its depth: `positions`);
the walk from the root then uses the multi-candidate step at each node (rejection.accept_among:
SpecInfer's multi-step speculative sampling, Miao et al. 2023, arXiv 2305.09781; recursive
rejection sampling, Jeon et al. 2024, arXiv 2402.14160), and both KV caches keep the accepted
branch (KVCache.keep). A chain is the tree of shape (1, 1, ..., 1).

Exactness: the walk's token at each node is distributed as q given the text so far when each
node's candidates are drawn from the p rows the step is given (rejection.py says why), and the
tokens of the whole text then as autoregressive sampling from q, by notebook 04's induction over
positions: an accepted candidate's children were drawn from p at the true context, and a rejected
candidate's subtree is never looked at. TreeDraft draws a node's candidates without replacement.

Traversal verification (Weng, Hu, Chen, Liu, Mei, Qiu, Tian, Shi 2025, arXiv 2505.12398; notebook
09) verifies the same tree from its leaves toward the root instead: it judges a whole branch with
block verification's running weight, and a rejected node hands what it did not supply to its
parent and its remaining siblings. On a chain it is block verification (speculative.block_step).

Reading order: the tree and the two things a call needs (positions and mask), one scored call,
the draft that builds a tree, the walk, traversal verification, the loop and the value that names
it for a measurement.
The draft's contract, the checks of a learner's step and the recorder are speculative.py's.
"""

from dataclasses import dataclass
from functools import partial

import numpy as np

from .errors import PicoGPTError, echo, shown
from .gpt2 import causal_mask
from .rejection import accept_among, block_keep_probability, output_distribution_among, running_weight, weighted_residual
from .sampling import check_model, distribution, is_whole, random_generator, sample, validate_sampling_args
from .speculative import Draft, LoopRecorder, checked, draft_for, rows_problem

ROOT = -1  # the parent of the first level: the text's last token


# ---------------------------------------------------------------------------------------------
# The tree, and what one call over it needs
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tree:
    """Drafted tokens after a text: node i holds tokens[i], is a child of parents[i] (ROOT for
    the first level), and was drawn from p[i] [n_vocab]. Nodes are numbered level by level, so a
    parent comes before its children and a branch's nodes increase."""
    tokens: tuple
    parents: tuple
    p: np.ndarray = None  # [n_nodes, n_vocab]

    def __len__(self):
        return len(self.tokens)

    def children(self, node):
        """The nodes whose parent is `node` (ROOT: the first level), in the order they were drawn."""
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def branch(self, node):
        """The nodes from the first level down to `node`: its ancestors, then itself."""
        nodes = []
        while node != ROOT:
            nodes.append(node)
            node = self.parents[node]
        return nodes[::-1]

    @property
    def depths(self):
        """Each node's depth: 1 for the first level."""
        return [len(self.branch(i)) for i in range(len(self))]


def positions(tree, n_text):
    """Position numbers of the text's n_text tokens, then of each node: its depth after the text's
    last token (siblings share a position). [n_text + n_nodes]"""
    return np.concatenate([np.arange(n_text), n_text - 1 + np.array(tree.depths, np.int64)]).astype(np.int64)


def attention_mask(tree, n_text, start=0):
    """Who may attend to whom when the text is followed by the tree's nodes, 0 (sees) or -inf: the
    text causally; each node the whole text, its ancestors and itself. The rows from `start` on
    (a call feeds the positions after its cache's `start`), every key up to the last node:
    [n_text + n_nodes - start, n_text + n_nodes]."""
    n = n_text + len(tree)
    mask = np.full((n - start, n), -np.inf, np.float32)
    if start < n_text:
        mask[: n_text - start, :n_text] = causal_mask(n_text - start, start)  # the text's unseen tokens
    for node in range(max(0, start - n_text), len(tree)):
        row = n_text + node - start
        mask[row, :n_text] = 0
        mask[row, n_text + np.array(tree.branch(node))] = 0
    return mask


def tree_call(model, cache, sequence, tree, nodes):
    """One call of `model` over everything its cache has not seen of the text x_1 .. x_n =
    sequence followed by the tree: the logits after each of `nodes` (ROOT: after the text), which
    this call must feed. [len(nodes), n_vocab]"""
    n, start = len(sequence), len(cache)
    ids = (list(sequence) + list(tree.tokens))[start:]
    logits = model(ids, cache, positions(tree, n)[start:], attention_mask(tree, n, start))
    return logits[[n + node - start for node in nodes]]  # the row of a node: its place after the cache


def score_tree(target, cache, sequence, tree, controls):
    """Step 2 on a tree: one target call gives q after the text (row 0) and after each node
    (row 1 + i). Returns q_rows [1 + n_nodes, n_vocab]."""
    return distribution(tree_call(target, cache, sequence, tree, [ROOT, *range(len(tree))]), **controls)


# ---------------------------------------------------------------------------------------------
# The draft: a model that grows a tree level by level with its KV cache
# ---------------------------------------------------------------------------------------------

def draw_without_replacement(p, m, rng):
    """m distinct tokens from p, one at a time, each from p without those before it renormalised
    (fewer when p has fewer than m tokens of positive probability). Returns (tokens, rows
    [len(tokens), n_vocab]): row i is the distribution token i was drawn from."""
    tokens, rows, left = [], [], np.array(p, np.float64)
    while len(tokens) < m and left.sum() > 0:
        rows.append(left / left.sum())
        tokens.append(sample(rows[-1], rng))
        left[tokens[-1]] = 0.0
    return tokens, np.array(rows).reshape(len(rows), len(left))


class TreeDraft(Draft):
    """A draft for tree_sampling (speculative.Draft's contract): propose(sequence, shape, controls,
    rng) returns a Tree of at most that shape after x_1 .. x_n = sequence, each node's row of p
    the distribution its token was drawn from; keep(n, branch) after the walk."""


class ModelTreeDraft(TreeDraft):
    """A draft model that proposes a tree of `shape` = (m_1, .., m_D): m_1 candidates after the
    text, m_2 after each of those, and so on, each node's children drawn without replacement from
    p at that node. One draft call per level (the text's unseen tokens first, then each level's
    nodes under the tree's mask), as a chain of D drafts makes D calls."""

    def __init__(self, model):
        check_model(model, "draft", "or a TreeDraft of your own")
        self.model, self.name, self.models = model, f"{model.name}, tree", (model,)
        self.cache = None

    def start(self):
        self.cache = self.model.new_cache()

    def propose(self, sequence, shape, controls, rng):
        tokens, parents, p_rows = [], [], []
        level = [ROOT]  # the nodes whose children this round draws
        for m in shape:
            fed = Tree(tuple(tokens), tuple(parents))
            p_level = distribution(tree_call(self.model, self.cache, sequence, fed, level),
                                   **controls)  # p after each node of the level: [len(level), n_vocab]
            next_level = []
            for parent, p in zip(level, p_level):
                drawn, rows = draw_without_replacement(p, m, rng)
                next_level += range(len(tokens), len(tokens) + len(drawn))
                tokens += drawn
                parents += [parent] * len(drawn)
                p_rows += list(rows)
            level = next_level
        n_vocab = self.model.config.n_vocab
        return Tree(tuple(tokens), tuple(parents), np.array(p_rows).reshape(len(tokens), n_vocab))

    def keep(self, n, branch):
        fed = len(self.cache) - n  # the deepest level was never fed to the draft
        self.cache.keep(n, [node for node in branch if node < fed])


def checked_tree(tree, shape, n_vocab, name):
    """A tree draft's proposal as the loop uses it: a Tree of at most `shape`'s nodes, each
    node's parent an earlier node (or ROOT), its token in the vocabulary, its row of p a
    distribution under which the token is possible. One readable PicoGPTError otherwise."""
    def refuse(problem):
        raise PicoGPTError(f"the tree draft {shown(name, 60)} proposed {problem}; propose(sequence, shape, controls, "
                           f"rng) returns a Tree of at most {n_nodes(shape)} nodes for shape {shape}")

    if not isinstance(tree, Tree):
        refuse(echo(tree))
    n = len(tree.tokens)
    if n > n_nodes(shape) or len(tree.parents) != n or any(not ROOT <= parent < i for i, parent in enumerate(tree.parents)):
        refuse(f"a tree of {n} nodes with parents {echo(tree.parents)}")
    if any(not is_whole(x) or not 0 <= x < n_vocab for x in tree.tokens):
        refuse(f"the tokens {echo(tree.tokens)}")
    if np.shape(tree.p) != (n, n_vocab):
        refuse(f"p of shape {np.shape(tree.p)} for {n} nodes")
    problem = rows_problem(np.asarray(tree.p, np.float64), tree.tokens)
    if problem:
        refuse(problem)
    return tree


# ---------------------------------------------------------------------------------------------
# Steps 3 and 4 on a tree: walk from the root
# ---------------------------------------------------------------------------------------------

def walk(tree, q_rows, rng, step=accept_among):
    """From the root, the multi-candidate step among the current node's children with q at that
    node (q_rows[1 + node]; row 0 for the root): an accepted child becomes the current node; any
    other token ends the walk (from the residual, or from q after a leaf: the extra token).
    `step(candidates, p, q, rng) -> token` is rejection.accept_among or the learner's.
    Returns (branch: the accepted nodes, root first, token: the one after them)."""
    node, branch = ROOT, []
    while True:
        children = tree.children(node)
        token = step([tree.tokens[c] for c in children], tree.p[children], q_rows[1 + node], rng)
        accepted = [c for c in children if tree.tokens[c] == token]
        if not accepted:
            return branch, int(token)
        node = accepted[0]
        branch.append(node)


def walk_output_distribution(tree, q_rows):
    """The exact law of what walk emits (with accept_among) for this drafted tree: {emitted tuple:
    probability}. At each node reached, the multi-candidate step's law (rejection.py) says which
    child is kept, or which token ends the walk."""
    law = {}

    def down(node, chance, prefix):
        children = tree.children(node)
        emitted = output_distribution_among([tree.tokens[c] for c in children], tree.p[children], q_rows[1 + node])
        for y in np.flatnonzero(emitted):
            kept = [c for c in children if tree.tokens[c] == y]
            if kept:
                down(kept[0], chance * float(emitted[y]), prefix + (int(y),))
            else:
                law[prefix + (int(y),)] = law.get(prefix + (int(y),), 0.0) + chance * float(emitted[y])

    down(ROOT, 1.0, ())
    return law


# ---------------------------------------------------------------------------------------------
# Steps 3 and 4 on a tree, another way: traverse from the leaves (traversal verification)
# ---------------------------------------------------------------------------------------------
#
# Weng et al. 2025 (arXiv 2505.12398). The paper calls the draft M_s and the
# target M_b (our p and q), and a node's acceptance p_alpha (our running weight w, as in
# speculative.block_step). Each node carries w and the row of q after it (q_rows[1 + node]; row 0
# for the root, whose w is 1). A node's w is block verification's running weight down its
# branch, w = min(1, w_parent q_parent(x) / p(x)), with the parent's CURRENT w and row.
# The visit order is depth-first, children before their parent: from the root, go down through
# each node's first child still standing, test the node reached (one uniform eta against its w).
# - Accepted: the branch from the root to it is kept, and one token comes from its current row
#   (q after it if none of its children was rejected, else what their rejections left).
# - Rejected: it leaves the tree; its parent's row becomes (w q_parent - p)+ and its w becomes
#   Z / (Z + 1 - w), Z = sum max(0, w q_parent - p), with p the row the rejected node was drawn
#   from (rejection.weighted_residual, block_keep_probability: block verification's pieces). The
#   next sibling must be judged with the row it was drawn from: TreeDraft draws WITHOUT
#   replacement, so that row is p less the rejected tokens (the paper's updated M_s), and it is the
#   sibling's own row in the tree (drawn independently, it would be p, and exact too).
# When every node is rejected, the token comes from the root's current row.
# Exact: averaged over the drafting below it, a node's subtree keeps a branch through it and
# continues with y with probability w r(y), and rejects it with 1 - w (Weng et al. prove the
# output exact; notebook 09 gives this argument, by induction on the nodes below a node).

def traversal(tree, q_rows):
    """The nodes traversal verification tests, in order, with what it knows when it tests each:
    yields (node, w: the chance its branch is kept given that every node before it was rejected,
    row [n_vocab]: the distribution of the token after it if kept); last (ROOT, 1.0, the root's
    row). The order and the numbers do not depend on chance, only where the traversal stops."""
    rows = [np.asarray(row, np.float64) for row in q_rows]  # q, then what rejections left: rows[1 + node]
    weight = {ROOT: 1.0}  # w (the paper's p_alpha) of the root and of each node reached
    standing = {node: tree.children(node) for node in (ROOT, *range(len(tree)))}  # children not yet rejected
    node = ROOT
    while True:
        while standing[node]:  # down through the first child still standing, to a node with none
            child = standing[node][0]
            weight[child] = running_weight(weight[node], tree.p[child], rows[1 + node], tree.tokens[child])
            node = child
        if node == ROOT:
            yield ROOT, 1.0, rows[0]
            return
        yield node, weight[node], rows[1 + node]
        # Rejected: the node leaves; its parent must now supply what the branch through it did not.
        parent = tree.parents[node]
        standing[parent].pop(0)
        w, p, q = weight[parent], tree.p[node], rows[1 + parent]
        weight[parent], rows[1 + parent] = block_keep_probability(w, p, q), weighted_residual(w, p, q)
        node = parent


def traverse(tree, q_rows, rng):
    """Steps 3 and 4 by traversal verification, with walk's contract: (branch: the kept nodes,
    root first, token: the one after them). One uniform eta per node, all drawn first (on a chain
    node i gets block_step's eta_{i+1}: the same uniforms give the same output)."""
    eta = rng.random(len(tree))  # [n_nodes]
    for node, w, row in traversal(tree, q_rows):
        if node == ROOT or eta[node] < w:
            return tree.branch(node), sample(row, rng)


def traversal_output_distribution(tree, q_rows):
    """The exact law of what traverse emits for this drafted tree: {emitted tuple: probability},
    the kept branch's tokens then one. The node tested k-th is kept with probability
    (1 - w_1) .. (1 - w_{k-1}) w_k (every earlier test failed, its own passed)."""
    law, none_yet = {}, 1.0  # P(every node tested so far was rejected)
    for node, w, row in traversal(tree, q_rows):
        chance, none_yet = none_yet * w, none_yet * (1.0 - w)
        prefix = tuple(int(tree.tokens[n]) for n in tree.branch(node))
        for y in np.flatnonzero(row):
            law[prefix + (int(y),)] = law.get(prefix + (int(y),), 0.0) + chance * float(row[y])
    return law


VERIFIERS = {"token": walk, "traversal": traverse}  # verify=...: Steps 3-4 on a tree, each with walk's contract


# ---------------------------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TreeLoop:
    """One loop of tree sampling."""
    tree_tokens: tuple  # the tree's tokens, level by level
    parents: tuple  # each node's parent (ROOT = -1 for the first level)
    branch: tuple  # the accepted nodes, root first
    new_token: int  # the token after them: from a residual, or the extra token after a leaf
    t_draft_s: float  # the draft's calls (one per level) and its draws
    t_score_s: float  # the one target call over every node, and its q rows
    t_decide_s: float  # the walk and both caches' keep

    @property
    def n_nodes(self):
        return len(self.tree_tokens)

    @property
    def tokens(self):
        """The tokens this loop emitted: the accepted branch, then the new token."""
        return tuple(self.tree_tokens[node] for node in self.branch) + (self.new_token,)


@dataclass
class TreeResult:
    """The N tokens tree sampling produced, and every loop."""
    tokens: list
    loops: list  # [TreeLoop]
    seconds: float
    shape: tuple

    @property
    def tokens_per_loop(self):
        """Mean tokens emitted per loop, i.e. per target call (before cutting to N)."""
        return float(np.mean([len(loop.tokens) for loop in self.loops]))


def n_nodes(shape, stop_above=None):
    """The drafted tokens of a tree of this shape: m_1 + m_1 m_2 + ... + m_1 ... m_D (counted
    only until they pass `stop_above`, if given: a shape of 10**30 candidates is refused at once)."""
    nodes, level = 0, 1
    for m in shape:
        level *= m
        nodes += level
        if stop_above is not None and nodes > stop_above:
            break
    return nodes


def validate_shape(shape, max_nodes):
    """The tree's shape as a tuple of whole numbers >= 1, (m_1, .., m_D), D >= 1, of at most
    `max_nodes` nodes: every node sits in both KV caches beside the text for one call, so a tree
    is capped at the models' context (a wider one would take the memory of a longer text)."""
    if not isinstance(shape, (tuple, list)) or not shape or not all(is_whole(m) and m >= 1 for m in shape):
        raise PicoGPTError(f"a tree's shape is a tuple of the number of candidates per level, whole numbers >= 1, "
                           f"e.g. (2, 2) or (3, 1, 1); got {echo(shape)}")
    shape = tuple(int(m) for m in shape)
    if n_nodes(shape, stop_above=max_nodes) > max_nodes:
        raise PicoGPTError(f"a tree of shape {echo(shape)} has more than {max_nodes} nodes, the models' context: one "
                           "call scores every node, so a tree may hold at most that many; draft a smaller tree")
    return shape


def token_problem(output, n_vocab):
    """Why `output` cannot be the token the multi-candidate step emits (a sentence), or None."""
    if not isinstance(output, (int, np.integer)) or isinstance(output, (bool, np.bool_)):
        return "it must return one token id (a Python int)"
    if not 0 <= output < n_vocab:
        return f"token id {echo(output)} is outside the vocabulary (ids 0..{n_vocab - 1})"
    return None


def checked_node_step(step, n_vocab):
    """A learner's multi-candidate `step(candidates, p, q, rng)` as tree_sampling runs it
    (speculative.checked: copies in, an exception named, the output checked on every node): one
    token id in the vocabulary, handed back as a Python int."""
    run = checked(step, lambda output, *_: token_problem(output, n_vocab), "tree_sampling", "candidates",
                  "picogpt.course.tree_exercise.check_multi_candidate_step")
    return lambda candidates, p, q, rng: int(run(candidates, p, q, rng))


def tree_verifier(verify, step, n_vocab):
    """Steps 3-4 as tree_sampling runs them: the library's verifier named by `verify`, or the walk
    with a learner's multi-candidate `step`, checked on every node. One PicoGPTError otherwise."""
    if not isinstance(verify, str) or verify not in VERIFIERS:
        raise PicoGPTError(f"verify={echo(verify, 40)}: expected one of {', '.join(map(repr, VERIFIERS))}")
    if step is None:
        return VERIFIERS[verify]
    if verify != "token":
        raise PicoGPTError(f"give verify={verify!r} (the library's verifier) or step= (your own), not both")
    return partial(walk, step=checked_node_step(step, n_vocab))


def tree_sampling(draft, target, ids, N, *, shape=(2, 2), temperature=1.0, top_k=None, top_p=None, seed=None,
                  verify="token", step=None, on_loop=None):
    """Sample N tokens from `target` (q), with `draft` (p) proposing a tree of `shape` per loop:
    (m_1, .., m_D) candidates at each level below each node; (1,) * K is Algorithm 2's chain.
    `draft` is a model (wrapped in ModelTreeDraft) or a TreeDraft. The sampling controls apply to
    p and q; one numpy Generator from `seed` drives every draw. `step` replaces the multi-candidate
    step with your own `step(candidates, p, q, rng) -> token` (notebook 07's exercise), checked on
    every node as speculative_sampling checks its step. `verify` names the library's Steps 3-4
    (VERIFIERS: "token" walks from the root, "traversal" traverses from the leaves). `on_loop(trace)` is called after each loop
    (its time is not counted). Near the end of the context the tree gets shallower so that its
    deepest node fits."""
    check_model(target, "target")
    drafter = draft_for("tree_sampling", TreeDraft, draft, ModelTreeDraft)
    models = (*drafter.models, target)
    n_vocab, n_ctx = target.config.n_vocab, min(model.config.n_ctx for model in models)
    shape = validate_shape(shape, n_ctx)
    prompt = validate_sampling_args(ids, N, models, temperature=temperature, top_k=top_k, top_p=top_p)
    controls = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    rng = random_generator(seed)
    verify_tree = tree_verifier(verify, step, n_vocab)
    record = LoopRecorder(on_loop)
    drafter.start()
    target_cache = target.new_cache()
    sequence = list(prompt)  # x_1 .. x_n
    record.start()

    while len(sequence) - len(prompt) < N:
        n = len(sequence)
        record.start_loop()
        # Step 1. Draft a tree: m_1 candidates after x_1..x_n, m_2 after each of them, ...
        tree = checked_tree(drafter.propose(sequence, shape[: n_ctx - n], controls, rng), shape, n_vocab, drafter.name)
        record.lap("draft")
        # Step 2. One target call: q after the text and after every node.
        q_rows = score_tree(target, target_cache, sequence, tree, controls)
        record.lap("score")
        # Steps 3-4. Walk from the root (or traverse from the leaves); the accepted branch, then one token.
        branch, token = verify_tree(tree, q_rows, rng)
        sequence += [tree.tokens[node] for node in branch] + [token]
        # Both caches keep x_1..x_n and the accepted branch; neither has seen the new token yet.
        target_cache.keep(n, branch)
        drafter.keep(n, branch)
        record.end_loop(partial(TreeLoop, tree.tokens, tree.parents, tuple(branch), token))

    return TreeResult(tokens=sequence[len(prompt): len(prompt) + N], loops=record.loops, seconds=record.seconds(),
                      shape=shape)


@dataclass(frozen=True)
class TreeShape:
    """Tree sampling with a tree of this shape, as one value: what a measurement runs (measure/,
    the bench, the course), beside speculative.Chain for Algorithm 2's chain; `verify` names
    tree_sampling's verifier (VERIFIERS)."""
    shape: tuple
    verify: str = "token"

    @property
    def name(self):
        return f"tree {tuple(self.shape)}" + ("" if self.verify == "token" else f", {self.verify}")

    def sample(self, draft, target, ids, N, **options):
        """tree_sampling with this shape and verifier (`options`: seed, sampling controls, on_loop)."""
        return tree_sampling(draft, target, ids, N, shape=self.shape, verify=self.verify, **options)
