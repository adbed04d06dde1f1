"""benchmarks/lesson_times.py: the tables of lesson times are what its records say, a new device fills a column,
and a call bounded by a time budget starts only what fits, stops at the budget and leaves the rest to the next call.

The timing itself (a notebook under nbval, a benchmark script) is what `make bench-device` runs; here the
records are made up and the runs are fakes on a fake clock, so that every branch is exercised without running a
lesson.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO_ROOT

_spec = importlib.util.spec_from_file_location("lesson_times", REPO_ROOT / "benchmarks" / "lesson_times.py")
times = importlib.util.module_from_spec(_spec)
sys.modules["lesson_times"] = times
_spec.loader.exec_module(times)

CPU = {"platform": "cpu", "device_kind": "cpu", "label": "2-core CPU", "machine": "a 2-core test CPU"}
T4 = {"platform": "gpu", "device_kind": "Tesla T4", "label": "Tesla T4 (GPU)", "machine": "a Colab T4"}


def entry(seconds, ok=True):
    return {"seconds": seconds, "ok": ok, "date": "2026-11-27", "commit": "abc1234"}


def test_the_committed_tables_agree_with_the_committed_records():
    assert times.render(times.load_records(), write=False) == [], (
        "run `python benchmarks/lesson_times.py --render` after editing a notebook's prose or the records")


@pytest.mark.parametrize("seconds,text", [(16, "16 s"), (89.4, "89 s"), (388, "6.5 min"), (5399, "90.0 min"),
                                          (7200, "2.0 h")])
def test_durations_read_naturally(seconds, text):
    assert times.duration(seconds) == text


def test_a_t4_record_replaces_the_t4_placeholder_column_and_is_quoted_in_the_notebook():
    name = times.lesson_names()[0]
    cpu_only = {"2-core CPU": {"device": CPU, "full": {name: entry(388)}, "quick": {name: entry(16)}}}
    table = times.table(cpu_only)
    assert "full budget, 2-core CPU" in table and "quick budget, 2-core CPU" in table
    assert "full budget, T4 GPU (Colab)" in table and "Not measured on: T4 GPU (Colab), TPU (Colab)" in table
    paragraph = times.time_paragraph(name, cpu_only)
    assert "6.5 min at the full budgets, 16 s at the quick budgets" in paragraph
    assert "Not measured on a T4 GPU or a TPU." in paragraph

    with_t4 = dict(cpu_only, **{"Tesla T4 (GPU)": {"device": T4, "full": {name: entry(95)}}})
    table = times.table(with_t4)
    assert "full budget, Tesla T4 (GPU)" in table and "T4 GPU (Colab)" not in table
    assert "| 1.6 min |" in table and "TPU (Colab)" in table
    paragraph = times.time_paragraph(name, with_t4)
    assert "On a Tesla T4 (GPU): 1.6 min at the full budgets." in paragraph
    assert "Not measured on a TPU." in paragraph and "T4 GPU or" not in paragraph


def test_a_failed_run_and_a_missing_run_are_said_as_such():
    first, second = times.lesson_names()[:2]
    records = {"2-core CPU": {"device": CPU, "full": {first: entry(120, ok=False)}}}
    assert "failed after 2.0 min" in times.time_paragraph(first, records)
    assert "not measured at the full budgets" in times.time_paragraph(second, records)
    row = next(line for line in times.table(records).splitlines() if line.startswith(f"| {second[:2]} |"))
    assert row.endswith("| not measured | not measured | not measured |")


def test_reading_time_does_not_count_fenced_code():
    name = "00_jax_primitives"
    words = times.prose_words(name)
    assert 1_000 < words < 10_000
    assert f"({words:,} words of prose)" in times.time_paragraph(name, {})


def test_the_time_paragraph_links_the_lessons_rendered_page_on_the_site():
    for name in times.lesson_names():
        link = f"[its page on the site](https://labcore-rl.github.io/labcore/lessons/{name}.html)"
        assert link in times.time_paragraph(name, {})


def test_every_recorded_notebook_exists():
    names = set(times.lesson_names())
    for label, record in times.load_records().items():
        for budget in ("full", "quick"):
            stale = set(record.get(budget, {})) - names
            assert not stale, f"{label} {budget}: times recorded for notebooks that are gone: {sorted(stale)}"


def test_a_record_says_when_the_timed_notebook_differs_from_its_commit(tmp_path, monkeypatch):
    import subprocess

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True,
                       env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                            "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})

    lesson = tmp_path / "00_lesson.ipynb"
    lesson.write_text("{}")
    git("init", "-q")
    git("add", lesson.name)
    git("commit", "-q", "-m", "a lesson")
    monkeypatch.setattr(times, "REPO_ROOT", tmp_path)
    commit = times._commit(lesson)
    assert len(commit) >= 7 and "+" not in commit
    lesson.write_text('{"cells": []}')
    assert times._commit(lesson) == commit + "+changes"
    assert times._commit() == commit  # no notebook named: the commit alone

    def notebook(time_paragraph, code):
        return json.dumps({"cells": [
            {"cell_type": "markdown", "metadata": {},
             "source": ["# 00 · A lesson\n", "\n", time_paragraph + "\n", "\n", "Read on."]},
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": [code]}]}, indent=1)

    lesson.write_text(notebook("**Time**: not measured yet.", "x = 1"))
    git("add", lesson.name)
    git("commit", "-q", "-m", "a real lesson")
    commit = times._commit(lesson)
    lesson.write_text(notebook("**Time**: 17 s at the full budgets.", "x = 1"))  # what --render writes
    assert times._commit(lesson) == commit, "a rewritten Time paragraph is not a change of the lesson"
    lesson.write_text(notebook("**Time**: 17 s at the full budgets.", "x = 2"))
    assert times._commit(lesson) == commit + "+changes"


@pytest.mark.parametrize("label, said", [
    ("NVIDIA H100 80GB HBM3 (GPU)", "an"), ("A100", "an"), ("8-core CPU", "an"), ("Intel Xeon", "an"),
    ("T4 GPU (Colab)", "a"), ("TPU v5e", "a"), ("Tesla T4", "a"), ("2-core CPU", "a")])
def test_a_device_is_introduced_with_the_article_it_is_said_with(label, said):
    assert times.article(label) == said


# Budgets, resuming, parts and the start-up/compile/run split.

GPU = {"platform": "gpu", "device_kind": "Test GPU", "label": "Test GPU (GPU)", "machine": "a test GPU"}


def notebook_items(count):
    return [times.Item("notebook", name) for name in times.lesson_names()[:count]]


class FakeDevice:
    """Runs nothing: each item takes the seconds given for it on a clock that only the runs move."""

    def __init__(self, seconds):
        self.seconds, self.now, self.ran = seconds, 1000.0, []

    def clock(self):
        return self.now

    def run_item(self, item, timeout_s):
        self.ran.append((item.name, timeout_s))
        took = self.seconds[item.name]
        facts = {"seconds": took, "ok": True, "date": "2026-11-27", "commit": commit_of(item)}
        if timeout_s is not None and took > timeout_s:
            self.now += timeout_s
            return dict(facts, seconds=timeout_s, ok=False, stopped=True, timeout_s=timeout_s)
        self.now += took
        return facts


def commit_of(item):
    return times._commit(times.NOTEBOOKS / f"{item.name}.ipynb") if item.kind == "notebook" else times._commit()


def call(argv, device, records_path, said):
    return times.main([*argv, "--records", str(records_path)], probe=lambda: GPU, run_item=device.run_item,
                      clock=device.clock, say=said.append)


def test_a_budgeted_call_starts_only_what_fits_and_the_next_call_goes_on(tmp_path):
    first, second, third = (item.name for item in notebook_items(3))
    path = tmp_path / "records.json"
    earlier = {first: entry(30), second: entry(40), third: entry(5)}  # this device, at another commit
    times.save_records({GPU["label"]: {"device": GPU, "full": earlier}}, path)
    device, said = FakeDevice({first: 30, second: 40, third: 5}), []

    assert call(["--notebooks", first, second, third, "--budget-s", "60"], device, path, said) == 0
    # 55 s to give (5 s kept for stopping and saving): the first (about 33 s) runs with all of it as its
    # timeout; the second (about 44 s) does not fit the 25 s left and is not started; the third (5.5 s) is.
    assert device.ran == [(first, 55.0), (third, 25.0)]
    text = "\n".join(said)
    assert f"{second}: about 44 s (this device took 40 s), 25 s left: not started" in text
    assert "stopped at the budget of 60 s with 1 left" in text
    assert f"--notebooks {first} {second} {third} --budget-s 60 --records" in text  # the command that goes on
    assert "tables not rewritten" in text
    saved = times.load_records(path)[GPU["label"]]["full"]
    assert saved[first]["commit"] == times._commit(times.NOTEBOOKS / f"{first}.ipynb")
    assert saved[second]["commit"] == "abc1234"  # untouched until it runs

    device.ran, said = [], []
    assert call(["--notebooks", first, second, third, "--budget-s", "60"], device, path, said) == 0
    assert device.ran == [(second, 55.0)]
    assert sum("skipped" in line for line in said) == 2 and said[-2].startswith("done")


def test_an_item_recorded_here_at_this_commit_is_skipped_and_again_runs_it(tmp_path):
    first, second, third = (item.name for item in notebook_items(3))
    now = commit_of(times.Item("notebook", first))
    path = tmp_path / "records.json"
    times.save_records({GPU["label"]: {"device": GPU, "full": {
        first: dict(entry(30), commit=now),  # finished at this commit: skipped
        second: entry(40),  # another commit: runs again
        third: dict(entry(20, ok=False), stopped=True, commit=now),  # stopped at a budget: not finished, runs again
    }}}, path)
    device, said = FakeDevice({first: 30, second: 40, third: 60}), []
    call(["--notebooks", first, second, third], device, path, said)
    assert device.ran == [(second, None), (third, None)]  # no budget: no timeout
    assert any(line.startswith(f"{first}: recorded here at {now}, 30 s; skipped") for line in said)

    device.ran = []
    call(["--notebooks", first, second, third, "--again"], device, path, said)
    assert [name for name, _ in device.ran] == [first, second, third]


def test_an_item_that_overruns_its_estimate_is_stopped_at_the_budget_and_recorded_as_stopped(tmp_path):
    (first,) = (item.name for item in notebook_items(1))
    path = tmp_path / "records.json"
    times.save_records({GPU["label"]: {"device": GPU, "full": {first: entry(10)}}}, path)
    device, said = FakeDevice({first: 500}), []  # recorded at 10 s, now takes 500 s
    assert call(["--notebooks", first, "--budget-s", "60"], device, path, said) == 0
    assert device.ran == [(first, 55.0)]
    stopped = times.load_records(path)[GPU["label"]]["full"][first]
    assert stopped["stopped"] and not stopped["ok"] and stopped["seconds"] == 55.0
    assert times._cell(stopped) == "stopped at the budget after 55 s"
    assert "failed" not in times.table(times.load_records(path))
    text = "\n".join(said)  # its time so far is its estimate now: more than a whole budget of 60 s
    assert "stopped at the budget of 60 s with 1 left" in text and "(this device was stopped after 55 s)" in text
    assert "more than a whole budget" in text and "the same command again" not in text
    assert "--try-long" not in text  # it is for what this device has never run

    device.ran = []
    call(["--notebooks", first, "--budget-s", "60"], device, path, said)
    assert device.ran == []
    call(["--notebooks", first, "--budget-s", "60", "--try-long"], device, path, said)
    assert device.ran == []  # --try-long is for items never run here; this one was
    call(["--notebooks", first, "--budget-s", "600"], device, path, said)
    assert device.ran == [(first, 595.0)]


def test_try_long_gives_what_is_left_to_an_item_never_run_here(tmp_path):
    first, second = (item.name for item in notebook_items(2))
    path = tmp_path / "records.json"
    cpu = {"device": CPU, "full": {first: entry(100), second: entry(10)}}
    times.save_records({CPU["label"]: cpu}, path)
    device, said = FakeDevice({first: 50, second: 8}), []
    call(["--notebooks", first, second, "--budget-s", "120", "--try-long"], device, path, said)
    # the CPU's times, 1.1 times, plus 30 s on an accelerator: 140 s does not fit 115 s, 41 s does
    assert device.ran == [(second, 115.0), (first, 107.0)]


def test_a_command_is_stopped_at_its_timeout_with_what_it_started(tmp_path):
    started = time.monotonic()
    finished = times.run_command(["bash", "-c", "sleep 30 & sleep 30"], cwd=tmp_path, timeout_s=1)
    assert finished.returncode is None and 0.9 < finished.seconds < 5
    assert time.monotonic() - started < 10  # the background sleep held the pipes: it went too

    said = times.time_notebook(times.lesson_names()[0], "full", timeout_s=42,
                               run=lambda *args, **kwargs: times.Finished(None, "", "", 42.0))
    assert said["stopped"] and said["ok"] is False and said["seconds"] == 42.0 and said["timeout_s"] == 42


def test_an_estimate_is_this_devices_time_else_the_cpus_else_a_guess():
    name = times.lesson_names()[0]
    item, script = times.Item("notebook", name), times.Item("benchmark", "jit_speedup.py")
    records = {CPU["label"]: {"device": CPU, "full": {name: entry(100)}}}
    assert times.estimate(item, "full", records, GPU) == pytest.approx((140.0, "from the 2-core CPU's 1.7 min"))
    assert times.estimate(item, "full", records, dict(CPU, label="8-core CPU"))[0] == pytest.approx(110.0)
    assert times.estimate(item, "quick", records, GPU) == (600.0, "a guess: no time recorded")
    assert times.estimate(script, "full", records, GPU) == (300.0, "a guess: no time recorded")
    records[GPU["label"]] = {"device": GPU, "full": {name: entry(20)}, "benchmarks": {"jit_speedup.py": entry(50)}}
    assert times.estimate(item, "full", records, GPU) == pytest.approx((22.0, "this device took 20 s"))
    assert times.estimate(script, "full", records, GPU)[0] == pytest.approx(55.0)


def test_parts_cover_every_item_once_with_about_the_same_time_each_and_split_alike_every_time():
    items = notebook_items(13) + [times.Item("benchmark", script) for script in times.BENCHMARKS]
    weights = {item: float(10 + (7 * at) % 23) for at, item in enumerate(items)}
    parts = times.partition(items, weights, 3)
    assert sorted((item for part in parts for item in part), key=items.index) == items
    totals = [sum(weights[item] for item in part) for part in parts]
    assert max(totals) - min(totals) <= max(weights.values())
    assert all(part == sorted(part, key=items.index) for part in parts)  # each in the list's order
    assert times.partition(items, weights, 3) == parts
    assert times.partition(items, weights, 1) == [items]
    assert times._part("2/3") == (2, 3)
    with pytest.raises(SystemExit):
        times.main(["--part", "4/3"])


def test_a_part_of_a_call_runs_only_its_share(tmp_path):
    path = tmp_path / "records.json"
    names = [item.name for item in notebook_items(4)]
    device = FakeDevice(dict.fromkeys(names, 1.0))
    ran = []
    for part in ("1/2", "2/2"):
        device.ran = []
        call(["--notebooks", *names, "--part", part, "--again"], device, path, [])
        ran.append([name for name, _ in device.ran])
    assert sorted(ran[0] + ran[1]) == sorted(names) and ran[0] and ran[1]


def test_the_start_up_and_compile_time_is_shown_beside_a_time_that_has_it():
    name = times.lesson_names()[0]
    split = dict(entry(37.8), startup_s=21.2, compile_s=7.6, run_s=9.0, compiles=41)
    records = {CPU["label"]: {"device": CPU, "full": {name: entry(16.7)}},
               GPU["label"]: {"device": GPU, "full": {name: split}}}
    assert times._cell(split) == "38 s (29 s start-up and compile)"
    assert times._cell(entry(16.7)) == "17 s"  # an older record: no split, nothing said of one
    row = next(line for line in times.table(records).splitlines() if line.startswith(f"| {name[:2]} |"))
    assert "| 17 s |" in row and "| 38 s (29 s start-up and compile) |" in row
    assert "start-up and compile" in times.table(records).split("\n\n", 1)[1]  # the notes say what it is
    assert "start-up and compile" not in times.table({CPU["label"]: records[CPU["label"]]}).split("\n\n", 1)[1]
    assert "On a Test GPU (GPU): 38 s (29 s start-up and compile) at the full budgets." in (
        times.time_paragraph(name, records))


def test_a_kernels_timing_file_splits_a_notebooks_time():
    kernel = {"kernel_started": 1003.0, "jax_import_s": 1.5, "backend_init_s": 0.5, "compile_s": 4.0, "compiles": 7}
    assert times.split_times(kernel, launched=1000.0, seconds=20.0) == {
        "startup_s": 5.0, "compile_s": 4.0, "run_s": 11.0, "compiles": 7}
    assert times.split_times(dict(kernel, compile_s=None), 1000.0, 20.0) == {"startup_s": 5.0}  # no compile events
    assert times.split_times(None, 1000.0, 20.0) == {}
    assert times.split_times(kernel, launched=1000.0, seconds=6.0)["run_s"] == 0.0  # never below zero


def test_the_kernel_start_up_file_times_the_import_of_jax_and_its_compiles(tmp_path):
    program = ("import json, sys\n"
               "namespace = {}\n"
               f"exec({times.KERNEL_TIMING!r}, namespace)\n"
               "assert not [name for name in namespace if not name.startswith('__')], namespace\n"
               "assert 'jax' not in sys.modules  # the notebook imports jax, not the start-up file\n"
               "import jax, jax.numpy as jnp\n"
               "jax.jit(lambda x: jnp.sin(x) @ x.T)(jnp.ones((64, 64))).block_until_ready()\n")
    env = dict(os.environ, LABCORE_TIMING_OUT=str(tmp_path), JAX_PLATFORMS="cpu")
    subprocess.run([sys.executable, "-c", program], check=True, env=env, timeout=300)
    (written,) = tmp_path.glob("kernel-*.json")
    facts = json.loads(written.read_text())
    assert facts["jax_import_s"] > 0 and facts["backend_init_s"] >= 0
    assert facts["compile_s"] > 0 and facts["compiles"] >= 1  # JAX's compile events were heard


def test_an_entry_measured_on_another_machine_of_the_same_label_names_its_own():
    first, second = times.lesson_names()[:2]
    record = {"device": CPU, "full": {first: entry(100), second: dict(entry(50), machine="another 2-core CPU")},
              "quick": {second: dict(entry(20), machine="another 2-core CPU")}}
    records = {"2-core CPU": record}
    # an entry that names no machine, on a CPU record: the label's CPU may have been another model then
    assert "(measured one notebook at a time; CPU model not recorded" in times.time_paragraph(first, records)
    assert "(measured one notebook at a time; another 2-core CPU)" in times.time_paragraph(second, records)
    # the column's note leads with the machine most of its entries ran on, the others beside it
    note = next(line for line in times.table(records).splitlines() if line.startswith("- **2-core CPU**"))
    assert note.startswith("- **2-core CPU**: another 2-core CPU; measured") and "a 2-core test CPU" not in note
    assert f"lesson {first[:2]} (full budget) on CPU model not recorded" in note
    record["full"][first] = dict(entry(100), machine=CPU["machine"])
    record["quick"][first] = dict(entry(40), machine=CPU["machine"])
    note = next(line for line in times.table(records).splitlines() if line.startswith("- **2-core CPU**"))
    assert note.startswith("- **2-core CPU**: a 2-core test CPU; measured")  # a tie: the record's own machine
    assert f"lesson {second[:2]} (full and quick budgets) on another 2-core CPU" in note
