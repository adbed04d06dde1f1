# Two commands on a fresh clone (only Python 3.11 and make needed):
#   make lab    build .venv from requirements.txt if needed, then open JupyterLab on notebooks/
#   make test   build the same .venv, then run the unit tests and every notebook (nbval): its two
#               parts, `make test-unit` then `make test-notebooks`, which CI runs apart
# With CI=true, `make test` sets LABCORE_QUICK=1, which shrinks every training budget.
#   make test-compat  the notebooks (all but 06, 09) on the oldest stack pyproject.toml allows, with labcore
#                     installed as the Colab cell installs it (CI runs it beside make test-notebooks);
#                     COMPAT_UNIT=1 runs the unit tests there too
#   make wheelhouse   wheels of labcore and all it needs, for a machine with no network: PY=3.12,
#                     PLATFORM=manylinux_2_28_x86_64, SKIP="jax==0.11.2 jaxlib==0.11.2 torch" (see below)
#   make docs   build the site into docs/_build/html: every lesson with the outputs `make test`
#               recorded (a notebook with no recorded run, or whose code changed since, runs once)
#   make docs FULL=1   the same with full-budget outputs, re-running only notebooks whose code changed
#   make docs-check    open every page of the built site in headless Chromium (CI runs it)
#   make bench-device  time every lesson at its full budget on this machine's device, then run every
#                      benchmark; fills the device's column of the lesson-times table. BUDGET=540 runs
#                      only what fits in 540 s (the same command again goes on); PART=1/3 a third of it;
#                      PART=atari PQN on Breakout for 40M frames instead, a BUDGET slice a call
#   make gpu-compiler  JAX's CUDA plugin of .venv's jaxlib in .venv/gpu-compiler, to compile programs for
#                      a GPU without one (benchmarks/gpu_kernels.py); `make test` installs it on Linux

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3 2>/dev/null)
# On Linux, PyPI's torch is a CUDA build of several GB. `make lab TORCH_INDEX=https://download.pytorch.org/whl/cpu`
# builds the environments with torch's CPU wheel of the same version instead (2.13.0+cpu satisfies the pin
# torch==2.13.0 and sorts above PyPI's 2.13.0, so pip takes it). Empty: PyPI alone.
TORCH_INDEX ?=
TORCH_INDEX_ARGS := $(if $(strip $(TORCH_INDEX)),--extra-index-url $(TORCH_INDEX))
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
# Test processes at a time (pytest-xdist workers). The unit tests go to TEST_WORKERS workers with
# --dist worksteal: each worker starts on a contiguous half of the collection (a module's tests
# mostly stay in one process and share their compilations) and takes tests from the other when
# idle. Not loadscope: when a worker process dies, pytest-xdist 3.8.0's loadscope scheduler puts the
# worker's finished modules back on its queue as empty work and the replacement worker waits for
# ever (a CI run hung so after XLA's compiler aborted a worker); worksteal reports the test the
# worker died in as failed and runs the rest. Those marked several_processes (multi-process
# launches, Ray clusters) run afterwards, alone. The notebooks go out a notebook at a time to
# NOTEBOOK_WORKERS workers (loadfile keeps a notebook's cells in one kernel). On the 2-core
# reference machine two workers ran the unit tests in 19.6 min (one process: about 22, in an
# earlier run), and two notebooks at a time were no faster than one (each took 1.4 to 3 times as
# long: a kernel keeps both cores busy), so the notebooks run one at a time; more cores, more workers.
TEST_WORKERS ?= 2
NOTEBOOK_WORKERS ?= 1
XDIST_UNIT := -n $(TEST_WORKERS) --dist worksteal
XDIST_NOTEBOOKS := -n $(NOTEBOOK_WORKERS) --dist loadfile

.PHONY: lab test test-unit test-notebooks test-compat venv doctor colab-sync docs docs-check bench-device gpu-compiler

venv: $(PACKAGE_STAMP)

# Rebuilt from scratch whenever the pins change, so .venv is exactly requirements.txt.
$(STAMP): requirements.txt
	@test -n "$(PYTHON)" || { echo "error: no python3.11 or python3 found on PATH" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; sys.exit(0) if v >= (3, 11) else sys.exit(f"error: labcore needs Python >= 3.11 (its oldest jax, 0.7.2, does); {sys.executable} is {v[0]}.{v[1]}")'
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; v == (3, 11) or print(f"warning: requirements.txt was tested with Python 3.11; using {v[0]}.{v[1]}", file=sys.stderr)'
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(TORCH_INDEX_ARGS) -r requirements.txt
	touch $@

$(PACKAGE_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

lab: $(PACKAGE_STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks $(ALLOW_ROOT) $(LAB_ARGS)

# Two pytest runs: the unit tests with tests/conftest.py's XLA flags (compile-bound, so LLVM at
# -O0 and XLA's older CPU loop emitters), then every notebook in kernels that see only the caller's
# environment, as a user's would.
# The notebooks run even when a unit test fails, so one CI run reports every failure. The notebook
# run also records each passing notebook with its outputs for the site (docs/tooling/record_outputs.py),
# so `make docs` renders this execution instead of running the notebooks again.
# JAX's CUDA plugin (about 180 MB) of the jaxlib in .venv, in a folder of its own that nothing imports
# unless asked: with it, XLA compiles a program for a GPU that is not there and shows the kernels it
# would launch (labcore.tools.gpu_program; tests/test_gpu_program.py reads PPO's). JAX publishes the
# plugin for Linux (x86_64, aarch64) only, so elsewhere `make test` goes on without it.
GPU_COMPILER := $(VENV)/gpu-compiler
GPU_COMPILER_STAMP := $(GPU_COMPILER)/.installed
$(GPU_COMPILER_STAMP): $(STAMP)
	rm -rf $(GPU_COMPILER)
	version=$$($(BIN)/python -c 'import jaxlib; print(jaxlib.__version__)'); \
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --target $(GPU_COMPILER) \
	  "jax-cuda12-plugin==$$version" "jax-cuda12-pjrt==$$version"
	touch $@
gpu-compiler: $(GPU_COMPILER_STAMP)
GPU_COMPILER_FOR_TESTS := $(if $(and $(filter Linux,$(shell uname -s)),$(filter x86_64 aarch64,$(shell uname -m))),$(GPU_COMPILER_STAMP))

# `make test` is `make test-unit` then `make test-notebooks` (the notebooks run even when a unit test
# fails). CI (.ci/run) runs the two apart, so that the notebooks share the machine with test-compat.
test:
	$(MAKE) --no-print-directory test-unit; unit=$$?; \
	$(MAKE) --no-print-directory test-notebooks; notebooks=$$?; \
	test $$unit -eq 0 && test $$notebooks -eq 0

test-unit: $(PACKAGE_STAMP) $(GPU_COMPILER_FOR_TESTS)
	$(BIN)/python -m pytest tests $(XDIST_UNIT) -m "not several_processes" --durations=10; shared=$$?; \
	$(BIN)/python -m pytest tests -m several_processes --durations=5; alone=$$?; \
	test $$shared -eq 0 && test $$alone -eq 0

test-notebooks: $(PACKAGE_STAMP)
	$(BIN)/python -m pytest notebooks $(XDIST_NOTEBOOKS) -p docs.tooling.record_outputs --nbval-lax --nbval-current-env --nbval-cell-timeout=$(CELL_TIMEOUT) --durations=10

doctor: $(PACKAGE_STAMP)
	$(BIN)/python -m labcore doctor

# The oldest supported stack: requirements-oldest.txt (pyproject.toml's lower bounds) in a second
# environment, rebuilt whenever that file changes. labcore goes into it exactly as the Colab setup
# cell installs it (colab/cell.py runs the cell's own code, with a git+file:// URL of this
# checkout's commit in place of GitHub): non-editable, so only what the package ships is there.
# The notebooks (and unit tests) then run from a temporary folder outside the repository, so
# nothing can be imported or read from the checkout (tests/conftest.py refuses a labcore that was).
# By default it runs the notebooks there: each trains its algorithm end to end through labcore's
# drivers, checkpoints and evaluation, in the package as installed. `make test-compat COMPAT_UNIT=1`
# runs the unit tests there first (a quarter of an hour more on the 2-core reference machine, which
# CI's time limit does not leave room for beside `make test`), less those marked end_to_end (whole
# learning runs, kill-and-resume in new processes, multi-process launches, benchmark scripts), whose
# APIs faster tests cover; `COMPAT_UNIT=1 COMPAT_SKIP=` runs those too.
COMPAT_UNIT ?=
# The notebooks it runs: every notebook but those in COMPAT_LEAVE_OUT, by default 06 and 09, whose time goes
# mostly to their PyTorch originals (the same torch on both stacks); CI's 90 minutes hold no more. A new lesson
# is in unless left out here. COMPAT_NOTEBOOKS='*.ipynb' runs all.
COMPAT_LEAVE_OUT ?= 06_iqn_port.ipynb 09_gflownet_hybrid.ipynb
COMPAT_NOTEBOOKS ?= $(filter-out $(COMPAT_LEAVE_OUT),$(notdir $(wildcard notebooks/*.ipynb)))
COMPAT_SKIP ?= end_to_end
COMPAT_AND := $(if $(strip $(COMPAT_SKIP)), and not ($(COMPAT_SKIP)),)
COMPAT_RUN_UNIT := $(filter 1 true yes,$(COMPAT_UNIT))
COMPAT_VENV := .venv-compat
COMPAT_BIN := $(COMPAT_VENV)/bin
COMPAT_STAMP := $(COMPAT_VENV)/.installed

$(COMPAT_STAMP): requirements-oldest.txt
	@test -n "$(PYTHON)" || { echo "error: no python3.11 or python3 found on PATH" >&2; exit 1; }
	rm -rf $(COMPAT_VENV)
	$(PYTHON) -m venv $(COMPAT_VENV)
	# A new venv's pip may be too old for the `labcore @ git+file://...` form the Colab cell uses.
	$(COMPAT_BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(COMPAT_BIN)/python -m pip install --quiet --disable-pip-version-check $(TORCH_INDEX_ARGS) -r requirements-oldest.txt
	touch $@

test-compat: $(COMPAT_STAMP)
	@git diff --quiet HEAD -- labcore pyproject.toml || echo "warning: labcore/ or pyproject.toml has uncommitted changes; test-compat installs commit $$(git rev-parse --short HEAD) without them" >&2
	$(COMPAT_BIN)/python -m pip uninstall --quiet --yes labcore 2>/dev/null || true
	$(COMPAT_BIN)/python colab/cell.py install --python $(CURDIR)/$(COMPAT_BIN)/python --source "git+file://$(CURDIR)@$$(git rev-parse HEAD)"
	@run=$$(mktemp -d -t labcore-compat-XXXXXX); cp notebooks/*.ipynb $$run/; cd $$run; \
	echo "test-compat: running from $$run with $$($(CURDIR)/$(COMPAT_BIN)/python -c 'import jax, labcore; print("jax", jax.__version__, "and labcore from", labcore.__file__)')"; \
	shared=0; alone=0; \
	$(if $(COMPAT_RUN_UNIT),LABCORE_EXPECT_INSTALLED=1 $(CURDIR)/$(COMPAT_BIN)/python -m pytest $(CURDIR)/tests $(XDIST_UNIT) -m "not several_processes$(COMPAT_AND)" -p no:cacheprovider --durations=10; shared=$$?; \
	LABCORE_EXPECT_INSTALLED=1 $(CURDIR)/$(COMPAT_BIN)/python -m pytest $(CURDIR)/tests -m "several_processes$(COMPAT_AND)" -p no:cacheprovider --durations=5; alone=$$?;) \
	$(CURDIR)/$(COMPAT_BIN)/python -m pytest $(COMPAT_NOTEBOOKS) $(XDIST_NOTEBOOKS) -p no:cacheprovider --nbval-lax --nbval-current-env --nbval-cell-timeout=$(CELL_TIMEOUT) --durations=10; \
	notebooks=$$?; cd $(CURDIR); rm -rf $$run; test $$shared -eq 0 && test $$alone -eq 0 && test $$notebooks -eq 0

# After editing colab/setup_cell.py (a fork, a new release tag): write it into every notebook's
# first cell, the Colab badges and colab/README.md.
colab-sync: $(PACKAGE_STAMP)
	$(BIN)/python colab/cell.py sync

# On a new device (a T4 or TPU runtime, a GPU server): time every lesson at its full budget, one at a
# time, then run every benchmark (their JSON and tables land in benchmarks/results/<device>/). The
# device's times go into docs/results/lesson_times.json after each item, and the per-device table of
# docs/start-here.md and each notebook's Time paragraph are rewritten from it. Hours on a 2-core CPU,
# so it goes in slices: what this device has recorded at the checked-out commit is skipped, and
# BUDGET=540 (seconds) starts only what its estimate says fits in what is left, stops anything still
# running at the budget, and says what is left; the same command again goes on. PART=K/N runs the
# K-th of N parts of about the same length. BENCH_ARGS passes more options (--again, --try-long,
# --budget quick; `python benchmarks/lesson_times.py --help`).
BUDGET ?=
PART ?=
BENCH_ARGS ?=
#
# PART=atari instead: PQN's Atari preset on Breakout for ATARI_FRAMES frames (40M), one run folder
# in ATARI_RUNS that each call goes on with (benchmarks/atari.py train), so that a job with a time
# limit finishes it a BUDGET-second slice a call; the folder holds its checkpoints (carry it from
# one machine to the next).
ATARI_RUNS ?= runs/atari
ATARI_FRAMES ?= 40000000
bench-device: $(PACKAGE_STAMP)
ifeq ($(PART),atari)
	$(BIN)/python benchmarks/atari.py train --runs $(ATARI_RUNS) --frames $(ATARI_FRAMES) $(if $(BUDGET),--max-seconds $(BUDGET)) $(BENCH_ARGS)
else
	$(BIN)/python benchmarks/lesson_times.py --benchmarks $(if $(BUDGET),--budget-s $(BUDGET)) $(if $(PART),--part $(PART)) $(BENCH_ARGS)
endif

# The site: lessons/ from the recorded runs (docs/tooling/lessons.py), then Sphinx with warnings as
# errors. FULL=1 renders full-budget outputs (a release build); only changed notebooks run again.
FULL ?=
docs: $(PACKAGE_STAMP)
	$(BIN)/python docs/tooling/lessons.py $(if $(filter 1 true yes,$(FULL)),--full,)
	$(BIN)/python -m sphinx -b html -W --keep-going -q -d docs/_build/doctrees docs docs/_build/html
	@echo "site: $(CURDIR)/docs/_build/html/index.html"

# Every page of the built site in headless Chromium: console errors, links and anchors, images,
# figures, citations and glossary terms (docs/tooling/test_site.py). Needs Debian's chromium and
# chromium-driver (.ci/run installs them when missing).
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
docs-check: $(PACKAGE_STAMP)
	@test -n "$$LABCORE_CHROMIUM" || { command -v chromium >/dev/null && command -v chromedriver >/dev/null; } || \
	{ echo "installing Debian's chromium and chromium-driver for the browser test"; \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }
	$(BIN)/python -m pytest docs/tooling/test_site.py -p no:cacheprovider -q

# Wheels of labcore and of everything it needs, for a machine with no network (a cluster's compute
# nodes, an air-gapped GPU server), built here for that machine's Python and platform
# (offline/wheelhouse.py). Copy the folder there, then:
#   python -m pip install --no-index --find-links wheelhouse labcore        ("labcore[torch]" with torch)
# PY=3.12 and PLATFORM=manylinux_2_28_x86_64 name the target (default: this machine's Python and
# platform; `python -m pip debug --verbose` there lists its tags), DEST the folder (wheelhouse/).
# SKIP="jax==0.11.2 jaxlib==0.11.2 torch" or SKIP_FROM=FILE (`pip list --format=freeze` on the target)
# leaves out what the target has, and everything chosen fits the versions given. TORCH=cpu (default:
# the CPU build, from PyTorch's own index on Linux), pypi (PyPI's build: CUDA on Linux, several GB) or
# none. Versions are requirements.txt's pins where it has one (tested on Python 3.11); PINS= takes the
# newest that pyproject.toml allows, and so does a target whose jax (given in SKIP) is not the pinned
# one, as the pins go together around one jax. EXTRAS=profile adds labcore's other extras.
PY ?=
PLATFORM ?=
DEST ?= wheelhouse
SKIP ?=
SKIP_FROM ?=
TORCH ?= cpu
PINS ?= requirements.txt
EXTRAS ?=
WHEELHOUSE_ARGS = --dest '$(DEST)' --torch '$(TORCH)' --pins '$(PINS)' --skip '$(SKIP)' $(if $(PY),--python '$(PY)') \
  $(if $(PLATFORM),--platform '$(PLATFORM)') $(if $(SKIP_FROM),--skip-from '$(SKIP_FROM)') $(if $(EXTRAS),--extras '$(EXTRAS)')
.PHONY: wheelhouse
wheelhouse:
	@test -n "$(PYTHON)" || { echo "error: no python3.11 or python3 found on PATH" >&2; exit 1; }
	$(PYTHON) offline/wheelhouse.py $(strip $(WHEELHOUSE_ARGS))
