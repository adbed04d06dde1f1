"""Each lesson's "Try it" section: its experiments, the script that runs them, and the page that
records what happened, which the lessons link section by section."""

import importlib.util
import json
import re
import subprocess
import sys

import pytest
from conftest import NOTEBOOKS_DIR, REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "docs" / "tooling"))
import prose_numbers  # noqa: E402

spec = importlib.util.spec_from_file_location("try_it", REPO_ROOT / "benchmarks" / "try_it.py")
try_it = importlib.util.module_from_spec(spec)
sys.modules["try_it"] = try_it  # its dataclass looks its module up there
spec.loader.exec_module(try_it)

PAGE = REPO_ROOT / "docs" / "results" / "try-it.md"
SITE_PAGE = "https://labcore-rl.github.io/labcore/results/try-it.html"


def markdown(notebook) -> list[str]:
    return ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "markdown"]


@pytest.mark.parametrize("path", sorted(NOTEBOOKS_DIR.glob("*.ipynb")), ids=lambda path: path.name[:2])
def test_each_lesson_ends_with_experiments_that_link_their_recorded_answers(path):
    cells = markdown(json.loads(path.read_text()))
    (index,) = [i for i, text in enumerate(cells) if text.startswith("## Try it")]
    assert cells[index + 1].startswith("## Check yourself")  # just before the quiz
    items = re.findall(r"^\d+\. \*\*.+$", cells[index], re.M)
    lesson = path.name[:2]
    assert len(items) == len([e for e in try_it.EXPERIMENTS if e.lesson == lesson]) >= 2
    for item in items:  # each experiment links its own answer
        assert f"]({SITE_PAGE}#{try_it.anchor(lesson)})" in item, item


def test_the_page_records_every_experiment_under_the_heading_the_lessons_link():
    text = PAGE.read_text()
    sections = {lesson: heading for heading, lesson in re.findall(r"^## (Lesson (\d\d): .+)$", text, re.M)}
    assert sorted(sections) == sorted(try_it.LESSONS)
    for lesson, heading in sections.items():
        assert try_it.anchor(lesson) == re.sub(r"\s+", "-", re.sub(r"[^a-z0-9 -]", "", heading.lower()))
        body = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
        questions = [e.question for e in try_it.EXPERIMENTS if e.lesson == lesson]
        assert re.findall(r"^### (.+)$", body, re.M) == questions
        assert body.count("**What happens:**") == len(questions)
    assert prose_numbers.unrecorded_tables(text) == []  # each table with its command and date


def test_experiment_names_are_unique_and_every_lesson_has_two_or_more():
    names = [e.name for e in try_it.EXPERIMENTS]
    assert len(names) == len(set(names))
    assert {e.lesson for e in try_it.EXPERIMENTS} == set(try_it.LESSONS)


@pytest.mark.end_to_end
def test_the_script_runs_a_lessons_experiments_and_renders_their_answers(tmp_path):
    results, page = tmp_path / "try_it.json", tmp_path / "try-it.md"
    done = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "try_it.py"), "--lessons", "00",
                           "--results", str(results), "--page", str(page)],
                          capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    record = json.loads(results.read_text())["00"]
    found = record["experiments"]
    assert list(found) == ["jit_on_a_chain", "static_arguments_recompile"]
    traces = {row["n is"]: row["traces"] for row in found["static_arguments_recompile"]["rows"]}
    assert traces == {"static": 5, "traced": 1}  # measured by counting, not timed
    assert all(row["speed_up"] > 0 for row in found["jit_on_a_chain"]["rows"])
    text = page.read_text()
    assert "## Lesson 00: JAX primitives" in text and text.count("**What happens:**") == 2
    assert record["date"] in text and prose_numbers.unrecorded_tables(text) == []
