"""benchmarks/lesson_times.py: the tables of lesson times are what its records say, and a new device fills a column.

The timing itself (a notebook under nbval, a benchmark script) is what `make bench-device` runs; here the
records are made up, so that every branch of the rendering is exercised without running a lesson.
"""

from __future__ import annotations

import importlib.util
import sys

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
    assert "full budget, T4 GPU (Colab)" in table and "Not measured yet on: T4 GPU (Colab), TPU (Colab)" in table
    paragraph = times.time_paragraph(name, cpu_only)
    assert "6.5 min at the full budgets, 16 s at the quick budgets" in paragraph
    assert "Not measured on a T4 GPU or a TPU yet." in paragraph

    with_t4 = dict(cpu_only, **{"Tesla T4 (GPU)": {"device": T4, "full": {name: entry(95)}}})
    table = times.table(with_t4)
    assert "full budget, Tesla T4 (GPU)" in table and "T4 GPU (Colab)" not in table
    assert "| 1.6 min |" in table and "TPU (Colab)" in table
    paragraph = times.time_paragraph(name, with_t4)
    assert "On a Tesla T4 (GPU): 1.6 min at the full budgets." in paragraph
    assert "Not measured on a TPU yet." in paragraph and "T4 GPU or" not in paragraph


def test_a_failed_run_and_a_missing_run_are_said_as_such():
    first, second = times.lesson_names()[:2]
    records = {"2-core CPU": {"device": CPU, "full": {first: entry(120, ok=False)}}}
    assert "failed after 2.0 min" in times.time_paragraph(first, records)
    assert "not yet measured at the full budgets" in times.time_paragraph(second, records)
    row = next(line for line in times.table(records).splitlines() if line.startswith(f"| {second[:2]} |"))
    assert row.endswith("| not measured | not measured | not measured |")


def test_reading_time_does_not_count_fenced_code():
    name = "00_jax_primitives"
    words = times.prose_words(name)
    assert 1_000 < words < 10_000
    assert f"({words:,} words of prose)" in times.time_paragraph(name, {})


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


@pytest.mark.parametrize("label, said", [
    ("NVIDIA H100 80GB HBM3 (GPU)", "an"), ("A100", "an"), ("8-core CPU", "an"), ("Intel Xeon", "an"),
    ("T4 GPU (Colab)", "a"), ("TPU v5e", "a"), ("Tesla T4", "a"), ("2-core CPU", "a")])
def test_a_device_is_introduced_with_the_article_it_is_said_with(label, said):
    assert times.article(label) == said
