"""Executed notebooks, kept for the site: where they are stored and what they say about their run.

One execution serves two purposes. ``make test`` runs every notebook under nbval, and the pytest
plugin ``record_outputs`` (beside this file) writes each notebook whose cells all passed, with
their outputs, into ``docs/_build/executed/<budget>/``; ``make docs`` renders those files instead
of running the notebooks again. A stored notebook carries, in its metadata under ``labcore``:

- ``budget``: ``"quick"`` (``LABCORE_QUICK=1``, CI's budgets) or ``"full"`` (a learner's);
- ``code_sha256``: a hash of the notebook's code cells, so a stored run whose code has changed
  since is known to be stale and is executed again;
- ``machine``, ``date``, ``commit``, ``seconds``: where, when, at which commit and how long.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import os
import pathlib
import platform
import shutil
import subprocess

import nbformat

from labcore.tools.benchmarking import cpu_model

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO_ROOT / "notebooks"
STORE = REPO_ROOT / "docs" / "_build" / "executed"
BUDGETS = ("quick", "full")


def current_budget() -> str:
    """The budget this process's notebooks run with, read as labcore.is_quick reads it."""
    import labcore

    return "quick" if labcore.is_quick() else "full"


def code_sha256(notebook: nbformat.NotebookNode) -> str:
    """A hash of the code cells' sources, in order: what decides whether outputs are still current."""
    digest = hashlib.sha256()
    for cell in notebook.cells:
        if cell.cell_type == "code":
            digest.update(cell.source.encode())
            digest.update(b"\0")
    return digest.hexdigest()


def stored_path(name: str, budget: str) -> pathlib.Path:
    if budget not in BUDGETS:
        raise ValueError(f"budget must be one of {BUDGETS}, got {budget!r}")
    return STORE / budget / name


def _accelerators() -> str:
    """GPUs named by nvidia-smi, a TPU named by its environment, else none (no JAX backend started)."""
    if shutil.which("nvidia-smi"):
        try:
            listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            listing = ""
        gpus = [line.split(":", 1)[1].split("(")[0].strip() for line in listing.splitlines() if line.startswith("GPU")]
        if gpus:
            return f"{len(gpus)} x {gpus[0]}"
    for variable in ("TPU_ACCELERATOR_TYPE", "COLAB_TPU_ADDR", "TPU_NAME"):
        if os.environ.get(variable):
            return f"TPU ({os.environ[variable]})"
    return "no accelerator"


def machine() -> str:
    """One line that says where a notebook ran, e.g. for a page's header."""
    try:
        jax_version = importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        jax_version = "not installed"
    return (f"{cpu_model()}, {os.cpu_count()} CPU cores, {_accelerators()}; "
            f"Python {platform.python_version()}, JAX {jax_version}")


def commit() -> str | None:
    try:
        result = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def stamp(notebook: nbformat.NotebookNode, source: nbformat.NotebookNode, budget: str, seconds: float,
          at_once: int = 1) -> None:
    """Write the run's facts into `notebook`'s metadata; `source` is the committed notebook.

    at_once: how many notebooks the run executed at a time on the machine's cores (``make test``
    runs one per pytest-xdist worker): ``seconds`` was measured with that many sharing them.
    """
    notebook.metadata["labcore"] = {
        "budget": budget,
        "code_sha256": code_sha256(source),
        "machine": machine(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "seconds": round(seconds, 1),
        "at_once": at_once,
    }


def save(notebook: nbformat.NotebookNode, name: str, budget: str) -> pathlib.Path:
    path = stored_path(name, budget)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".partial")
    nbformat.write(notebook, temporary)
    temporary.replace(path)  # a reader never sees half a notebook
    return path


def load_current(name: str, budget: str) -> nbformat.NotebookNode | None:
    """The stored run of notebooks/`name` at `budget`, if there is one and its code is unchanged."""
    path = stored_path(name, budget)
    if not path.exists():
        return None
    try:
        stored = nbformat.read(path, as_version=4)
    except (OSError, json.JSONDecodeError, nbformat.reader.NotJSONError):
        return None
    facts = stored.metadata.get("labcore", {})
    current = nbformat.read(NOTEBOOKS / name, as_version=4)
    if facts.get("budget") != budget or facts.get("code_sha256") != code_sha256(current):
        return None
    return stored
