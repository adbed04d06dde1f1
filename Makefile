# Two commands on a fresh clone (only Python 3.11 and make needed):
#   make lab    build .venv from requirements.txt if needed, then open JupyterLab on notebooks/
#   make test   build the same .venv, then run the unit tests and every notebook (nbval)
# With CI=true, `make test` sets LABCORE_QUICK=1, which shrinks every training budget.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3 2>/dev/null)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# labcore's own metadata: a pyproject.toml edit reinstalls labcore alone, not the whole .venv.
PACKAGE_STAMP := $(VENV)/.labcore-installed

ifeq ($(CI),true)
export LABCORE_QUICK ?= 1
endif

# Extra arguments for JupyterLab, e.g. `make lab LAB_ARGS="--no-browser --port 8899"`.
LAB_ARGS ?=
# JupyterLab refuses to run as root unless told; containers often run as root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)
# Longest a single notebook cell may run before nbval fails it (seconds).
CELL_TIMEOUT ?= 3600

.PHONY: lab test venv doctor

venv: $(PACKAGE_STAMP)

# Rebuilt from scratch whenever the pins change, so .venv is exactly requirements.txt.
$(STAMP): requirements.txt
	@test -n "$(PYTHON)" || { echo "error: no python3.11 or python3 found on PATH" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; sys.exit(0) if v >= (3, 10) else sys.exit(f"error: labcore needs Python >= 3.10 (3.11 is what requirements.txt was tested with); {sys.executable} is {v[0]}.{v[1]}")'
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; v == (3, 11) or print(f"warning: requirements.txt was tested with Python 3.11; using {v[0]}.{v[1]}", file=sys.stderr)'
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

$(PACKAGE_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

lab: $(PACKAGE_STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks $(ALLOW_ROOT) $(LAB_ARGS)

# Two pytest runs: the unit tests with tests/conftest.py's XLA flags (compile-bound, so LLVM at
# -O0), then every notebook in kernels that see only the caller's environment, as a user's would.
# The notebooks run even when a unit test fails, so one CI run reports every failure.
test: $(PACKAGE_STAMP)
	$(BIN)/python -m pytest tests --durations=10; tests=$$?; \
	$(BIN)/python -m pytest notebooks --nbval-lax --nbval-current-env --nbval-cell-timeout=$(CELL_TIMEOUT) --durations=10; \
	notebooks=$$?; test $$tests -eq 0 && test $$notebooks -eq 0

doctor: $(PACKAGE_STAMP)
	$(BIN)/python -m labcore doctor
