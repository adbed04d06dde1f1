"""The site's tooling (docs/tooling): recorded runs, stale-run detection, lesson pages, and the
single source of the Colab links; and the sources the site is built from: every citation and
glossary term a page or notebook uses exists. The built site itself is checked in a browser by
``make docs-check`` (docs/tooling/test_site.py)."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from conftest import NOTEBOOKS_DIR, REPO_ROOT, outside_xdist

sys.path.insert(0, str(REPO_ROOT / "docs" / "tooling"))
executed = importlib.import_module("executed")
lessons = importlib.import_module("lessons")
lesson_api = importlib.import_module("lesson_api")
lesson_index = importlib.import_module("lesson_index")
site_facts = importlib.import_module("site_facts")
prose = importlib.import_module("prose")
prose_numbers = importlib.import_module("prose_numbers")

NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
DOCS = REPO_ROOT / "docs"
PAGES = sorted(path for path in DOCS.rglob("*.md") if "_build" not in path.parts and "generated" not in path.parts)
CITE = re.compile(r"\{cite(?::\w+)?\}`([^`]+)`")
TERM = re.compile(r"\{term\}`([^`]+)`")


def _markdown_sources():
    for path in PAGES:
        yield path.relative_to(REPO_ROOT), path.read_text()
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        yield path.relative_to(REPO_ROOT), "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")


def bibliography_keys() -> set[str]:
    return set(re.findall(r"^@\w+\{\s*([^,\s]+)\s*,", (DOCS / "references.bib").read_text(), re.MULTILINE))


def glossary_terms() -> set[str]:
    text = (DOCS / "glossary.md").read_text()
    block = text[text.index("```{glossary}"):]
    block = block[: block.index("\n```", 3)]
    return {line.strip().lower() for line in block.splitlines()[1:] if line.strip() and not line.startswith((" ", ":"))}


def test_every_citation_resolves_to_a_bibliography_entry():
    keys = bibliography_keys()
    missing = {f"{where}: {key.strip()}" for where, text in _markdown_sources()
               for group in CITE.findall(text) for key in group.split(",") if key.strip() not in keys}
    assert missing == set()


def test_the_bibliography_has_no_duplicate_keys_and_cites_the_course_s_sources():
    keys = re.findall(r"^@\w+\{\s*([^,\s]+)\s*,", (DOCS / "references.bib").read_text(), re.MULTILINE)
    assert len(keys) == len(set(keys))
    for key in ("mnih2013playing", "mnih2015human", "vanhasselt2016deep", "dabney2018implicit", "fortunato2018noisy",
                "hessel2018rainbow", "schulman2017proximal", "schulman2016high", "gallici2025simplifying",
                "young2019minatar", "castro2018dopamine", "malkin2022trajectory", "bengio2023gflownet",
                "madan2023learning", "pan2023better", "bengio2021flow", "lange2022gymnax", "lu2022discovered",
                "huang2022cleanrl"):
        assert key in keys


def test_every_glossary_term_used_is_defined():
    terms = glossary_terms()
    used = set()
    for where, text in _markdown_sources():
        for reference in TERM.findall(text):
            target = re.search(r"<([^>]+)>$", reference)
            used.add((str(where), (target.group(1) if target else reference).strip().lower()))
    assert {f"{where}: {term}" for where, term in used if term not in terms} == set()


def test_every_notebook_cites_something_and_links_the_glossary():
    for path in NOTEBOOKS:
        text = "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "markdown")
        assert CITE.search(text), f"{path.name} cites nothing"
        assert TERM.search(text), f"{path.name} links no glossary term"


def test_no_lesson_page_or_docstring_speaks_of_how_the_course_is_made():
    assert prose.problems() == []


@pytest.mark.parametrize("planted", [
    "median of 10 calls; the DQN rows did not fit in the time",
    "0.941 (0.935-0.966): Short of the 0.95x the CPU reaches.",
    "the pipes it used before Ray, at commit 0cc690f, the last that has them",
    "### Against PyTorch: 2x and 20x",
])
def test_the_how_made_check_finds_words_about_the_work_on_every_page(tmp_path, planted):
    for folder in ("notebooks", "docs/guide", "docs/results", "labcore"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "docs" / "guide" / "development.md").write_text(f"# Development\n\n{planted}\n")
    (tmp_path / "docs" / "results" / "history.md").write_text(f"# History\n\n{planted}\n")
    (tmp_path / "labcore" / "module.py").write_text(f'"""A module.\n\n{planted}\n"""\n')
    found = {problem.split(":")[0] for problem in prose.problems(tmp_path)}
    assert found == {"docs/guide/development.md", "docs/results/history.md", "labcore/module.py"}  # about the project too


@pytest.mark.parametrize("planted", [
    "smaller budgets in CI (where LABCORE_QUICK=1)",
    "on the 2-core x86 machine that runs this course's tests",
    "63x less wall time (goal: 10x)",
    "Our two speed goals are not met",
    "Against the goals",
    "the people who built labcore measured",
])
def test_the_how_made_check_finds_a_planted_phrase_in_a_lesson_or_a_page(tmp_path, planted):
    for folder in ("notebooks", "docs/guide", "labcore"):
        (tmp_path / folder).mkdir(parents=True)
    assert prose.problems(tmp_path) == []
    lesson = {"cells": [{"cell_type": "markdown", "source": ["# 99 · A lesson\n", "\n", f"Measured {planted}.\n"]}]}
    (tmp_path / "notebooks" / "99_a_lesson.ipynb").write_text(json.dumps(lesson))
    assert len(prose.problems(tmp_path)) == 1 and "notebooks/99_a_lesson.ipynb" in prose.problems(tmp_path)[0]
    (tmp_path / "docs" / "guide" / "development.md").write_text(f"# Development\n\n{planted}\n")  # its own subject
    assert len(prose.problems(tmp_path)) == 1
    (tmp_path / "docs" / "guide" / "runs.md").write_text(f"# Runs\n\n{planted}\n")
    assert len(prose.problems(tmp_path)) == 2


def test_every_number_in_the_lessons_prose_is_backed_and_every_results_table_says_where_it_came_from():
    assert prose_numbers.problems() == []


def _lesson(*markdown: str, code: str = "config = Config(total_steps=40_000, learning_rate=2.5e-4)") -> dict:
    first = "# 99 · A lesson\n\n**Time**: about 9 min of reading (1,762 words of prose), plus the runs: 54 s."
    cells = [{"cell_type": "markdown", "source": [first]}, {"cell_type": "code", "source": [code]}]
    return {"cells": cells + [{"cell_type": "markdown", "source": [text]} for text in markdown]}


@pytest.mark.parametrize("sentence, number", [
    ("The final evaluation at the full budget scores 98.5.", "98.5"),
    ("On a GPU the run is about 3x faster.", "3x"),
    ("It reached 1.69M steps per second on one machine.", "1.69M"),
    ("A random policy keeps the pole up for about 22 steps.", "22"),
    ("Section 3 shows it; the update takes 35 ms there.", "35 ms"),
])
def test_the_number_check_finds_a_planted_unsourced_number(sentence, number):
    assert prose_numbers.lesson_numbers(_lesson("Some prose.", sentence), "99_a_lesson") == [(number, sentence)]


RESULTS = {"dqn": "| seed | score |\n|---|---|\n| 0 | 98.5 |\n"}


@pytest.mark.parametrize("sentence, number", [
    ("The final evaluation scores 98.5 {cite:p}`mnih2015human`.", "98.5"),  # a citation is not a quote
    ("CleanRL's DQN scores 333.6 on Breakout {cite:p}`huang2022cleanrl`.", "333.6"),  # not where that paper has it
    ("The run scores 97.1 ([DQN results](../results/dqn.md)).", "97.1"),  # a linked page that does not hold it
    ("It decays to 0.07 ({py:class}`~labcore.agents.pqn.config.PQNConfig`).", "0.07"),  # not in the code it names
])
def test_a_number_beside_a_source_that_does_not_hold_it_is_found(sentence, number):
    assert prose_numbers.lesson_numbers(_lesson(sentence), "99_a_lesson", RESULTS) == [(number, sentence)]


def test_a_quoted_number_passes_only_beside_its_own_source(monkeypatch):
    from labcore.course import published

    quote = published.Quote("50x", "gallici2025simplifying", "abstract")
    monkeypatch.setattr(published, "QUOTES", (quote,))
    ok = "The PQN paper reports up to 50x DQN's speed {cite:p}`gallici2025simplifying`."
    other = "The DQN paper reports up to 50x its speed {cite:p}`mnih2015human`."
    assert prose_numbers.lesson_numbers(_lesson(ok), "99_a_lesson", RESULTS) == []
    assert prose_numbers.lesson_numbers(_lesson(other), "99_a_lesson", RESULTS) == [("50x", other)]


def test_every_quoted_number_names_its_place_in_a_source_the_bibliography_holds():
    from labcore.course import published

    keys = set(re.findall(r"^@\w+\{([^,]+),", (DOCS / "references.bib").read_text(), re.M))
    for quote in published.QUOTES:
        assert quote.source in keys or quote.source.startswith("https://"), quote
        assert len(quote.where) > 10, quote


@pytest.mark.parametrize("sentence", [
    "The run scores 98.5 ([DQN results](../results/dqn.md)).",  # linked to the page that records it
    "It decays to 0.05 ({py:class}`~labcore.agents.pqn.config.PQNConfig`).",  # the code it names sets it
    "The cell below prints the score, about 98.5 here.",  # printed by a cell
    "It trains for 40k steps at a learning rate of 2.5e-4, then 40,000 more.",  # the lesson's own settings
    "Section 3.2 and lesson 03 measure it; lines 10-16 are the update; exercise 2 asks for 3 of them.",
    "On an NVIDIA H100 80GB, with JAX 0.10.2, a 10x10 grid and 4 x 128 steps, `x = 1234`, $e^{88.7}$.",
])
def test_the_number_check_spares_what_is_backed_or_no_measurement(sentence):
    assert prose_numbers.lesson_numbers(_lesson(sentence), "99_a_lesson", RESULTS) == []


def test_a_fact_is_spared_only_in_the_lesson_that_lists_it():
    sentence = "exp overflows float32 above about 88.7."
    assert prose_numbers.lesson_numbers(_lesson(sentence), "00_jax_primitives") == []
    assert prose_numbers.lesson_numbers(_lesson(sentence), "99_a_lesson") == [("88.7", sentence)]


def test_a_results_table_must_name_its_machine_jax_and_date_just_above_it():
    table = "| run | steps/s |\n|---|---|\n| CartPole | 128,000 |\n"
    header = "| run | steps/s |"
    said = "`python benchmarks/ppo_speed.py` on a 2-core x86 CPU, JAX 0.10.2, 2026-11-28:\n\n"
    assert prose_numbers.tables_without_machine(f"## Speed\n\n{said}{table}") == []
    assert prose_numbers.tables_without_machine(f"## Speed\n\n`python x.py`, JAX 0.10.2, 2026-11-28:\n\n{table}") == [header]
    # a page-wide header does not count for a table in another section, nor a table for the one after it
    assert prose_numbers.tables_without_machine(f"# PPO\n\n{said}## Speed\n\nMeasured:\n\n{table}") == [header]
    assert prose_numbers.tables_without_machine(f"## Speed\n\n{said}{table}\nThen:\n\n{table}") == [header]
    # the header itself may carry them, as columns
    assert prose_numbers.tables_without_machine("| machine | JAX | date | steps/s |\n|---|---|---|---|\n"
                                                "| 2-core CPU | 0.10.2 | 2026-11-28 | 1 |\n") == []


def test_a_results_table_must_say_what_produced_it_and_when():
    table = "| run | steps/s |\n|---|---|\n| CartPole | 128,000 |\n"
    assert prose_numbers.unrecorded_tables(f"# PPO\n\n## Speed\n\nMeasured:\n\n{table}") == ["## Speed"]
    assert prose_numbers.unrecorded_tables(f"## Speed\n\n`python benchmarks/ppo_speed.py`, 2026-11-28:\n\n{table}") == []
    assert prose_numbers.unrecorded_tables(f"## Speed\n\n```bash\n# a comment\npython x.py\n```\n\n{table}") == ["## Speed"]


def test_the_how_made_check_spares_look_alikes():
    assert prose.how_made("CIFAR-10, a CIs lookup, the goal-conditioned agent reaches the goal state; CPU and TPU") == []
    assert prose.how_made("A TD target; img/learning_curves.gif at commit 4241f24; the fresh clone at commit 347fde2 "
                          "ran it; 0.995x and 0.993x on a 2-core CPU; the update did not fail; short of memory") == []


def test_every_algorithm_lesson_sets_its_key_equations_beside_its_pseudocode():
    algorithm_lessons = 0
    for path in NOTEBOOKS:
        cells = nbformat.read(path, as_version=4).cells
        at = [index for index, cell in enumerate(cells) if cell.cell_type == "markdown" and "**Algorithm:" in cell.source]
        if not at:
            continue
        algorithm_lessons += 1
        equations = cells[at[0] + 1]
        assert equations.cell_type == "markdown" and equations.source.startswith("**Key equations.**"), path.name
        displays = equations.source.split("$$")
        assert len(displays) >= 3 and len(displays) % 2 == 1, f"{path.name}: unbalanced $$"
        inline = "".join(displays[0::2])  # the text between the displayed formulas
        assert inline.count("$") % 2 == 0, f"{path.name}: unbalanced $"
        assert "`" in inline, f"{path.name}: the symbols are not tied to the code's names"
    assert algorithm_lessons == 8


def test_the_code_hash_follows_code_cells_only():
    notebook = nbformat.read(NOTEBOOKS[0], as_version=4)
    before = executed.code_sha256(notebook)
    next(cell for cell in notebook.cells if cell.cell_type == "markdown").source += "\nMore prose."
    assert executed.code_sha256(notebook) == before
    next(cell for cell in notebook.cells if cell.cell_type == "code").source += "\nx = 1"
    assert executed.code_sha256(notebook) != before


def _stored_run(name: str, budget: str) -> nbformat.NotebookNode:
    """A made-up run of notebooks/`name`: every code cell printed its number."""
    run = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    for number, cell in enumerate(cell for cell in run.cells if cell.cell_type == "code"):
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"cell {number}\n")]
        cell.execution_count = number + 1
    executed.stamp(run, nbformat.read(NOTEBOOKS_DIR / name, as_version=4), budget, 12.0)
    return run


def test_a_stored_run_is_current_until_the_code_changes(tmp_path, monkeypatch):
    name = NOTEBOOKS[0].name
    monkeypatch.setattr(executed, "STORE", tmp_path / "store")
    assert executed.load_current(name, "quick") is None
    executed.save(_stored_run(name, "quick"), name, "quick")
    assert executed.load_current(name, "quick") is not None
    assert executed.load_current(name, "full") is None, "a quick run must not stand in for a full one"
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    edited = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    next(cell for cell in edited.cells if cell.cell_type == "code").source += "\nprint('changed')"
    nbformat.write(edited, notebooks / name)
    monkeypatch.setattr(executed, "NOTEBOOKS", notebooks)
    assert executed.load_current(name, "quick") is None, "edited code must make the stored run stale"


def test_a_lesson_page_has_its_header_under_the_title_and_the_run_s_outputs():
    name = "07_masked_ppo.ipynb"
    page = lessons.lesson_page(name, _stored_run(name, "quick"))
    assert page.cells[0].source.startswith("# 07") and "\n" not in page.cells[0].source
    header = page.cells[1].source
    assert site_facts.colab_url(name) in header
    assert "quick budget" in header and executed.machine() in header
    assert "labcore.agents.ppo" in header, "the lesson's API is linked from its header"
    code = [cell for cell in page.cells if cell.cell_type == "code"]
    assert [cell.outputs[0]["text"] for cell in code] == [f"cell {number}\n" for number in range(len(code))]
    source = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    assert [cell.source for cell in code] == [cell.source for cell in source.cells if cell.cell_type == "code"]


def test_a_run_that_shared_the_cores_says_so():
    name = NOTEBOOKS[0].name
    alone = lessons.header(name, _stored_run(name, "quick").metadata["labcore"])
    assert "at a time" not in alone
    run = _stored_run(name, "quick")
    executed.stamp(run, nbformat.read(NOTEBOOKS_DIR / name, as_version=4), "quick", 12.0, at_once=2)
    assert "in a test run that executed 2 notebooks at a time" in lessons.header(name, run.metadata["labcore"])


def test_a_full_run_says_so():
    name = NOTEBOOKS[0].name
    header = lessons.lesson_page(name, _stored_run(name, "full")).cells[1].source
    assert "full budget" in header and "quick budget" not in header


def test_the_colab_links_come_from_the_setup_cell():
    cell = site_facts._cell_module()
    source = cell.parse_source(cell.cell_text(REPO_ROOT))
    for path in NOTEBOOKS:
        assert site_facts.colab_url(path.name) == source.badge_prefix() + path.name
    assert site_facts.repository_url() == f"https://github.com/{source.owner}/{source.repo}"


def test_every_lesson_links_its_api_and_every_link_resolves():
    lesson_api.check()
    assert set(lesson_api.LESSON_API) == {path.stem for path in NOTEBOOKS}


def test_the_lesson_tables_and_sections_are_written_from_the_one_list():
    """README's and the Colab page's tables, Start here's map and sections: as lesson_index.LESSONS says."""
    assert lesson_index.out_of_step() == []
    github_slugify = pytest.importorskip("myst_parser.slugs").github_slugify  # the docs' stack has it; the oldest may not

    # the map's links are the anchors MyST gives the headings
    assert [lesson.anchor for lesson in lesson_index.LESSONS] == [github_slugify(lesson.title) for lesson in lesson_index.LESSONS]


def test_a_lesson_added_to_the_list_reaches_every_table_and_section(tmp_path):
    """A new notebook with no entry is named; its entry in LESSONS then writes its row in the README's and
    the Colab page's tables, its row in Start here's map and its section there, and nothing else changes."""
    pages = ("README.md", "colab/README.md", "docs/start-here.md", "colab/setup_cell.py")
    for page in pages:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / page, tmp_path / page)
    (tmp_path / "notebooks").mkdir()
    for path in NOTEBOOKS + [NOTEBOOKS_DIR / "13_new_topic.ipynb"]:
        (tmp_path / "notebooks" / path.name).write_text("{}")
    assert lesson_index.out_of_step(root=tmp_path) == [
        f"LESSONS lists {[lesson.stem for lesson in lesson_index.LESSONS]}, notebooks/ holds "
        f"{[lesson.stem for lesson in lesson_index.LESSONS] + ['13_new_topic']}"]
    new = lesson_index.Lesson("13_new_topic", "A new topic: planted", teaches="planted teaching", needs="12",
                              optional=True, writes="`planted_exercise`", about="Planted prose.", api=(),
                              colab="any runtime")
    before = {page: (tmp_path / page).read_text() for page in pages}
    lesson_index.out_of_step((*lesson_index.LESSONS, new), root=tmp_path, write=True)
    assert lesson_index.out_of_step((*lesson_index.LESSONS, new), root=tmp_path) == []
    after = {page: (tmp_path / page).read_text() for page in pages}
    badge = site_facts.colab_url("13_new_topic.ipynb")
    added = {page: [line for line in after[page].splitlines() if line not in before[page].splitlines()] for page in pages}
    assert all(line in after[page].splitlines() for page in pages for line in before[page].splitlines())  # none lost
    assert added["README.md"] == [f"| 13 | [A new topic: planted](notebooks/13_new_topic.ipynb) | planted teaching | "
                                  f"[![Open In Colab]({lesson_index.BADGE_IMAGE})]({badge}) |"]
    assert added["colab/README.md"] == [f"| 13 | A new topic: planted (`notebooks/13_new_topic.ipynb`; any runtime) | "
                                        f"[![Open In Colab]({lesson_index.BADGE_IMAGE})]({badge}) |"]
    assert added["docs/start-here.md"] == [
        "| 13 | [A new topic: planted](#a-new-topic-planted) ({doc}`with outputs <lessons/13_new_topic>`) | 12 | yes | "
        "`planted_exercise` |",
        "### A new topic: planted",
        f"[`notebooks/13_new_topic.ipynb`]({lesson_index.NOTEBOOK_URL}13_new_topic.ipynb):",
        "Planted prose."]
    assert after["colab/setup_cell.py"] == before["colab/setup_cell.py"]


@contextlib.contextmanager
def _recorded_run(tmp_path: pathlib.Path, stem: str, cells: list):
    """nbval runs a notebook of `cells` with the recording plugin, quick budget, as `make test` does,
    under two pytest-xdist workers (`make test NOTEBOOK_WORKERS=2`; the default is one), so the
    recorder is checked where each notebook runs whole in a worker process.

    Yields the notebook, nbval's completed process and where a recorded run is stored (removed after).
    """
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / f"{stem}_{os.getpid()}.ipynb"
    nbformat.write(notebook, path)
    stored = executed.stored_path(path.name, "quick")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", str(path), "-p", "docs.tooling.record_outputs",
             "--nbval-lax", "--nbval-current-env", "-q", "-p", "no:cacheprovider", f"--rootdir={tmp_path}",
             "-n", "2", "--dist", "loadfile"],
            cwd=REPO_ROOT, env={**outside_xdist(), "LABCORE_QUICK": "1"}, capture_output=True, text=True, timeout=300)
        yield notebook, result, stored
    finally:
        stored.unlink(missing_ok=True)


def test_make_test_records_a_notebook_with_its_outputs(tmp_path):
    """A two-cell notebook passes under nbval; the stored copy has its outputs and the run's facts."""
    cells = [nbformat.v4.new_markdown_cell("# A notebook"), nbformat.v4.new_code_cell("print('hello from the kernel')"),
             nbformat.v4.new_code_cell("6 * 7")]
    with _recorded_run(tmp_path, "zz_record_test", cells) as (notebook, result, stored):
        assert result.returncode == 0, result.stdout + result.stderr
        run = nbformat.read(stored, as_version=4)
        first, second = (cell for cell in run.cells if cell.cell_type == "code")
        assert first.outputs[0]["text"] == "hello from the kernel\n" and first.execution_count == 1
        assert second.outputs[0]["data"]["text/plain"] == "42" and second.execution_count == 2
        assert run.metadata["labcore"]["budget"] == "quick" and run.metadata["labcore"]["at_once"] == 2
        assert run.metadata["labcore"]["code_sha256"] == executed.code_sha256(notebook)
        nbformat.validate(run)


def test_a_notebook_with_a_failing_cell_is_not_recorded(tmp_path):
    cells = [nbformat.v4.new_code_cell("print('fine')"), nbformat.v4.new_code_cell("raise ValueError('on purpose')")]
    with _recorded_run(tmp_path, "zz_record_fail", cells) as (_, result, stored):
        assert result.returncode != 0
        assert not stored.exists()


api_docstrings = importlib.import_module("api_docstrings")


def test_an_indented_example_becomes_a_literal_block():
    lines = ["Train a run::", "", "Or in short:", "", "    runner = train(config)", "    print(runner)", "", "Done."]
    rest = api_docstrings.to_rest(lines)
    example = rest.index("    runner = train(config)")
    assert rest[example - 2] in ("::", "Or in short::") and rest[example + 1] == "    print(runner)"
    assert rest.count("Train a run::") == 1, "a paragraph already ending in :: is left alone"


def test_argument_notes_become_parameter_fields_and_other_notes_a_definition_list():
    rest = api_docstrings.to_rest(["Run it.", "", "run_dir: where the run goes", "seed: the first key"], {"run_dir", "seed"})
    assert ":param run_dir: where the run goes" in rest and ":param seed: the first key" in rest
    other = "\n".join(api_docstrings.to_rest(["Run it.", "", "obs: [B, 4] float32", "done: [B] bool"], {"config"}))
    assert ":param" not in other and "obs" in other


def test_shape_notes_and_norms_are_characters_not_markup():
    (line,) = api_docstrings.to_rest(["sum_x |p(x) - q(x)| over [B, *obs_shape]; clip_grad_norm_ and ``a|b``"])
    assert line == r"sum_x \|p(x) - q(x)\| over [B, \*obs_shape]; clip_grad_norm\_ and ``a|b``"
