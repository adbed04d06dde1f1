"""`make test`'s scheduling of the unit tests: a worker process that dies is reported, and the run ends.

XLA's CPU compiler has aborted a pytest-xdist worker in the middle of a full run (a crash in a
long-lived process, not reproducible alone). What must never follow is a hang: the run has to
report the test the worker died in and go on with the others. These tests run a small suite with the
Makefile's own xdist arguments, one of whose tests aborts its process as XLA did.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, outside_xdist

QUICK_MODULE = "def test_{name}_{index}():\n    assert {index} >= 0\n"


def unit_xdist_arguments(workers: int) -> list[str]:
    """The pytest-xdist arguments the Makefile gives the unit tests (XDIST_UNIT), for ``workers`` workers."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    found = re.search(r"^XDIST_UNIT := (.+)$", makefile, flags=re.MULTILINE)
    assert found, "the Makefile defines no XDIST_UNIT"
    return found.group(1).replace("$(TEST_WORKERS)", str(workers)).split()


def write_suite(folder) -> None:
    """Three modules of quick tests; the second module's first test aborts its process (SIGABRT)."""
    for name in ("first", "third"):
        (folder / f"test_{name}.py").write_text("".join(QUICK_MODULE.format(name=name, index=i) for i in range(5)))
    (folder / "test_second.py").write_text(
        "import os\n\n\ndef test_dies():\n    os.abort()\n\n\n"
        + "".join(QUICK_MODULE.format(name="second", index=i) for i in range(3))
    )


def run_suite(folder, arguments: list[str], timeout: float) -> str:
    """pytest's output for the suite in ``folder``; past ``timeout`` seconds, its whole process group
    (the controller and its workers) is killed and ``subprocess.TimeoutExpired`` raised."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *arguments, str(folder)],
        cwd=folder, env=outside_xdist(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return output


@pytest.mark.parametrize("workers", [1, 2])
def test_a_worker_that_dies_is_reported_and_every_other_test_runs(tmp_path, workers):
    write_suite(tmp_path)
    output = run_suite(tmp_path, unit_xdist_arguments(workers), timeout=120)
    assert "crashed while running 'test_second.py::test_dies'" in output, output[-3000:]
    assert "1 failed, 13 passed" in output, output[-3000:]


def test_the_check_catches_the_scheduler_that_hung(tmp_path):
    """pytest-xdist 3.8.0's loadscope, which the Makefile used before: the same suite never ends."""
    write_suite(tmp_path)
    with pytest.raises(subprocess.TimeoutExpired):
        run_suite(tmp_path, ["-n", "1", "--dist", "loadscope"], timeout=20)
