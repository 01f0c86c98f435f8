"""The explorers' ipywidgets wiring: the controls notebooks 04, 07 and 08 share, and notebook 04's two explorers.

The Theorem 1 explorer's content comes from two pure functions, `explorer_update` (sliders and
the residual switch -> readout and figure) and `monte_carlo_update` (the Monte-Carlo button ->
histogram and summary); the acceptance explorer's from `acceptance_update` (two temperatures ->
readout and figure). Tests call them without a browser (tests/test_theorem1_widget.py);
`theorem1_explorer` and `acceptance_explorer` only connect sliders, the switch and the button
to them. Notebook 07's candidates explorer and notebook 08's drafts-kept explorer, in their own
modules, are built the same way on `toy_controls`, `slider` and `png_output`. (The pattern of the jupyter-widgets tutorial
"separating the logic from the widgets".)
"""

import base64
from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure

from ..sampling import distribution
from . import model_runs, panels
from .figures import figure_png, plot_acceptance, plot_histogram, theorem1_figure


def png_output(png, text):
    """An output record (nbformat display_data) showing a PNG, with a text fallback."""
    return {"output_type": "display_data", "metadata": {},
            "data": {"image/png": base64.b64encode(png).decode("ascii"), "text/plain": text}}


def text_output(text):
    return {"output_type": "stream", "name": "stdout", "text": text + "\n"}


def explorer_update(p, q, labels, shown=None, title=None, choice="(q − p)+"):
    """What the explorer shows for one slider setting and residual `choice` (panels.RESIDUALS):
    (readout HTML, figure outputs, panel)."""
    panel = panels.theorem1_panel(p, q, choice)
    fig = theorem1_figure(panel, labels, shown)
    if title:
        fig.suptitle(title)
    return panels.readout(panel), (png_output(figure_png(fig), f"Theorem 1 panels, P(accept) = {panel.p_accept:.3f}"),), panel


def monte_carlo_update(p, q, n, seed, labels, shown=None, choice="(q − p)+"):
    """What the explorer shows after `Run Monte-Carlo`: (histogram outputs, MonteCarlo)."""
    mc = panels.monte_carlo(p, q, n, seed, choice)
    fig = Figure(figsize=(7, 3.6), layout="constrained")
    plot_histogram(mc, q, labels, shown, ax=fig.subplots())
    panel = panels.theorem1_panel(p, q, choice)
    tv, over = panels.shown_tv(mc, q, shown)
    summary = f"{panels.monte_carlo_text(panel, mc)}; TV(empirical, q) = {tv:.4f} {over}"
    if shown is not None and len(shown) < len(q):
        summary += (f"\n(over all {len(q):,} tokens it is {mc.tv:.4f}: with so many rare tokens, TV over every token "
                    "only gets small once n is much larger than the vocabulary)")
    return (text_output(summary), png_output(figure_png(fig), summary)), mc


def slider(description, value, low, high, step=0.05):
    import ipywidgets as w
    return w.FloatSlider(value=value, min=low, max=high, step=step, description=description,
                         continuous_update=False, readout_format=".2f", style={"description_width": "initial"})


@dataclass(frozen=True)
class ExplorerPair:
    """What the explorer plots for one slider setting."""
    p: np.ndarray  # draft distribution [n_vocab]
    q: np.ndarray  # target distribution [n_vocab]
    labels: list  # labels of the tokens shown
    shown: np.ndarray = None  # the tokens shown (None: all, in order)
    title: str = None


def toy_controls():
    """Sliders for toy_distributions, and the function from their values to an ExplorerPair."""
    sliders = {"centre_p": slider("p (draft) centre", 2.0, 0, 7), "width_p": slider("p (draft) width", 1.5, 0.3, 4),
               "centre_q": slider("q (target) centre", 4.0, 0, 7), "width_q": slider("q (target) width", 1.0, 0.3, 4)}

    def pair(**values):
        p, q = panels.toy_distributions(**values)
        return ExplorerPair(p, q, list(panels.TOY_VOCAB), title="a toy vocabulary of 8 words")

    return sliders, pair


def model_controls(draft, target, ids, tok, n_show=10):
    """Sliders for a prompt position and the two temperatures; the logits are computed once here,
    so moving a slider runs no forward pass."""
    import ipywidgets as w
    logits_p, logits_q = model_runs.prompt_logits(draft, ids), model_runs.prompt_logits(target, ids)
    sliders = {"position": w.IntSlider(value=len(ids) - 1, min=0, max=len(ids) - 1, description="prompt position",
                                       continuous_update=False, style={"description_width": "initial"}),
               "temperature_p": slider("temperature of p (draft)", 1.0, 0, 2),
               "temperature_q": slider("temperature of q (target)", 1.0, 0, 2)}

    def pair(position, temperature_p, temperature_q):
        p, q = panels.distributions_at(logits_p, logits_q, position, temperature_p, temperature_q)
        shown = panels.shown_tokens(p, q, n_show)
        context = tok.decode([int(t) for t in ids[: position + 1]])
        return ExplorerPair(p, q, [panels.token_label(tok, t) for t in shown], shown,
                            title=f"next token after {context!r}: p = {draft.name} at temperature {temperature_p:.2f}, "
                                  f"q = {target.name} at temperature {temperature_q:.2f}")

    return sliders, pair


def theorem1_explorer(draft=None, target=None, ids=None, tok=None, n_show=10, seed=0):
    """The interactive Theorem 1 explorer: toy distributions by default, or the real models' next-token
    distributions after each position of the prompt `ids`. Returns an ipywidgets.VBox."""
    import ipywidgets as w
    if draft is None:
        sliders, make_pair = toy_controls()
    else:
        sliders, make_pair = model_controls(draft, target, ids, tok, n_show)
    readout_html = w.HTML(description="Theorem 1", style={"description_width": "initial"})
    residual_switch = w.ToggleButtons(options=[(label, key) for key, label in panels.RESIDUALS.items()],
                                      value="(q − p)+", description="after a rejection",
                                      style={"description_width": "initial", "button_width": "auto"})
    figure_out = w.Output(layout={"min_height": "300px"})
    n_trials = w.Dropdown(options=[("100", 100), ("1,000", 1000), ("10,000", 10_000), ("100,000", 100_000)],
                          value=10_000, description="trials n")
    run_button = w.Button(description="Run Monte-Carlo", tooltip="draft x̃ ~ p, accept or resample, n times",
                          button_style="primary")
    histogram_out = w.Output(layout={"min_height": "300px"})
    rng = np.random.default_rng(seed)
    current = {"ran": False}

    def redraw(_change=None):
        current["pair"] = pair = make_pair(**{name: s.value for name, s in sliders.items()})
        readout_html.value, figure_out.outputs, _ = explorer_update(pair.p, pair.q, pair.labels, pair.shown,
                                                                    pair.title, residual_switch.value)
        if current["ran"] and _change is not None and _change["owner"] is residual_switch:
            run_monte_carlo()  # the switch re-runs the trials: watch the output drift from q
        else:
            histogram_out.outputs = (text_output("Press “Run Monte-Carlo” to push n drafted tokens through accept/resample."),)

    def run_monte_carlo(_button=None):
        pair, current["ran"] = current["pair"], True
        histogram_out.outputs, _ = monte_carlo_update(pair.p, pair.q, n_trials.value, int(rng.integers(2**32)),
                                                      pair.labels, pair.shown, residual_switch.value)

    for control in [*sliders.values(), residual_switch]:
        control.observe(redraw, names="value")
    run_button.on_click(run_monte_carlo)
    redraw()
    return w.VBox([w.HBox(list(sliders.values())[:2]), w.HBox(list(sliders.values())[2:]), residual_switch,
                   readout_html, figure_out, w.HBox([n_trials, run_button]), histogram_out])


# ---------------------------------------------------------------------------------------------
# No exact rule accepts more: the acceptance explorer
# ---------------------------------------------------------------------------------------------

def acceptance_update(logits_p, logits_q, temperature_p, temperature_q, title=None):
    """What the acceptance explorer shows for two temperatures: (readout HTML, figure outputs,
    panels.Acceptance at this setting). logits_* [n_vocab]: both models' next-token logits."""
    now = panels.acceptance(distribution(logits_p, temperature_p), distribution(logits_q, temperature_q))
    curves = panels.acceptance_curves(logits_p, logits_q, temperature_p, temperature_q)
    fig = Figure(figsize=(12, 4.2), layout="constrained")
    plot_acceptance(curves, temperature_p, temperature_q, axes=fig.subplots(1, 2, sharey=True))
    if title:
        fig.suptitle(title)
    text = (f"p at τ = {temperature_p:.2f}, q at τ = {temperature_q:.2f}: rejection step "
            f"Σ p·min(1, q/p) = {now.rejection:.4f} &nbsp;·&nbsp; bound 1 − TV(p, q) = {now.bound:.4f} &nbsp;·&nbsp; "
            f"exact-match test Σ p·q = {now.exact_match:.4f}")
    return text, (png_output(figure_png(fig), text),), now


def acceptance_explorer(draft, target, ids, tok):
    """Two temperature sliders over the models' next-token distributions after the prompt `ids`:
    how often each exact rule keeps a drafted token. Returns an ipywidgets.VBox."""
    import ipywidgets as w
    logits_p, logits_q = (model_runs.prompt_logits(model, ids)[-1] for model in (draft, target))  # [n_vocab] each
    sliders = {"temperature_p": slider("temperature of p (draft)", 1.0, 0, 2),
               "temperature_q": slider("temperature of q (target)", 1.0, 0, 2)}
    readout_html = w.HTML(description="acceptance", style={"description_width": "initial"})
    figure_out = w.Output(layout={"min_height": "300px"})
    title = f"next token after {tok.decode([int(t) for t in ids])!r}: p = {draft.name}, q = {target.name}"

    def redraw(_change=None):
        readout_html.value, figure_out.outputs, _ = acceptance_update(
            logits_p, logits_q, sliders["temperature_p"].value, sliders["temperature_q"].value, title)

    for control in sliders.values():
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox(list(sliders.values())), readout_html, figure_out])
