#!/usr/bin/env python3
"""Browser test: the course's widgets in JupyterLab, driven by a real headless Chromium.

nbval (`make test`) proves that every notebook's Python runs and prints what it printed when
committed (the cells it compares, which this test compares too). It cannot see the page a student
sees: "Error displaying widget", or a bare `FloatSlider(value=…)` where a slider should be, only
happen in the browser. This script starts JupyterLab from the running Python environment (the
project's `.venv` under `make browser-test`), drives Debian's Chromium through Playwright, and
checks, with the ipywidgets 8 DOM classes named in the widget contract:

1. landing: the page `make lab` opens (JupyterLab rooted at notebooks/) lists every notebook;
2. 04-theorem-1.ipynb: Run > Run All Cells finishes, every widget the kernel sent is drawn,
   and in every explorer on the page (a cell output with a `P(accept)` readout) moving a slider
   redraws the figure and changes the readout, pressing `Run Monte-Carlo` draws a
   histogram into a second Output, and switching the residual to a wrong one ("resample from q")
   says so in the readout and redraws the histogram with the output's distance from q;
3. 08-verify-the-block.ipynb and 09-traversal-verification.ipynb: each runs to the end, and
   moving a slider of its explorer (08's drafts kept, 09's walk against traversal) redraws the
   figure and changes the readout;
4. every other notebook: runs to the end, every widget is drawn, none failed (every notebook starts
   Run All at once, each in its own tab of one window, and each tab is brought to the front to be
   checked; the explorers of 2 and 3 are driven once all have run);
   and in every notebook, the cells nbval compares (`# NBVAL_CHECK_OUTPUT`) print what they
   printed when committed, judged by nbval's own comparison (`marked_differences`): CI runs each
   notebook once, here, instead of once under nbval and again here (.ci/run);
5. in every notebook, every figure the kernel sent (an image/png output) is drawn: an <img> in its
   cell's output with a non-zero natural size, decoded by the browser; and for each cell with a
   figure, a screenshot with that figure scrolled into the middle of the window.

The server serves a temporary copy of notebooks/ (nothing is written back) with its settings,
workspaces and runtime files in a temporary folder, so no user state leaks in or out. Chromium
runs with flags that stop it from calling outside. JupyterLab keeps every cell in the page
(notebook windowing off), so what is checked and photographed is what a student scrolling down
sees. Screenshots (each figure, before and after each interaction) go to $BROWSER_TEST_OUT, else
browser-test-out/. Exit status 0 = all checks passed.

    make browser-test                        # installs Chromium (apt) and Playwright (pip) first
    .venv/bin/python tools/browser_test.py --stand-in   # the harness against its own stand-in
"""

import argparse
import atexit
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
# headless, and no outside connections: no sync, no component updates, no background fetches,
# and no host name resolves (the page talks to 127.0.0.1 only)
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-quic", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]
LOCAL_URLS = ("http://127.0.0.1:", "ws://127.0.0.1:", "data:", "blob:", "about:")
EXPLORER = "04-theorem-1.ipynb"
THEOREM1_READOUT = "P(accept)"  # what the Theorem 1 explorer's readout says
# the explorers whose sliders are moved too: each notebook with the words its readout always holds
SLIDER_EXPLORERS = {"08-verify-the-block.ipynb": "drafts kept per loop",
                    "09-traversal-verification.ipynb": "tokens per target call, exact over"}
MC_BUTTON = "Run Monte-Carlo"
WRONG_RESIDUAL = "wrong: resample from q"  # a button of the explorer's residual switch
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
# what ipywidgets / jupyterlab_widgets write where a widget could not be drawn
WIDGET_ERRORS = ("Error displaying widget", "Error rendering widget", "Error creating widget",
                 "Could not create a view")
# `FloatSlider(value=1.0, …)`, `VBox(children=(…))`: a widget's text repr shown instead of it
WIDGET_REPR = re.compile(r"\b[A-Z]\w*\((?:children|value|description|layout|options|outputs)=")

# every wait is bounded (seconds); the machine has 2 shared cores, so they are generous
SERVER_START_S = 120
PAGE_LOAD_S = 180
KERNEL_READY_S = 120
RUN_ALL_S = 600  # notebooks 05 and 06 time the models for a few minutes on a busy machine
WIDGET_RENDER_S = 60
INTERACTION_S = 60
SECOND_SLIDER_S = 15  # the first slider gets INTERACTION_S; the others are a fallback
FIGURES_S = 30  # for the browser to decode the last images
TOTAL_S = 1200

# top-level outputs of a cell (not the outputs nested inside an ipywidgets Output)
CELL_OUTPUTS = ".jp-Cell-outputArea > .jp-OutputArea-child > .jp-OutputArea-output"


class CheckFailed(Exception):
    """A check on the page failed; the message says what a person would have seen."""


class RunTimedOut(Exception):
    """The whole run passed its cap (TOTAL_S): stop every check, clean up, fail."""


# ---------------------------------------------------------------------------------------------
# JupyterLab server: temp state, random port, token, stopped on every exit path


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now (JupyterLab's, here and in the tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def isolated_env(state_dir):
    """Environment for the server and its kernels: every Jupyter/IPython/mpl dir in state_dir."""
    folders = {
        "JUPYTER_CONFIG_DIR": "config", "JUPYTER_DATA_DIR": "data", "JUPYTER_RUNTIME_DIR": "runtime",
        "JUPYTERLAB_SETTINGS_DIR": "settings", "JUPYTERLAB_WORKSPACES_DIR": "workspaces",
        "IPYTHONDIR": "ipython", "MPLCONFIGDIR": "matplotlib",
    }
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_PATH", "JUPYTER_CONFIG_PATH")}
    env.update({name: str(state_dir / sub) for name, sub in folders.items()})
    env["JUPYTER_PLATFORM_DIRS"] = "1"
    return env


def write_lab_settings(settings_dir):
    """No news pop-up, no update check, no autosave (the served copy stays as it was), and every
    cell kept in the page (no windowing: a cell scrolled out of view is still drawn)."""
    settings = {
        "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    }
    for plugin, values in settings.items():
        path = settings_dir / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def descendants(pid):
    """All live descendants of pid (kernels run in their own sessions, so killpg misses them)."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class LabServer:
    """`jupyter lab` on 127.0.0.1 with a token, rooted at root_dir, state in state_dir."""

    def __init__(self, root_dir, state_dir):
        self.root_dir, self.state_dir = root_dir, state_dir
        self.port, self.token = free_port(), secrets.token_hex(24)
        self.log_path = state_dir / "jupyterlab.log"
        self.proc = None

    def url(self, path=""):
        sep = "&" if "?" in path else "?"
        return f"http://127.0.0.1:{self.port}/{path}{sep}token={self.token}"

    def start(self):
        write_lab_settings(self.state_dir / "settings")
        cmd = [
            sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
            "--ip=127.0.0.1", f"--port={self.port}", "--port-retries=0",
            f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root_dir}",
            "--ServerApp.terminals_enabled=False", "--LabApp.expose_app_in_browser=True",
            "--LabApp.extension_manager=readonly",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.root_dir, env=isolated_env(self.state_dir),
                                         stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        atexit.register(self.stop)
        self._wait_ready()

    def _wait_ready(self):
        deadline = time.monotonic() + SERVER_START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise CheckFailed(f"JupyterLab exited with status {self.proc.returncode} "
                                  f"before serving:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=5):
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(0.5)
        raise CheckFailed(f"JupyterLab did not answer within {SERVER_START_S} s:\n{self.log_tail()}")

    def log_tail(self, n_chars=3000):
        try:
            return self.log_path.read_text(errors="replace")[-n_chars:]
        except OSError:
            return "(no server log)"

    def api(self, path, method="GET"):
        request = urllib.request.Request(self.url(f"api/{path}"), method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def end_sessions(self):
        """Shut down every notebook's kernel, so the next notebook has the cores to itself."""
        try:
            for session in self.api("sessions"):
                self.api(f"sessions/{session['id']}", method="DELETE")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            print(f"  (could not shut the kernels down: {exc})")

    def stop(self):
        """Shut kernels and server down politely, then kill whatever is left."""
        if self.proc is None or self.proc.poll() is not None:
            return
        family = descendants(self.proc.pid)
        try:
            self.api("shutdown", method="POST")
            self.proc.wait(timeout=15)
        except (urllib.error.URLError, OSError, subprocess.TimeoutExpired):
            pass
        for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(timeout=wait_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        for pid in family:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


# ---------------------------------------------------------------------------------------------
# which notebooks, where


def serve_copy(notebooks_dir, root_dir):
    """Copy the course notebooks (and anything beside them) to the folder the server serves."""
    shutil.copytree(notebooks_dir, root_dir, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))


# ---------------------------------------------------------------------------------------------
# page helpers


class Shots:
    """Numbered screenshots in out_dir; every path is printed as it is written."""

    def __init__(self, out_dir):
        self.out_dir, self.paths = out_dir, []
        out_dir.mkdir(parents=True, exist_ok=True)
        for old in out_dir.glob("[0-9][0-9]-*.png"):  # this tool's names only: last run's shots
            old.unlink()

    def take(self, target, name):
        path = self.out_dir / f"{len(self.paths) + 1:02d}-{name}.png"
        try:
            target.screenshot(path=str(path), timeout=30_000)
        except Exception as exc:  # a missing screenshot must not hide the real result
            print(f"  (screenshot {path.name} failed: {exc})")
            return None
        self.paths.append(path)
        print(f"  screenshot: {path}")
        return path


# resolves once the browser has drawn two more frames: what the page changed before is on screen
NEXT_PAINT_JS = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def painted(page):
    """Wait until the browser has drawn what the page just changed (a scroll, a redrawn output):
    two animation frames, however long they take on a busy machine, instead of a fixed pause."""
    page.evaluate(NEXT_PAINT_JS)


def wait_for(predicate, timeout_s, what, poll_s=0.5):
    """Poll predicate() until it returns something truthy; CheckFailed after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise CheckFailed(f"{what} (waited {timeout_s} s)")
        time.sleep(poll_s)


# the notebook's kernel status ("idle", "busy", …), null while it has no kernel
KERNEL_STATUS_JS = """() => {
  const app = window.jupyterapp;
  if (!app) {
    const e = document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator');
    return e ? e.getAttribute('data-status') : null;
  }
  const panel = app.shell.currentWidget;
  const session = panel && panel.sessionContext && panel.sessionContext.session;
  return session && session.kernel ? session.kernel.status : null;
}"""

# per code cell: its prompt ("[3]:", "[*]:", "[ ]:") and whether it has any source
PROMPTS_JS = """() => Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell')).map(c => {
  const prompt = c.querySelector('.jp-InputPrompt');
  const editor = c.querySelector('.jp-InputArea-editor');
  return [prompt ? prompt.textContent.trim() : '', editor ? editor.textContent.trim().length > 0 : false];
})"""

# per cell: outputs in the notebook model with a MIME type starting with `mimePrefix`, and what is
# drawn in the cell's output areas: widgets at top level ('widgets'), or decoded <img> of non-zero
# natural size outside any ipywidgets Output ('figures')
OUTPUT_COUNTS_JS = """([mimePrefix, drawnKind, outputsSelector]) => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  const cells = Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell'));
  const areas = c => Array.from(c.querySelectorAll(outputsSelector));
  const isWidget = o => o.querySelector(':scope > .jupyter-widgets') !== null;
  const drawn = cells.map(c => drawnKind === 'widgets' ? areas(c).filter(isWidget).length
      : areas(c).filter(o => !isWidget(o)).flatMap(o => Array.from(o.querySelectorAll('img')))
          .filter(i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0).length);
  let sent = null;
  if (panel && panel.content && panel.content.model) {
    const model = panel.content.model.cells;
    sent = [];
    for (let i = 0; i < model.length; i++) {
      const cell = model.get(i);
      let n = 0;
      if (cell.type === 'code') {
        for (let j = 0; j < cell.outputs.length; j++) {
          if (Object.keys(cell.outputs.get(j).data || {}).some(m => m.startsWith(mimePrefix))) n++;
        }
      }
      sent.push(n);
    }
  }
  return {sent, drawn};
}"""


def open_notebook(page, server, name, workspace):
    """Open one notebook in its own fresh workspace and wait until its kernel is idle."""
    page.goto(server.url(f"lab/workspaces/{workspace}/tree/{quote(name)}?reset"),
              wait_until="domcontentloaded", timeout=PAGE_LOAD_S * 1000)
    page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first.wait_for(timeout=PAGE_LOAD_S * 1000)

    def kernel_ready():
        # "Select Kernel" shows when the page opens the notebook before it has the kernel
        # list (a race on a slow machine); a person presses Select, so do the same
        dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
        if dialog.count() and dialog.first.is_visible():
            print(f"  dialog on open: {' '.join(dialog.first.inner_text().split())[:120]!r}; "
                  "pressing its default button")
            dialog.first.locator(".jp-mod-accept").click(timeout=10_000)
            return False
        return page.evaluate(KERNEL_STATUS_JS) == "idle"
    wait_for(kernel_ready, KERNEL_READY_S,
             f"{name}: the kernel did not start and become idle after opening")


def execution_started(page):
    """True once a cell is queued or running, or every non-empty code cell has a number."""
    prompts = page.evaluate(PROMPTS_JS)
    return (any("*" in prompt for prompt, _ in prompts)
            or all(re.search(r"\[\d+\]", prompt) for prompt, has_source in prompts if has_source))


def run_all_cells(page):
    """Run > Run All Cells through the menu bar; the app's command if the menu does not answer."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    try:
        page.locator(".lm-MenuBar-item", has_text=re.compile(r"^\s*Run\s*$")).click(timeout=15_000)
        label = page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^\s*Run All Cells\s*$"))
        page.locator(".lm-Menu-item:visible").filter(has=label).click(timeout=15_000)
        wait_for(lambda: execution_started(page), 20, "")
        return "menu Run > Run All Cells"
    except (PlaywrightTimeout, CheckFailed):
        page.keyboard.press("Escape")
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        return "command notebook:run-all-cells (the menu did not start the run)"


def wait_until_run(page, name, timeout_s):
    """Wait until no cell is queued or running and the kernel is idle (3 polls in a row, half a
    second apart: Run All queues every cell at once, so a cell still to run shows [*] throughout)."""
    deadline, calm = time.monotonic() + timeout_s, 0
    while calm < 3:
        if time.monotonic() > deadline:
            running = sum("*" in prompt for prompt, _ in page.evaluate(PROMPTS_JS))
            raise CheckFailed(f"{name}: still running after {timeout_s} s "
                              f"({running} cells queued or running, kernel "
                              f"{page.evaluate(KERNEL_STATUS_JS)!r})")
        busy = (page.evaluate(KERNEL_STATUS_JS) != "idle"
                or any("*" in prompt for prompt, _ in page.evaluate(PROMPTS_JS)))
        calm = 0 if busy else calm + 1
        time.sleep(0.5)
    return page.evaluate(PROMPTS_JS)


def check_all_ran(page, name, prompts):
    """Run All stops at the first error: every non-empty code cell must carry a number."""
    for index, (prompt, has_source) in enumerate(prompts):
        if has_source and not re.search(r"\[\d+\]", prompt):
            if index == 0:
                raise CheckFailed(f"{name}: code cell 1 did not run (prompt {prompt!r})")
            stderr = page.locator(".jp-NotebookPanel .jp-CodeCell").nth(index - 1).locator(
                ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
            error = stderr.last.text_content()[-800:] if stderr.count() else "(no error output)"
            raise CheckFailed(f"{name}: Run All stopped at code cell {index}, cells from "
                              f"{index + 1} on did not run; code cell {index} printed:\n{error}")
    return sum(1 for _, has_source in prompts if has_source)


# every cell's outputs in the notebook model, as nbformat writes them (None for a cell without outputs)
CELL_OUTPUTS_JS = """() => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  if (!(panel && panel.content && panel.content.model)) return null;
  const model = panel.content.model.cells;
  const outputs = [];
  for (let i = 0; i < model.length; i++) {
    const cell = model.get(i);
    outputs.push(cell.type === 'code' ? cell.outputs.toJSON() : null);
  }
  return outputs;
}"""


def marked_differences(committed, outputs):
    """nbval's verdict (`make notebooks`: --nbval-lax) on a run's outputs, so that the browser's
    run of a notebook serves both checks: for each code cell of the committed notebook marked
    `# NBVAL_CHECK_OUTPUT` and run when committed, its outputs in the run (outputs[i], i counting
    every cell) against the committed ones, compared by nbval's own code (streams coalesced,
    widget model ids and figures' bytes not compared). Returns (cells compared, [(cell number,
    how it differs)])."""
    import nbformat
    from nbval.plugin import IPyNbCell, coalesce_streams, find_comment_markers, find_metadata_tags, nocolors

    skip = ("metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
            "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg")  # nbval's, without nbdime
    # nbval's comparison is a method of its pytest item: what it reads of one, with no pytest run
    # (no sanitizing patterns, and its plain "reference output ... disagrees with" report)
    judge = SimpleNamespace(parent=SimpleNamespace(skip_compare=skip, sanitize_patterns={}), colors=nocolors,
                            config=None, ihook=SimpleNamespace(pytest_assertrepr_compare=lambda **compared: []))
    judge.sanitize = lambda text: IPyNbCell.sanitize(judge, text)
    judge.format_output_compare = lambda *compared: IPyNbCell.format_output_compare(judge, *compared)
    n_compared, differences = 0, []
    for index, cell in enumerate(nbformat.read(str(committed), as_version=4).cells):
        if cell.cell_type != "code" or cell.execution_count is None:
            continue
        options = {**dict(find_metadata_tags(cell.metadata) or {}), **dict(find_comment_markers(cell.source))}
        if not options.get("check"):
            continue
        n_compared += 1
        run = coalesce_streams([nbformat.from_dict(joined(output)) for output in outputs[index] or []])
        if not IPyNbCell.compare_outputs(judge, run, coalesce_streams(cell.outputs)):
            differences.append((index + 1, "\n".join(judge.comparison_traceback)))
    return n_compared, differences


def joined(output):
    """An output as nbformat.read gives it: a text stored as a list of lines is one string."""
    def text(value):
        return "".join(value) if isinstance(value, list) else value

    data = {"data": {mime: text(value) for mime, value in output["data"].items()}} if "data" in output else {}
    return {**output, **({"text": text(output["text"])} if "text" in output else {}), **data}


def check_marked_outputs(page, name, committed):
    """The cells nbval compares print what they printed when the notebook was committed."""
    outputs = page.evaluate(CELL_OUTPUTS_JS)
    if outputs is None:
        raise CheckFailed(f"{name}: the page holds no notebook model to read the cells' outputs from")
    n_compared, differences = marked_differences(committed, outputs)
    if differences:
        number, how = differences[0]
        raise CheckFailed(f"{name}: {len(differences)} of the {n_compared} cells marked NBVAL_CHECK_OUTPUT print "
                          f"something else than when committed; cell {number}:\n{how[-1500:]}")
    return n_compared


def widget_problems(page):
    """Widget error messages or widget text reprs anywhere in the notebook's outputs."""
    texts = page.locator(".jp-NotebookPanel .jp-OutputArea-output").all_text_contents()
    problems = [f"{error!r} shown" for error in WIDGET_ERRORS if any(error in t for t in texts)]
    problems += [f"widget shown as text: {match.group(0)}…" for t in texts
                 for match in [WIDGET_REPR.search(t)] if match]
    return problems


def check_widgets_drawn(page, name):
    """Every widget-view output the kernel sent is drawn as a widget, and nothing failed."""
    def counts_settled():
        counts = page.evaluate(OUTPUT_COUNTS_JS, [WIDGET_VIEW_MIME, 'widgets', CELL_OUTPUTS])
        sent = counts["sent"] if counts["sent"] is not None else counts["drawn"]
        drawn_all = len(sent) == len(counts["drawn"]) and all(
            d >= s for s, d in zip(sent, counts["drawn"]))
        if not drawn_all and widget_problems(page):  # an error message is final: stop waiting
            raise CheckFailed("")
        return counts if drawn_all else None
    try:
        counts = wait_for(counts_settled, WIDGET_RENDER_S, "")
    except CheckFailed:
        counts = page.evaluate(OUTPUT_COUNTS_JS, [WIDGET_VIEW_MIME, 'widgets', CELL_OUTPUTS])
        sent = counts["sent"] or []
        missing = [i + 1 for i, (s, d) in enumerate(zip(sent, counts["drawn"])) if d < s]
        if len(sent) != len(counts["drawn"]):
            missing.append(f"({len(sent)} cells in the notebook, "
                           f"{len(counts['drawn'])} on the page)")
        raise CheckFailed(f"{name}: widgets sent by the kernel were not drawn in cells {missing} "
                          f"(sent {counts['sent']}, drawn {counts['drawn']}); "
                          f"{'; '.join(widget_problems(page)) or 'no error text on the page'}") from None
    problems = widget_problems(page)
    if problems:
        raise CheckFailed(f"{name}: {'; '.join(problems)}")
    n_widgets = sum(counts["drawn"])
    n_sliders = page.locator(".jp-NotebookPanel .widget-slider").count()
    if counts["sent"] is None:
        print("  (window.jupyterapp not available: counted drawn widgets only)")
    return n_widgets, n_sliders


def check_figures_drawn(page, name, shots):
    """Every figure the kernel sent is drawn (an <img> with a natural size in its cell), and each
    cell with figures is photographed scrolled into view. Returns the number of figures."""
    def counts():
        return page.evaluate(OUTPUT_COUNTS_JS, ['image/', 'figures', CELL_OUTPUTS])

    def all_drawn():
        c = counts()
        sent = c["sent"] if c["sent"] is not None else c["drawn"]
        return c if len(sent) == len(c["drawn"]) and all(d >= s for s, d in zip(sent, c["drawn"])) else None
    try:
        found = wait_for(all_drawn, FIGURES_S, "")
    except CheckFailed:
        c = counts()
        sent = c["sent"] or []
        missing = [i + 1 for i, (s, d) in enumerate(zip(sent, c["drawn"])) if d < s]
        raise CheckFailed(f"{name}: figures sent by the kernel are not drawn (no decoded image of non-zero size) "
                          f"in cells {missing} (image outputs per cell {sent}, drawn {c['drawn']})") from None
    if found["sent"] is None:
        print("  (window.jupyterapp not available: counted drawn figures only)")
    cells = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell")
    for index, n in enumerate(found["drawn"]):
        if n:
            image = cells.nth(index).locator(f"{CELL_OUTPUTS} img").first
            image.evaluate("img => img.scrollIntoView({block: 'center'})")
            painted(page)
            shots.take(page, f"{Path(name).stem}-figure-cell{index + 1}")
    return sum(found["drawn"])


# ---------------------------------------------------------------------------------------------
# the Theorem 1 explorer (notebook 04)


def output_images(scope):
    """The img src of each ipywidgets Output inside scope, as a list of lists."""
    return scope.evaluate("""root => Array.from(root.querySelectorAll('.widget-output'))
        .map(o => Array.from(o.querySelectorAll('img')).map(i => i.getAttribute('src') || ''))""")


def changed_outputs(before, after):
    return [i for i, (b, a) in enumerate(zip(before, after)) if a and a != b]


def readout_text(scope, marker=THEOREM1_READOUT):
    """The text of the ipywidgets HTML in scope that contains `marker` (the explorer's readout)."""
    texts = scope.locator(".widget-html .widget-html-content").all_text_contents()
    return next((" ".join(t.split()) for t in texts if marker in t), None)


def slider_value(slider):
    """What the slider's own readout shows (e.g. '2.15'), else its aria value."""
    readout = slider.locator(".widget-readout")
    text = readout.first.text_content() if readout.count() else None
    return (text or slider.locator(".noUi-handle").first.get_attribute("aria-valuenow") or "").strip()


def move_slider(page, slider):
    """Nudge one slider a few steps with the keyboard; drag its handle if the value did not move."""
    handle = slider.locator(".noUi-handle").first
    handle.scroll_into_view_if_needed(timeout=10_000)
    value_before = slider_value(slider)
    at_max = handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")
    handle.focus(timeout=10_000)
    for _ in range(3):
        handle.press("ArrowLeft" if at_max else "ArrowRight", timeout=10_000)
    page.wait_for_timeout(300)
    if slider_value(slider) != value_before:
        return "keyboard", value_before, slider_value(slider)
    box = handle.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + (-40 if at_max else 40), box["y"] + box["height"] / 2, steps=8)
    page.mouse.up()
    page.wait_for_timeout(300)
    return "drag", value_before, slider_value(slider)


def settle(scope, calm_polls=3, timeout_s=INTERACTION_S, marker=THEOREM1_READOUT):
    """Wait until the readout and the images stop changing (calm_polls polls in a row)."""
    last, calm, deadline = None, 0, time.monotonic() + timeout_s
    while calm < calm_polls and time.monotonic() < deadline:
        now = (readout_text(scope, marker), output_images(scope))
        calm = calm + 1 if now == last else 0
        last = now
        time.sleep(0.5)


def check_slider_updates(page, name, scope, tag, shots, marker=THEOREM1_READOUT):
    """Moving a slider changes the explorer's readout (the HTML containing `marker`) and redraws
    the figure.

    Sliders are tried in page order (some, like the number of trials, move neither); returns
    the indices of the Outputs the figure was redrawn in."""
    sliders = scope.locator(".widget-slider")
    if sliders.count() == 0:
        raise CheckFailed(f"{name}: {tag} has no .widget-slider next to its {marker} readout")
    images_before = output_images(scope)
    if not any(images_before):
        raise CheckFailed(f"{name}: {tag} shows no figure (img inside an ipywidgets Output)")
    readout_before = readout_text(scope, marker)
    shots.take(scope, f"{tag}-before-slider")
    tried = []
    for i in range(sliders.count()):
        slider = sliders.nth(i)
        label = (slider.locator(".widget-label").first.text_content() or f"slider {i + 1}").strip()
        how, v0, v1 = move_slider(page, slider)
        if v0 == v1:
            tried.append(f"{label!r}: did not move by keyboard or drag")
            continue
        try:
            wait_for(lambda: readout_text(scope, marker) != readout_before
                     and changed_outputs(images_before, output_images(scope)),
                     INTERACTION_S if i == 0 else SECOND_SLIDER_S, "")
        except CheckFailed:
            tried.append(f"{label!r} {v0} -> {v1} ({how}): readout {readout_text(scope, marker)!r}, "
                         f"changed outputs {changed_outputs(images_before, output_images(scope))}")
            continue
        figure_outputs = changed_outputs(images_before, output_images(scope))
        settle(scope, marker=marker)  # each key press is a change: let the last one's redraw land
        shots.take(scope, f"{tag}-after-slider")
        print(f"  {tag}: slider {label!r} {v0} -> {v1} ({how}): {readout_before!r} -> "
              f"{readout_text(scope, marker)!r}; figure redrawn in Output #{figure_outputs[0] + 1}")
        return figure_outputs
    shots.take(scope, f"{tag}-slider-FAILED")
    raise CheckFailed(f"{name}: {tag}: no slider changed both the {marker} readout and the "
                      f"figure: {'; '.join(tried)}")


def check_monte_carlo(page, name, scope, tag, shots, figure_outputs):
    """Pressing `Run Monte-Carlo` draws (or redraws) a histogram in an Output of its own."""
    button = scope.locator("button.jupyter-button", has_text=re.compile(rf"^\s*{MC_BUTTON}\s*$"))
    if button.count() == 0:
        raise CheckFailed(f"{name}: {tag} has no button.jupyter-button labelled {MC_BUTTON!r}")
    images_before = output_images(scope)
    button.first.scroll_into_view_if_needed(timeout=10_000)
    shots.take(scope, f"{tag}-before-monte-carlo")
    button.first.click(timeout=10_000)

    def histogram_outputs():
        return [i for i in changed_outputs(images_before, output_images(scope))
                if i not in figure_outputs]
    try:
        drawn = wait_for(histogram_outputs, INTERACTION_S, "")
    except CheckFailed:
        shots.take(scope, f"{tag}-monte-carlo-FAILED")
        raise CheckFailed(f"{name}: {tag}: pressing {MC_BUTTON!r} drew no new image in an Output "
                          f"other than the figure's (images per Output before: "
                          f"{[len(i) for i in images_before]}, after: "
                          f"{[len(i) for i in output_images(scope)]}); "
                          f"{'; '.join(widget_problems(page)) or 'no widget error shown'}") from None
    painted(page)
    shots.take(scope, f"{tag}-after-monte-carlo")
    print(f"  {tag}: {MC_BUTTON!r} drew a histogram in Output #{drawn[0] + 1}")


def check_residual_switch(page, name, scope, tag, shots):
    """Switching the residual to a wrong one: the readout says the output is not q, and the
    Monte-Carlo histogram is redrawn with the exact distance TV(output, q)."""
    button = scope.locator(".widget-toggle-buttons button", has_text=WRONG_RESIDUAL)
    if button.count() == 0:
        raise CheckFailed(f"{name}: {tag} has no residual switch button {WRONG_RESIDUAL!r}")
    images_before = output_images(scope)
    button.first.scroll_into_view_if_needed(timeout=10_000)
    button.first.click(timeout=10_000)
    try:
        wait_for(lambda: "TV(output, q)" in (readout_text(scope) or "")
                 and changed_outputs(images_before, output_images(scope))
                 and scope.locator(".widget-output", has_text="exactly, TV(output, q)").count() > 0,
                 INTERACTION_S, "")
    except CheckFailed:
        shots.take(scope, f"{tag}-residual-switch-FAILED")
        raise CheckFailed(f"{name}: {tag}: switching to {WRONG_RESIDUAL!r} did not show TV(output, q) in the "
                          f"readout and a redrawn histogram (readout now {readout_text(scope)!r})") from None
    painted(page)
    shots.take(scope, f"{tag}-after-residual-switch")
    print(f"  {tag}: residual switch {WRONG_RESIDUAL!r}: {readout_text(scope)[-60:]!r}")


def check_explorers(page, name, shots):
    """Every explorer on the page (a cell output with a P(accept) readout) answers its controls."""
    readout = page.locator(".widget-html", has_text="P(accept)")
    explorers = page.locator(f".jp-NotebookPanel {CELL_OUTPUTS}").filter(has=readout)
    if explorers.count() == 0:
        raise CheckFailed(f"{name}: no ipywidgets HTML readout containing 'P(accept)' on the page")
    for k in range(explorers.count()):
        tag = f"{Path(name).stem}-explorer{k + 1}"
        figure_outputs = check_slider_updates(page, name, explorers.nth(k), tag, shots)
        check_monte_carlo(page, name, explorers.nth(k), tag, shots, figure_outputs)
        check_residual_switch(page, name, explorers.nth(k), tag, shots)
    return explorers.count()


# ---------------------------------------------------------------------------------------------
# checks


def check_landing(page, server, notebooks, shots):
    """The page `make lab` opens: the file browser at the course folder lists the notebooks."""
    page.goto(server.url("lab"), wait_until="domcontentloaded", timeout=PAGE_LOAD_S * 1000)
    items = page.locator(".jp-DirListing-content .jp-DirListing-itemText")

    def listed():
        return {items.nth(i).text_content().strip() for i in range(items.count())
                if items.nth(i).is_visible()}
    try:
        wait_for(lambda: set(notebooks) <= listed(), PAGE_LOAD_S, "")
    except CheckFailed:
        raise CheckFailed(f"the JupyterLab file browser shows {sorted(listed())}, "
                          f"not the course notebooks {notebooks}") from None
    shots.take(page, "landing")
    return f"file browser lists all {len(notebooks)} notebooks"


def start_notebook(page, server, name, workspace):
    """Open a notebook and start Run All; returns (start time, how it was started, the served
    copy's file: the notebook as committed, outputs included)."""
    t0 = time.monotonic()
    open_notebook(page, server, name, workspace)
    return t0, run_all_cells(page), server.root_dir / name


def finish_notebook(page, name, shots, t0, how, committed):
    """Wait until the notebook started by start_notebook has run, then check its cells, nbval's
    verdict on their outputs, its widgets and figures, in the tab in front."""
    page.bring_to_front()
    prompts = wait_until_run(page, name, RUN_ALL_S)
    n_cells = check_all_ran(page, name, prompts)
    n_checked = check_marked_outputs(page, name, committed)
    n_widgets, n_sliders = check_widgets_drawn(page, name)
    first_widget = page.locator(f".jp-NotebookPanel {CELL_OUTPUTS} > .jupyter-widgets")
    if first_widget.count():
        first_widget.first.evaluate("widget => widget.scrollIntoView({block: 'center'})")
        shots.take(page, f"{Path(name).stem}-after-run-all")
    n_figures = check_figures_drawn(page, name, shots)
    return (f"{n_cells} code cells ran ({how}) in {time.monotonic() - t0:.0f} s, {n_checked} of them printing "
            f"what they printed when committed; {n_widgets} widget outputs drawn, {n_sliders} sliders; "
            f"{n_figures} figures drawn")


def explore_theorem1(page, name, shots):
    """04's explorers, on a notebook that has run: sliders, Monte-Carlo, the residual switch."""
    n_explorers = check_explorers(page, name, shots)
    return (f"in each of {n_explorers} explorers a slider redraws the figure and P(accept), "
            f"{MC_BUTTON} draws a histogram, and the residual switch shows the output drift from q")


def explore_slider(page, name, shots):
    """On a notebook that has run, moving a slider of its one explorer (the output whose readout
    holds SLIDER_EXPLORERS[name]) redraws the figure and changes the readout."""
    marker = SLIDER_EXPLORERS[name]
    readout = page.locator(".widget-html", has_text=marker)
    explorers = page.locator(f".jp-NotebookPanel {CELL_OUTPUTS}").filter(has=readout)
    if explorers.count() != 1:
        raise CheckFailed(f"{name}: expected one explorer with a {marker!r} readout, found {explorers.count()}")
    check_slider_updates(page, name, explorers.first, f"{Path(name).stem}-explorer", shots, marker)
    return f"a slider of its explorer redraws the figure and the {marker!r} readout"


def interactions(notebooks):
    """{notebook: what is done on its page once it has run}: 04's explorers, the slider explorers."""
    chosen = {name: explore_slider for name in SLIDER_EXPLORERS if name in notebooks}
    return {EXPLORER: explore_theorem1, **chosen} if EXPLORER in notebooks else chosen


# ---------------------------------------------------------------------------------------------


def require_playwright():
    try:
        import playwright.sync_api  # noqa: F401 (imported only to find out whether it is installed)
    except ImportError:
        raise CheckFailed("Playwright is not installed in this Python: pip install -e '.[browser]' "
                          "(make browser-test does this)") from None


def launch_chromium(playwright, profile_dir):
    """Chromium with one profile on disk, in profile_dir, as a student's browser has: its tabs
    share one window, one HTTP cache and one cache of compiled scripts, so a tab reuses the
    JupyterLab scripts that the tabs before it fetched and compiled, and only the tab in front is
    drawn all the time (each is brought to the front to be checked). Playwright's default, a
    fresh context in memory for each tab, each in a window of its own, compiles and draws them all."""
    if not Path(CHROMIUM).exists():
        raise CheckFailed(f"{CHROMIUM} not found — install it: apt-get install -y chromium "
                          "(make browser-test does this)")
    return playwright.chromium.launch_persistent_context(
        str(profile_dir), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, timeout=60_000,
        viewport={"width": 1400, "height": 1000})


def run_checks(root_dir, notebooks, server, shots, results):
    """Every check in its own try, so one failure does not hide the others: the landing page, then
    Run All in every notebook at once, each in its own tab (they are checked for what they print
    and draw, not for how fast they run), then each checked as it finishes; last, one at a time
    on a machine no longer running notebooks, the explorers' sliders and buttons (interactions)."""
    from playwright.sync_api import sync_playwright

    explored = interactions(notebooks)
    if EXPLORER not in notebooks:
        results.append((EXPLORER, False, "missing: the course's Theorem 1 explorer notebook"))
        print(f"FAIL  {EXPLORER}: missing from the served notebooks (the widget contract's explorer)")

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright, server.state_dir / "chromium")
        try:
            page, console = new_page(browser)
            report(results, "landing", page, console, shots, lambda: check_landing(page, server, notebooks, shots))
            page.close()
            t0, started, ran = time.monotonic(), [], []
            for i, name in enumerate(notebooks):  # Run All in every tab first ...
                page, console = new_page(browser)
                begun = report(results, name, page, console, shots,
                               lambda: start_notebook(page, server, name, f"nb{i}"), quiet=True)
                started.append((name, page, console, begun))
            for name, page, console, begun in started:  # ... then wait for each and check it
                summary = begun and report(results, name, page, console, shots,
                                           lambda: finish_notebook(page, name, shots, *begun), quiet=name in explored)
                if summary and name in explored:
                    ran.append((name, page, console, summary))
                else:
                    page.close()
            print(f"  ({time.monotonic() - t0:.0f} s for {len(started)} notebooks side by side)")
            for name, page, console, summary in ran:  # the explorers, one at a time
                page.bring_to_front()
                report(results, name, page, console, shots, lambda: f"{summary}; {explored[name](page, name, shots)}")
                page.close()
            server.end_sessions()
        finally:
            browser.close()


def new_page(browser):
    """A tab that records console errors, uncaught exceptions and requests leaving the machine."""
    page = browser.new_page()
    page.set_default_timeout(60_000)
    console = []
    page.on("console", lambda m, c=console: m.type == "error" and c.append(f"console error: {m.text}"))
    page.on("pageerror", lambda e, c=console: c.append(f"uncaught: {e}"))
    page.on("request", lambda r, c=console: r.url.startswith(LOCAL_URLS)
            or c.append(f"request to outside the machine (blocked): {r.url}"))
    return page, console


def report(results, name, page, console, shots, check, quiet=False):
    """Run one check; record and print PASS (unless quiet) or FAIL with a screenshot. Returns
    what the check returned, or None if it failed."""
    from playwright.sync_api import Error as PlaywrightError

    try:
        detail = check()
    except (CheckFailed, PlaywrightError) as exc:
        shots.take(page, f"{Path(name).stem}-FAILED")
        message = str(exc).removeprefix(f"{name}: ")
        results.append((name, False, message))
        print(f"FAIL  {name}: {message}")
        detail = None
    else:
        if not quiet:
            results.append((name, True, detail))
            print(f"PASS  {name}: {detail}")
    for line in console[:10]:
        print(f"  browser: {line[:300]}")
    console.clear()
    return detail


def on_timeout(signum, frame):
    raise RunTimedOut(f"the whole browser test ran past its {TOTAL_S} s cap")


def on_terminate(signum, frame):
    raise SystemExit(f"browser test stopped by signal {signum}")


def main(argv=None):
    global TOTAL_S
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebooks", type=Path, default=REPO / "notebooks",
                        help="folder of course notebooks to serve (a copy is served)")
    parser.add_argument("--stand-in", nargs="?", const="good", choices=["good", "broken"],
                        help="serve the harness's own stand-in notebooks instead (self-test: "
                             "'good' must pass, 'broken' must fail)")
    parser.add_argument("--out", type=Path,
                        default=Path(os.environ.get("BROWSER_TEST_OUT") or REPO / "browser-test-out"),
                        help="screenshots folder (default $BROWSER_TEST_OUT or browser-test-out/)")
    parser.add_argument("--timeout-s", type=int, default=TOTAL_S, help="cap on the whole run")
    args = parser.parse_args(argv)
    TOTAL_S = args.timeout_s

    t_start = time.monotonic()
    signal.signal(signal.SIGALRM, on_timeout)
    signal.signal(signal.SIGTERM, on_terminate)
    signal.alarm(TOTAL_S)
    state_dir = Path(tempfile.mkdtemp(prefix="picogpt-browser-test-"))
    root_dir = state_dir / "notebooks"
    server, results = None, []
    try:
        if args.stand_in:
            from browser_stand_in import write_stand_in
            write_stand_in(root_dir, args.stand_in)
        elif args.notebooks.is_dir():
            serve_copy(args.notebooks, root_dir)
        else:
            root_dir.mkdir()
        notebooks = sorted(p.name for p in root_dir.glob("*.ipynb"))
        source = f"the {args.stand_in} stand-in" if args.stand_in else args.notebooks
        print(f"serving a copy of {source}: {', '.join(notebooks) or 'no notebooks'}")
        if not notebooks:
            raise CheckFailed(f"no notebooks to serve in {source}")
        require_playwright()
        server = LabServer(root_dir, state_dir)
        server.start()
        print(f"JupyterLab up at http://127.0.0.1:{server.port}/lab "
              f"after {time.monotonic() - t_start:.0f} s")
        run_checks(root_dir, notebooks, server, Shots(args.out), results)
    except (CheckFailed, RunTimedOut) as exc:
        results.append(("browser test", False, str(exc)))
        print(f"FAIL  {exc}")
    except Exception as exc:  # the browser or the server died under us: still clean up, still fail
        results.append(("browser test", False, f"{type(exc).__name__}: {exc}"))
        print(f"FAIL  {type(exc).__name__}: {exc}")
    finally:
        signal.alarm(0)
        if server is not None:
            server.stop()
        shutil.rmtree(state_dir, ignore_errors=True)

    n_failed = sum(not ok for _, ok, _ in results)
    print(f"browser test took {time.monotonic() - t_start:.0f} s; screenshots in {args.out}")
    for name, ok, detail in results:
        if not ok:
            print(f"FAILED {name}: {detail.splitlines()[0]}")
    print(f"browser-test: {len(results) - n_failed} passed, {n_failed} failed")
    return 1 if n_failed else 0


if __name__ == "__main__":
    sys.exit(main())
