"""Stand-in notebooks for checking tools/browser_test.py itself (`--stand-in good|broken`).

`good` has the widget structure of notebook 04's Theorem 1 explorer: FloatSliders
driving an HTML `P(accept) = …` readout and a matplotlib figure in an Output, and a
`Run Monte-Carlo` button drawing a histogram into a second Output, and a residual switch
(ToggleButtons) whose wrong choice reports `TV(output, q)`; computed with plain numpy.
`broken` breaks it the ways students meet: sliders wired to nothing, a widget whose model
the page never received ("Error displaying widget: model not found"), and a figure the browser
cannot draw (a PNG cut short). The harness must pass on the first and fail on the second.

Not run on its own: tools/browser_test.py imports it (`.venv/bin/python tools/browser_test.py --stand-in`).
"""

import json

import nbformat

EXPLORER_CODE = '''
import numpy as np
import ipywidgets as widgets
import matplotlib.pyplot as plt
from IPython.display import display

def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()

logits_q = np.array([2.0, 1.0, 0.5, 0.0, -0.5, -1.0])
logits_p = np.array([1.0, 1.5, 0.0, 0.5, -1.0, 0.0])
t_p = widgets.FloatSlider(value=1.0, min=0.2, max=3.0, step=0.1, description="T of p",
                          continuous_update=False)
t_q = widgets.FloatSlider(value=1.0, min=0.2, max=3.0, step=0.1, description="T of q",
                          continuous_update=False)
readout, fig_out, mc_out = widgets.HTML(), widgets.Output(), widgets.Output()
n_trials = widgets.IntSlider(value=2000, min=100, max=20000, step=100, description="trials n")
button = widgets.Button(description="Run Monte-Carlo")
switch = widgets.ToggleButtons(options=["correct: the residual (q − p)+", "wrong: resample from q"])

def update(change=None):
    p, q = softmax(logits_p / t_p.value), softmax(logits_q / t_q.value)
    readout.value = f"P(accept) = Σ min(p, q) = {np.minimum(p, q).sum():.3f}"
    if switch.value.startswith("wrong"):
        wrong = np.minimum(p, q) + (1 - np.minimum(p, q).sum()) * q
        readout.value += f" · TV(output, q) = {0.5 * np.abs(wrong - q).sum():.3f}"
        run_monte_carlo(None)
    with fig_out:
        fig_out.clear_output(wait=True)
        fig, ax = plt.subplots(figsize=(5, 2.5))
        ax.plot(p, "o-", label="p (draft)")
        ax.plot(q, "s-", label="q (target)")
        ax.set_xlabel("token")
        ax.set_ylabel("probability")
        ax.legend()
        plt.show()

def run_monte_carlo(_):
    q = softmax(logits_q / t_q.value)
    x = np.random.default_rng().choice(len(q), size=n_trials.value, p=q)
    with mc_out:
        mc_out.clear_output(wait=True)
        fig, ax = plt.subplots(figsize=(5, 2.5))
        ax.hist(x, bins=np.arange(len(q) + 1) - 0.5, density=True)
        ax.set_title(f"n = {n_trials.value}")
        plt.show()
        if switch.value.startswith("wrong"):
            print("resampled from q: exactly, TV(output, q) > 0")

WIRING
update()
display(widgets.VBox([t_p, t_q, switch, readout, fig_out, widgets.HBox([n_trials, button]), mc_out]))
'''
WIRED = ('t_p.observe(update, "value")\nt_q.observe(update, "value")\nbutton.on_click(run_monte_carlo)\n'
         'switch.observe(update, "value")')
UNWIRED = "button.on_click(run_monte_carlo)  # the sliders are wired to nothing"

# a widget view whose model does not exist in the kernel: what a stale saved output looks like
ORPHAN_VIEW = {
    "application/vnd.jupyter.widget-view+json": {"model_id": "0" * 32, "version_major": 2,
                                                 "version_minor": 0},
    "text/plain": "IntSlider(value=3, description='k')",
}


FIGURE = """
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(4, 2.5))
ax.plot([0, 1, 2], [1, 3, 2], "o-")
ax.set(xlabel="x", ylabel="y", title="a figure")
plt.show()
"""
# what a figure output looks like when its PNG is cut short: the page gets an <img> that never decodes
BROKEN_FIGURE = ("from IPython.display import display\n"
                 "display({'image/png': 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB', 'text/plain': '<Figure>'}, raw=True)")


def notebook(*sources):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("# Stand-in notebook for the browser test")]
    nb.cells += [nbformat.v4.new_code_cell(source.strip()) for source in sources]
    return nb


def write_stand_in(folder, kind="good"):
    """Write 01-intro (no widgets, a figure), 02-widgets and 04-theorem-1 stand-ins into folder."""
    folder.mkdir(parents=True, exist_ok=True)
    wiring = WIRED if kind == "good" else UNWIRED
    other = ("import ipywidgets as widgets\nwidgets.IntSlider(value=3, description='k')"
             if kind == "good" else
             f"import ipywidgets\nfrom IPython.display import display\n"
             f"display({json.dumps(ORPHAN_VIEW)}, raw=True)")
    notebooks = {
        "01-intro.ipynb": notebook("print('hello')", "%matplotlib inline", FIGURE if kind == "good" else BROKEN_FIGURE),
        "02-widgets.ipynb": notebook(other),
        "04-theorem-1.ipynb": notebook("%matplotlib inline", EXPLORER_CODE.replace("WIRING", wiring)),
    }
    for name, nb in notebooks.items():
        nbformat.write(nb, folder / name)
