"""Write the lessons the site renders: every notebook with its outputs, in ``docs/lessons/``.

    python docs/tooling/lessons.py            # quick-budget outputs (what CI records)
    python docs/tooling/lessons.py --full     # full-budget outputs, for a local or release build

For each notebook in ``notebooks/`` this takes the stored run at the chosen budget
(``executed.load_current``: recorded by ``make test``'s nbval run, or by an earlier call of this
script) when the notebook's code is unchanged since; otherwise it executes the notebook once,
from a temporary folder with labcore as installed (as a learner runs it), and stores the run.
So CI renders what its own notebook run produced, and a full build re-runs only what changed.

Each page gets a header cell after its title: a Colab launch link (the badges' own prefix, from
``colab/setup_cell.py``), which budget its outputs come from and where and when they ran, and
links to the API reference of the objects the lesson uses (``lesson_api.LESSON_API``).
"""

from __future__ import annotations

import argparse
import copy
import os
import pathlib
import sys
import tempfile
import time

import nbformat

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import executed  # noqa: E402
import lesson_api  # noqa: E402
import site_facts  # noqa: E402

LESSONS = executed.REPO_ROOT / "docs" / "lessons"
CELL_TIMEOUT_S = 3600

BUDGET_WORDS = {
    "quick": "the **quick budget** (`LABCORE_QUICK=1`: the same code with shorter training, "
             "so curves are shorter and scores lower than a full run's)",
    "full": "the **full budget** (what a learner runs: `LABCORE_QUICK` unset)",
}


def execute(name: str, budget: str) -> nbformat.NotebookNode:
    """Run notebooks/`name` start to end at `budget` in a fresh kernel; store and return the result."""
    import nbclient

    source = nbformat.read(executed.NOTEBOOKS / name, as_version=4)
    notebook = copy.deepcopy(source)
    previous = os.environ.get("LABCORE_QUICK")
    os.environ["LABCORE_QUICK"] = "1" if budget == "quick" else "0"  # the kernel inherits it
    print(f"executing {name} at the {budget} budget ...", flush=True)
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="labcore-lesson-") as folder:
            nbclient.NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                    resources={"metadata": {"path": folder}}).execute()
    finally:
        if previous is None:
            os.environ.pop("LABCORE_QUICK", None)
        else:
            os.environ["LABCORE_QUICK"] = previous
    seconds = time.monotonic() - started
    executed.stamp(notebook, source, budget, seconds)
    executed.save(notebook, name, budget)
    print(f"executed {name} in {seconds:.0f} s", flush=True)
    return notebook


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value < 120 else f"{value / 60:.1f} min"


def _at_once(count: int) -> str:
    return f", in a test run that executed {count} notebooks at a time" if count > 1 else ""


def header(name: str, facts: dict) -> str:
    """The markdown of the cell each lesson page gets under its title."""
    colab = site_facts.colab_url(name)
    commit = f" at commit `{facts['commit']}`" if facts.get("commit") else ""
    lines = [
        "```{admonition} Run it, and what you see here",
        ":class: tip",
        "",
        f"[![Open in Colab](../_static/colab-badge.svg)]({colab}) or on your machine: `make lab` "
        "(see [Start here](../start-here.md)).",
        "",
        f"The outputs on this page come from {BUDGET_WORDS[facts['budget']]}, executed on "
        f"{facts['machine']}, on {facts['date']}{commit}; the whole notebook took "
        f"{_seconds(facts['seconds'])} there{_at_once(facts.get('at_once', 1))}.",
    ]
    api = lesson_api.LESSON_API.get(pathlib.Path(name).stem, [])
    if api:
        links = " · ".join(f"{{py:{role}}}`{label} <{path}>`" for label, path, role in api)
        lines += ["", f"**In the API reference**: {links}"]
    lines.append("```")
    return "\n".join(lines)


def lesson_page(name: str, stored: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The committed notebook's cells with the stored run's outputs, and the header cell.

    The stored run's code is the committed code (``executed.load_current`` checked the hash), so
    its outputs belong to the same code cells in the same order; the prose is taken from the
    committed notebook, so a wording fix shows on the site without running anything again.
    """
    page = nbformat.read(executed.NOTEBOOKS / name, as_version=4)
    page.metadata["labcore"] = stored.metadata["labcore"]
    ran = [cell for cell in stored.cells if cell.cell_type == "code"]
    for cell, run in zip((cell for cell in page.cells if cell.cell_type == "code"), ran, strict=True):
        cell.outputs, cell.execution_count = run.outputs, run.execution_count
    first = page.cells[0]
    if first.cell_type != "markdown" or not first.source.startswith("# "):
        raise ValueError(f"{name}: the first cell must be the markdown title")
    # The header goes straight under the title line, above the lesson's introduction.
    title, _, introduction = first.source.partition("\n")
    first.source = title
    cells = [nbformat.v4.new_markdown_cell(header(name, stored.metadata["labcore"]))]
    if introduction.strip():
        cells.append(nbformat.v4.new_markdown_cell(introduction.strip("\n")))
    page.cells[1:1] = cells
    return page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="full-budget outputs (runs what is not stored yet)")
    parser.add_argument("notebooks", nargs="*", help="only these notebooks (names in notebooks/); default all")
    args = parser.parse_args(argv)
    lesson_api.check()
    budget = "full" if args.full else "quick"
    names = args.notebooks or sorted(path.name for path in executed.NOTEBOOKS.glob("*.ipynb"))
    LESSONS.mkdir(parents=True, exist_ok=True)
    for stale in LESSONS.glob("*.ipynb"):
        if not (executed.NOTEBOOKS / stale.name).exists():
            stale.unlink()
    for name in names:
        stored = executed.load_current(name, budget)
        if stored is None:
            stored = execute(name, budget)
        else:
            print(f"{name}: the stored {budget}-budget run is current ({stored.metadata['labcore']['date']})")
        nbformat.write(lesson_page(name, stored), LESSONS / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
