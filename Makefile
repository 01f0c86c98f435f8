# picogpt — a newcomer needs `make lab` (the course) and `make test` (the tests); `make install`
# makes the virtual environment alone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OLDEST := .venv-oldest
BROWSER_STAMP := $(VENV)/.installed-browser
CHROMIUM := /usr/bin/chromium

.PHONY: install test lint format quick unit notebooks test-oldest browser-test lab weights bench classroom classroom-check clean

## make install: create .venv and install picogpt with the course's dependencies (`[dev]`), nothing else
install: $(STAMP)
	@echo "installed into $(VENV): run the command line as $(BIN)/python -m picogpt (or source $(BIN)/activate first)"

# setuptools announces every editable install with a BuildBackendWarning banner ("Editable
# installation ... be careful with folders ... with the same name as your package"), information
# only: EDITABLE hides that one warning (Python's own filter, matched on its first words, passed
# to pip's build process); every other warning and error still shows.
EDITABLE := PYTHONWARNINGS="ignore:Editable installation"

$(STAMP): pyproject.toml
	@echo "making $(VENV): picogpt and the course's dependencies ([dev] in pyproject.toml: NumPy, JupyterLab, matplotlib, numba, pytest; about 800 MB) from the package index, then picogpt's compiled kernels; 30 s to 2 minutes on a fresh clone (tools/first_hour.py)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(EDITABLE) $(BIN)/python -m pip install --quiet -e '.[dev]'
	@$(BIN)/python -c "from picogpt.fast import compiled; compiled.loops()"
	@touch $(STAMP)

## make test: create .venv, install, run the unit tests, then execute every notebook
## (pytest-xdist spreads them over the cores: PYTEST_WORKERS=1 runs them one at a time; a core that
## runs out of tests takes some of another core's, so no slow test is left to run alone at the end)
PYTEST_WORKERS ?= auto
PARALLEL = -n $(PYTEST_WORKERS)
test: lint unit notebooks

## make lint: ruff, as pyproject.toml's [tool.ruff] configures it (the package, tests, tools, benchmarks, notebooks)
lint: $(STAMP)
	$(BIN)/python -m ruff check .

## make format: ruff format on the Python files changed since main (committed or not)
format: $(STAMP)
	git diff --name-only --diff-filter=d main -- '*.py' | xargs -r $(BIN)/python -m ruff format

unit: $(STAMP)
	$(BIN)/python -m pytest $(PARALLEL) --dist worksteal tests

## make quick: the unit tests without the slow statistical proofs (chi-square), no notebooks
quick: $(STAMP)
	$(BIN)/python -m pytest tests -m "not slow"

# the checks run every notebook on the teaching pair, each race on 3 repeats (course/pair.py's
# `repeats`: the same cells on fewer pairs; the committed outputs come from full runs)
CHECK_REPEATS = PICOGPT_COURSE_REPEATS=$${PICOGPT_COURSE_REPEATS:-3}

notebooks: $(STAMP)
	@if ls notebooks/*.ipynb >/dev/null 2>&1; then \
	  PICOGPT_COURSE_MODELS=tiny $(CHECK_REPEATS) $(BIN)/python -m pytest $(PARALLEL) --dist loadscope --nbval-lax --nbval-current-env -p no:cacheprovider notebooks/; \
	else echo "no notebooks yet"; fi

## make test-oldest: the oldest versions pyproject.toml allows (constraints-oldest.txt), in their
## own .venv-oldest: the quick unit tests, then every notebook
test-oldest: $(OLDEST)/.installed
	$(OLDEST)/bin/python -m pytest tests -m "not slow" -p no:cacheprovider
	PICOGPT_COURSE_MODELS=tiny $(CHECK_REPEATS) $(OLDEST)/bin/python -m pytest --nbval-lax --nbval-current-env -p no:cacheprovider notebooks/

$(OLDEST)/.installed: pyproject.toml constraints-oldest.txt
	test -x $(OLDEST)/bin/python || $(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --upgrade pip
	$(EDITABLE) $(OLDEST)/bin/python -m pip install --quiet -c constraints-oldest.txt -e '.[dev]'
	touch $@

## make browser-test: run every notebook in JupyterLab in headless Chromium, use its widgets, check its figures
## (installs Debian's chromium with apt-get and the `browser` extra; screenshots: browser-test-out/
## or $BROWSER_TEST_OUT; the tiny pair unless PICOGPT_COURSE_MODELS=gpt2, races on 3 repeats; the nine
## kernels run at once, so each on one thread unless PICOGPT_THREADS says otherwise)
browser-test: $(BROWSER_STAMP) $(CHROMIUM)
	PICOGPT_COURSE_MODELS=$${PICOGPT_COURSE_MODELS:-tiny} $(CHECK_REPEATS) PICOGPT_THREADS=$${PICOGPT_THREADS:-1} timeout -k 30 1300 $(BIN)/python tools/browser_test.py

$(BROWSER_STAMP): $(STAMP) pyproject.toml
	$(EDITABLE) $(BIN)/python -m pip install --quiet -e '.[dev,browser]'
	touch $(BROWSER_STAMP)

$(CHROMIUM):
	@test "$$(id -u)" = 0 || { echo "$(CHROMIUM) is missing: run  sudo apt-get install -y chromium"; exit 1; }
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium

## make lab: open the course in JupyterLab (embedded teaching pair unless GPT-2 is downloaded).
## Extra JupyterLab flags go in LAB_ARGS, e.g. on a remote or headless machine:
##   make lab LAB_ARGS="--no-browser --ip 0.0.0.0 --port 8888"
## As root (containers, cloud notebooks) it passes --allow-root, which JupyterLab asks for.
LAB_ARGS ?=
AS_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
lab: $(STAMP)
	$(BIN)/jupyter lab $(AS_ROOT) $(LAB_ARGS) notebooks/

## make classroom: the offline bundle for a room with no internet (classroom/: every wheel the
## course installs, the notebooks, INSTALL.txt); needs the package index once, here
classroom: $(STAMP)
	$(BIN)/python tools/classroom.py build classroom

## make classroom-check: build the library's bundle in a temporary folder, install it into a fresh
## venv with --no-index and run the course pair outside the repository (CI runs it)
classroom-check: $(STAMP)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(BIN)/python tools/classroom.py build "$$tmp/classroom" --extras '' && \
	$(BIN)/python tools/classroom.py check "$$tmp/classroom" --extras ''

## make weights: download GPT-2 small (draft) and XL (target), about 7 GB
weights: $(STAMP)
	$(BIN)/python -m picogpt download gpt2 gpt2-xl

## make bench: measure decode, scoring and speculative sampling on this machine (results in build/bench/,
## which git ignores; `python -m picogpt bench --save` writes benchmarks/). Without GPT-2 downloaded it
## first writes random-weight checkpoints of GPT-2 small's and XL's shapes into weights/random-gpt2*/;
## the command says what it writes, and how long the committed run took, before it writes anything.
bench: $(STAMP)
	$(BIN)/python -m picogpt bench

## make clean: the clone as it was cloned. Removes the virtual environments, build/ (unsaved results),
## browser-test-out/, classroom/, the egg-info, every cache (__pycache__, with numba's compiled kernels;
## .pytest_cache, .ruff_cache, .hypothesis) and the benches' random-weight checkpoints; keeps downloaded
## GPT-2 weights (tests/test_repository.py checks that what `make test` makes goes).
clean:
	rm -rf $(VENV) $(OLDEST) build browser-test-out classroom .pytest_cache .ruff_cache .hypothesis *.egg-info weights/random-* weights/kernel-bench
	find . -path ./.git -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints \) -type d -prune -exec rm -rf {} +
	@kept=$$(ls -d weights/gpt2*/ 2>/dev/null | tr '\n' ' '); \
	if [ -n "$$kept" ]; then echo "kept: downloaded GPT-2 weights in $$kept(remove them by hand if you want)"; fi
