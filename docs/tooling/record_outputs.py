"""pytest plugin: keep the outputs of the notebooks nbval runs, for the site.

``make test`` loads it (``-p docs.tooling.record_outputs``) beside nbval. nbval runs each code cell in the
notebook's kernel and keeps the cell's outputs on its test item; when every cell of a notebook
has passed, this writes the notebook with those outputs, execution counts and the run's facts
(``executed.stamp``) into the store ``make docs`` reads. A notebook with a failed cell is not
written, so the site never shows a broken run as a lesson.
"""

from __future__ import annotations

import copy
import os
import pathlib
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import executed  # noqa: E402  (docs/tooling, beside this file)

_started: dict[pathlib.Path, float] = {}
_results: dict[pathlib.Path, dict[int, tuple[str, list]]] = {}


def _is_nbval_cell(item) -> bool:
    return type(item).__name__ == "IPyNbCell" and hasattr(item, "cell_num")


def _notebook_path(item) -> pathlib.Path:
    return pathlib.Path(str(item.parent.path if hasattr(item.parent, "path") else item.parent.fspath))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if _is_nbval_cell(item):
        # The first cell's setup starts the kernel: time the notebook from there, as a learner would.
        _started.setdefault(_notebook_path(item), time.monotonic())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if not _is_nbval_cell(item):
        return
    report = outcome.get_result()
    cells = _results.setdefault(_notebook_path(item), {})
    if report.when == "setup" and not report.passed:
        cells[item.cell_num] = ("failed", [])
    elif report.when == "call":
        cells[item.cell_num] = ("passed" if report.passed else "failed", copy.deepcopy(item.test_outputs or []))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    if not _is_nbval_cell(item):
        return
    path = _notebook_path(item)
    if nextitem is not None and _is_nbval_cell(nextitem) and _notebook_path(nextitem) == path:
        return
    _write(path, time.monotonic() - _started.get(path, time.monotonic()))


def _write(path: pathlib.Path, seconds: float) -> None:
    cells = _results.pop(path, {})
    source = executed.nbformat.read(path, as_version=4)
    code_cells = [cell for cell in source.cells if cell.cell_type == "code"]
    if len(cells) != len(code_cells) or any(status != "passed" for status, _ in cells.values()):
        return
    notebook = copy.deepcopy(source)
    count = 0
    for number, cell in enumerate(cell for cell in notebook.cells if cell.cell_type == "code"):
        count += 1
        cell.execution_count = count
        cell.outputs = []
        for output in cells[number][1]:
            output = executed.nbformat.from_dict(dict(output))
            if output.get("output_type") == "execute_result":
                output["execution_count"] = count
            cell.outputs.append(output)
    # Under pytest-xdist (make test runs one notebook per worker) others shared the cores meanwhile.
    at_once = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    executed.stamp(notebook, source, executed.current_budget(), seconds, at_once)
    executed.save(notebook, path.name, executed.current_budget())
