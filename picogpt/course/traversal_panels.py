"""Notebook 09's numbers, as pure functions of what they are handed (no drawing, no model run): one
traversal laid out node by node (which node is tested when, its acceptance w as the rejections
before it left it, where the token after the kept branch comes from), and the exact tokens per
target call of the walk and of the traversal for a toy draft and target, enumerated over every
tree the draft can propose (the explorer's numbers). The verifiers are picogpt/tree.py's.
"""

from dataclasses import dataclass
from itertools import product

import numpy as np

from ..errors import PicoGPTError
from ..tree import ROOT, Tree, traversal, traversal_output_distribution, walk_output_distribution

# ---------------------------------------------------------------------------------------------
# One traversal, node by node
# ---------------------------------------------------------------------------------------------

FROM_Q = "q after it (a leaf)"
FROM_RESIDUAL = "what its children's rejections left"
FROM_ROOT = "the root's row after every rejection"


@dataclass(frozen=True)
class Traversal:
    """One traversal of a drafted tree with the uniforms eta [n_nodes] (tree.traverse's, one per node)."""
    tested: tuple  # the nodes in the order they were tested, up to the first that passed
    weights: tuple  # each tested node's w when it was tested
    eta: tuple  # each tested node's uniform
    branch: tuple  # the kept nodes, root first
    source: str  # where the token after the branch comes from: FROM_Q, FROM_RESIDUAL or FROM_ROOT
    row: np.ndarray  # that token's distribution [n_vocab]

    @property
    def passed(self):
        return tuple(e < w for e, w in zip(self.eta, self.weights))


def one_traversal(tree, q_rows, eta):
    """What tree.traverse does with these uniforms, step by step (tree.traversal's visits)."""
    eta = np.asarray(eta, np.float64)
    if eta.shape != (len(tree),):
        raise PicoGPTError(f"one uniform per node: {len(tree)} for this tree, got {eta.shape}")
    tested, weights = [], []
    for node, w, row in traversal(tree, q_rows):
        if node == ROOT:
            return Traversal(tuple(tested), tuple(weights), tuple(eta[tested]), (), FROM_ROOT, row)
        tested.append(node)
        weights.append(w)
        if eta[node] < w:
            source = FROM_RESIDUAL if tree.children(node) else FROM_Q
            return Traversal(tuple(tested), tuple(weights), tuple(eta[tested]), tuple(tree.branch(node)), source, row)


def traversal_lines(tree, t, labels):
    """One line per tested node: its order, its branch's tokens, w, eta and the verdict; then the kept
    branch and where the next token comes from. `labels` [n_nodes]: the nodes' token texts."""
    lines = []
    for order, (node, w, e, ok) in enumerate(zip(t.tested, t.weights, t.eta, t.passed), start=1):
        path = " ".join(repr(labels[n]) for n in tree.branch(node))
        lines.append(f"{order}. node {node} ({path}): w = {w:.3f}, eta = {e:.3f} -> "
                     + ("kept, with every node above it" if ok else "rejected"))
    kept = " ".join(repr(labels[n]) for n in t.branch) or "nothing"
    lines.append(f"kept: {kept}; the next token comes from {t.source}")
    return lines


def node_order(tree):
    """The order in which the traversal would test every node if each were rejected: children
    before their parent, siblings in the order they were drawn. It does not depend on p or q."""
    n_vocab = tree.p.shape[1]
    return [node for node, _, _ in traversal(tree, np.full((1 + len(tree), n_vocab), 1.0 / n_vocab)) if node != ROOT]


# ---------------------------------------------------------------------------------------------
# Every tree a toy draft can propose: the walk against the traversal, exactly
# ---------------------------------------------------------------------------------------------

def every_tree(p_of, q_of, shape):
    """Every tree of `shape` the draft can propose after the text, children drawn without replacement:
    [(Tree, q_rows [1 + n_nodes, V], probability)]. p_of(context), q_of(context) give the draft's and
    the target's rows after a tuple of tokens past the text (for enumeration: small vocabularies)."""
    def orders(p, m):  # every ordered draw of m candidates without replacement: (tokens, rows, prob)
        if m == 0 or p.sum() <= 0:
            return [((), [], 1.0)]
        row = p / p.sum()
        return [((int(x),) + rest, [row] + rows, float(row[x]) * prob) for x in np.flatnonzero(row)
                for rest, rows, prob in orders(np.where(np.arange(len(p)) == x, 0.0, row), m - 1)]

    trees = [((), (), [], 1.0, [ROOT])]  # tokens, parents, rows, probability, the last level's nodes
    for m in shape:
        grown = []
        for tokens, parents, rows, prob, level in trees:
            tree = Tree(tokens, parents)
            contexts = [() if n == ROOT else tuple(tokens[i] for i in tree.branch(n)) for n in level]
            for choice in product(*(orders(np.asarray(p_of(c), np.float64), m) for c in contexts)):
                new_tokens, new_parents, new_rows, chance, next_level = list(tokens), list(parents), list(rows), prob, []
                for parent, (drawn, drawn_rows, p_drawn) in zip(level, choice):
                    next_level += range(len(new_tokens), len(new_tokens) + len(drawn))
                    new_tokens += drawn
                    new_parents += [parent] * len(drawn)
                    new_rows += drawn_rows
                    chance *= p_drawn
                grown.append((tuple(new_tokens), tuple(new_parents), new_rows, chance, next_level))
        trees = grown
    out = []
    for tokens, parents, rows, prob, _ in trees:
        tree = Tree(tokens, parents, np.array(rows).reshape(len(tokens), -1))
        q_rows = np.array([q_of(())] + [q_of(tuple(tokens[i] for i in tree.branch(n))) for n in range(len(tree))])
        out.append((tree, q_rows, prob))
    return out


LAWS = {"walk (token by token)": walk_output_distribution, "traversal": traversal_output_distribution}


@dataclass(frozen=True)
class TreeKeptPanel:
    """The walk and the traversal on one toy setting, exact."""
    p: np.ndarray  # the draft's row, the same at every position [V]
    q: np.ndarray  # the target's [V]
    shape: tuple
    kept: dict  # verifier -> [D]: P(at least d drafts kept), d = 1 .. D
    tokens_per_call: dict  # verifier -> mean tokens emitted per target call
    n_trees: int  # the trees enumerated


def tree_kept_panel(p_a, q_a, shape):
    """p = (p_a, 1 - p_a) and q = (q_a, 1 - q_a) over {a, b} at every position (Sun et al.'s setting),
    a tree of `shape`: each verifier's chance of keeping at least d drafts, and its tokens per call,
    averaged over every tree the draft can propose."""
    p, q = np.array([p_a, 1 - p_a], np.float64), np.array([q_a, 1 - q_a], np.float64)
    if not (0 <= p_a <= 1 and 0 <= q_a <= 1):
        raise PicoGPTError(f"p(a) and q(a) are probabilities in [0, 1], got {p_a} and {q_a}")
    trees = every_tree(lambda _: p, lambda _: q, tuple(shape))
    kept, tokens = {}, {}
    for name, law_of in LAWS.items():
        at_least = np.zeros(len(shape))
        mean = 0.0
        for tree, q_rows, prob in trees:
            for out, chance in law_of(tree, q_rows).items():
                at_least[: len(out) - 1] += prob * chance
                mean += prob * chance * len(out)
        kept[name], tokens[name] = at_least, mean
    return TreeKeptPanel(p, q, tuple(shape), kept, tokens, len(trees))


def tree_kept_readout(panel):
    """The explorer's numbers as one HTML line: tokens per target call by each verifier, exact."""
    walk_name, traversal_name = LAWS
    walked, traversed = panel.tokens_per_call[walk_name], panel.tokens_per_call[traversal_name]
    return (f"tree {panel.shape}, p(a) = {panel.p[0]:.2f}, q(a) = {panel.q[0]:.2f}: tokens per target call, exact over "
            f"{panel.n_trees} drafted trees — the walk <b>{walked:.4f}</b>, the traversal <b>{traversed:.4f}</b> "
            f"(difference {traversed - walked:+.4f})")



def exactness_gap(p_of, q_of, shape, law_of):
    """One loop whose verifier emits by `law_of(tree, q_rows)` (the exact law: tree.traversal_output_distribution
    or tree.walk_output_distribution), over every tree of `shape`, then the target continuing: the
    largest |P(the first D + 1 tokens) - q's own joint of them| over every text of D + 1 tokens."""
    L = len(shape) + 1
    V = len(q_of(()))

    def q_joint(context, n):  # q's probability of each continuation of n tokens after context: {tokens: prob}
        if n == 0:
            return {(): 1.0}
        row = q_of(context)
        return {(y,) + rest: float(row[y]) * prob for y in range(V) for rest, prob in q_joint(context + (y,), n - 1).items()}

    joint = dict.fromkeys(q_joint((), L), 0.0)
    for tree, q_rows, prob in every_tree(p_of, q_of, shape):
        for emitted, chance in law_of(tree, q_rows).items():
            for rest, q_rest in q_joint(emitted, L - len(emitted)).items():
                joint[emitted + rest] += prob * chance * q_rest
    return max(abs(joint[text] - q_prob) for text, q_prob in q_joint((), L).items())
