# picogpt — the two commands a newcomer needs are `make test` and `make lab`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test unit notebooks lab weights bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## make test: create .venv, install, run the unit tests, then execute every notebook
test: unit notebooks

unit: $(STAMP)
	$(BIN)/python -m pytest tests

notebooks: $(STAMP)
	@if ls notebooks/*.ipynb >/dev/null 2>&1; then \
	  PICOGPT_COURSE_MODELS=tiny $(BIN)/python -m pytest --nbval-lax --nbval-current-env -p no:cacheprovider notebooks/; \
	else echo "no notebooks yet"; fi

## make lab: open the course in JupyterLab (embedded teaching pair unless GPT-2 is downloaded)
lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

## make weights: download GPT-2 small (draft) and XL (target), about 7 GB
weights: $(STAMP)
	$(BIN)/python -m picogpt download gpt2 gpt2-xl

## make bench: measure decode, scoring and load speed (results under benchmarks/)
bench: $(STAMP)
	$(BIN)/python -m picogpt bench

clean:
	rm -rf $(VENV) .pytest_cache
