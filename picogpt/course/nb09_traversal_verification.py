"""Notebook 09 (traversal verification): what only it uses. Its numbers, as pure functions of what
they are handed (no drawing, no model run): one traversal laid out node by node (which node is
tested when, its acceptance w as the rejections before it left it, where the token after the kept
branch comes from), and the exact tokens per target call of the walk and of the traversal for a
toy draft and target, enumerated over every tree the draft can propose (the explorer's numbers);
its figures (one traversal drawn on its tree, the walk against the traversal on a toy setting);
and the traversal explorer. The verifiers are picogpt/tree.py's. The figures need matplotlib (the
`dev` extra).
"""

from dataclasses import dataclass
from functools import cache
from itertools import product

import numpy as np
from matplotlib.figure import Figure

from ..errors import PicoGPTError, shown
from ..tree import ROOT, Tree, traversal, traversal_output_distribution, walk_output_distribution
from .figures import figure_png, finish_tree_axes, new_ax, tree_layout
from .grading import TRIALS, Exercise, Part, Problem, check_sampler
from .widgets import png_output, slider

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
    largest |P(the first D + 1 tokens) - q's own joint of them| over every text of D + 1 tokens.
    Each context's rows are computed once (the same contexts recur in every tree)."""
    p_of, q_of = cache(p_of), cache(q_of)
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


# ---------------------------------------------------------------------------------------------
# The figures
# ---------------------------------------------------------------------------------------------

PASSED, FAILED, UNTESTED = "tested: kept", "tested: rejected", "not tested"
COLOURS = {PASSED: "tab:green", FAILED: "tab:red", UNTESTED: "lightgrey"}


def plot_traversal(tree, t, labels, root_label, ax=None, title="One traversal: the order of the tests, and each w"):
    """The tree top-down from the text's last token; each tested node labelled 'order. token' and
    'w = ..', coloured by its test; the kept branch drawn thick; the token after it below its end.
    `t` is a Traversal, `labels` [n_nodes] the nodes' token texts."""
    ax = new_ax(ax, (10, 4.2))
    xy, (root_x, root_y) = tree_layout(tree)
    order = {node: i for i, node in enumerate(t.tested, start=1)}
    status = [UNTESTED] * len(tree)
    for node, ok in zip(t.tested, t.passed):
        status[node] = PASSED if ok else FAILED
    kept_edges = set(t.branch)
    for node, parent in enumerate(tree.parents):
        x0, y0 = (root_x, root_y) if parent < 0 else xy[parent]
        ax.plot([x0, xy[node, 0]], [y0, xy[node, 1]], color="black" if node in kept_edges else "grey",
                lw=2.5 if node in kept_edges else 1, zorder=1)
    ax.text(root_x, root_y, root_label, ha="center", va="center", fontsize=9, zorder=3,
            bbox=dict(boxstyle="round", facecolor="white", edgecolor="black"))
    for node, (x, y) in enumerate(xy):
        text = f"{order[node]}. {labels[node]}" if node in order else labels[node]
        ax.text(x, y, text, ha="center", va="center", fontsize=9, zorder=3,
                bbox=dict(boxstyle="round", facecolor=COLOURS[status[node]], edgecolor="black", alpha=0.9))
        if node in order:
            ax.text(x, y - 0.28, f"w = {t.weights[order[node] - 1]:.2f}", ha="center", va="top", fontsize=8)
    x0, y0 = xy[t.branch[-1]] if t.branch else (root_x, root_y)
    ax.annotate(f"next token from\n{t.source}", xy=(x0, y0), xytext=(x0 + 0.5, y0 - 0.75), fontsize=8,
                ha="left", arrowprops=dict(arrowstyle="->", ls="--"))
    return finish_tree_axes(ax, xy, COLOURS, title, right=1.6, bottom=1.2)


def plot_tree_kept(panel, ax=None):
    """P(at least d drafts kept), d = 1 .. D, by the walk and by the traversal (TreeKeptPanel)."""
    ax = new_ax(ax, (7, 3.6))
    depths = np.arange(1, len(panel.shape) + 1)
    width = 0.38
    for i, (name, kept) in enumerate(panel.kept.items()):
        ax.bar(depths + (i - 0.5) * width, kept, width, label=f"{name}: {panel.tokens_per_call[name]:.3f} tokens per call")
    ax.set_xticks(depths)
    ax.set(xlabel="d (depth in the tree)", ylabel="P(at least d drafts kept)", ylim=(0, 1.05),
           title=f"Tree {panel.shape}: exact over every drafted tree")
    ax.legend(fontsize="small")
    return ax


# ---------------------------------------------------------------------------------------------
# The traversal explorer: a tree verified two ways
# ---------------------------------------------------------------------------------------------

TRAVERSAL_SHAPES = ((1, 1), (2, 1), (1, 1, 1), (2, 1, 1), (1, 1, 1, 1), (2, 1, 1, 1))


def traversal_update(p_a, q_a, shape):
    """What the traversal explorer shows for one setting: (readout HTML, figure outputs,
    TreeKeptPanel) for p = (p_a, 1 - p_a), q = (q_a, 1 - q_a) and a tree of `shape`."""
    panel = tree_kept_panel(p_a, q_a, shape)
    fig = Figure(figsize=(8, 3.8), layout="constrained")
    plot_tree_kept(panel, ax=fig.subplots())
    text = tree_kept_readout(panel)
    return text, (png_output(figure_png(fig), text),), panel


def traversal_explorer(p_a=2 / 3, q_a=1 / 3, shape=(2, 1)):
    """Sliders for p(a) and q(a), and the tree's shape: the walk against the traversal, exact. Starts at
    Sun et al.'s p and q. Returns an ipywidgets.VBox."""
    import ipywidgets as w
    sliders = {"p_a": slider("p(a), the draft", p_a, 0, 1, step=0.01), "q_a": slider("q(a), the target", q_a, 0, 1, step=0.01)}
    shapes = w.Dropdown(options=[(str(s), s) for s in TRAVERSAL_SHAPES], value=tuple(shape), description="tree shape",
                        style={"description_width": "initial"})
    readout_html = w.HTML()
    figure_out = w.Output(layout={"min_height": "300px"})

    def redraw(_change=None):
        readout_html.value, figure_out.outputs, _ = traversal_update(sliders["p_a"].value, sliders["q_a"].value,
                                                                     shapes.value)

    for control in [*sliders.values(), shapes]:
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([*sliders.values(), shapes]), readout_html, figure_out])


# ---------------------------------------------------------------------------------------------
# The exercise: traversal verification written by hand, graded by the one grader
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TreeRule:
    """One way to verify a drafted tree, as a value: `law(tree, q_rows)` -> {the kept branch's tokens
    then one token: probability}, and `hint`, what to fix."""
    name: str
    hint: str
    law: object


def token_from_the_original_row(tree, q_rows):
    """The traversal's tests, but the token after the kept branch drawn from its node's own row of q,
    the rows the rejections left ignored."""
    law, none_yet = {}, 1.0
    for node, w, _ in traversal(tree, q_rows):
        chance, none_yet = none_yet * w, none_yet * (1.0 - w)
        prefix = tuple(tree.tokens[n] for n in tree.branch(node))
        for y, q_y in enumerate(q_rows[1 + node]):
            law[prefix + (y,)] = law.get(prefix + (y,), 0.0) + chance * q_y
    return law


TRAVERSAL = TreeRule("traversal verification", "", traversal_output_distribution)
MISTAKES = {rule.name: rule for rule in (
    TreeRule("the walk", "that is notebook 07's walk, exact but token by token from the root: traversal "
             "verification tests the nodes from the leaves up (tree.traversal's order), each with the chance w that "
             "its whole branch is kept, and keeps the first branch that passes", walk_output_distribution),
    TreeRule("the token from the node's own row", "after the kept branch, draw the token from what the rejections "
             "of its children left (tree.traversal's row), not from the node's own row of q", token_from_the_original_row),
)}


def traversal_cases():
    """Drafted trees on which each mistake moves the law of the output by a total-variation distance
    of 0.2 or more (tests/test_traversal_course.py checks it): Sun et al.'s p and q on a chain of two,
    two children with one grandchild, a chain of three."""
    sun = np.array([2 / 3, 1 / 3])
    return ((Tree((0, 0), (ROOT, 0), np.array([sun, sun])), np.array([[1 / 3, 2 / 3]] * 3)),
            (Tree((0, 1, 0), (ROOT, ROOT, 0), np.array([[0.5, 0.3, 0.2], [0.0, 0.6, 0.4], [0.6, 0.2, 0.2]])),
             np.array([[0.2, 0.5, 0.3], [0.3, 0.3, 0.4], [0.4, 0.4, 0.2], [0.6, 0.2, 0.2]])),
            (Tree((0, 1, 0), (ROOT, 0, 1), np.array([[0.6, 0.3, 0.1], [0.2, 0.6, 0.2], [0.5, 0.3, 0.2]])),
             np.array([[0.3, 0.4, 0.3], [0.2, 0.3, 0.5], [0.4, 0.4, 0.2], [0.3, 0.3, 0.4]])))


def traversal_outcome(output, inputs, case):
    """((), the kept branch's tokens then the token), or the Problem of an output that is not
    (branch, token): nodes from the root down, each a child of the one before, and a token id."""
    tree, q_rows = case
    try:
        branch, token = output
        branch = [int(node) for node in branch]
    except (TypeError, ValueError):
        return None, Problem(f"it returned {shown(repr(output), 80)}; return (branch, token): the kept nodes, root "
                             "first, and the token after them, as tree.walk does.")
    parents = [ROOT, *branch[:-1]]
    if any(not 0 <= node < len(tree) or tree.parents[node] != parent for node, parent in zip(branch, parents)):
        return None, Problem(f"it returned the branch {branch}, which is not a path down the tree from the root "
                             f"(nodes' parents: {list(tree.parents)}, {ROOT} the root).")
    if isinstance(token, bool) or not isinstance(token, (int, np.integer)) or not 0 <= token < q_rows.shape[1]:
        return None, Problem(f"it returned the token {shown(repr(token), 40)}; the token after the branch is an id "
                             f"from 0 to {q_rows.shape[1] - 1}.")
    return ((), tuple(tree.tokens[node] for node in branch) + (int(token),)), None


def traversal_parts(case, number):
    """How many drafted tokens were kept; the token after them, given the kept branch."""
    tree, q_rows = case
    depth = max(tree.depths, default=0)
    where = f" (tree {number}: tokens {list(tree.tokens)}, parents {list(tree.parents)})"
    return [(Part("how many drafted tokens were kept", lambda key: ((), len(key[1]) - 1), tuple(range(depth + 1)),
                  "tokens kept", lambda n: f"{n} kept"), where),
            (Part("the token after the kept branch", lambda key: (key[1][:-1], key[1][-1]),
                  tuple(range(q_rows.shape[1])), "tokens", lambda y: f"token {y}",
                  lambda prefix: f"the kept tokens {list(prefix)}"), where)]


TRAVERSAL_EXERCISE = Exercise(
    "traversal verification", TRAVERSAL, MISTAKES, traversal_cases(), call="check_traversal(my_traverse)",
    run_in="The library's own is tree.traverse: tree_sampling(..., verify=\"traversal\") runs it.",
    inputs=lambda case, trials, rng: [case] * trials, outcome=traversal_outcome,
    law=lambda rule, case: {((), emitted): prob for emitted, prob in rule.law(*case).items()},
    parts=traversal_parts, explain=lambda error, refused, inputs, case: ("", ""),
    walk_through="Walk through it: test the nodes in tree.traversal's order, each against one uniform with its w; "
                 "keep the branch of the first that passes, then one token from the row it leaves; none passes: "
                 "one token from the root's row.",
    judged_on="how many drafted tokens were kept, the token after them", noun="tree",
    cases_text="trees of 2 and 3 nodes, one on Sun et al.'s p and q")


def check_traversal(fn, trials=TRIALS, seed=0):
    """Grade a learner's traverse(tree, q_rows, rng) -> (branch, token) by its output distribution
    (grading.check_sampler); returns a Check."""
    return check_sampler(fn, TRAVERSAL_EXERCISE, trials, seed)
