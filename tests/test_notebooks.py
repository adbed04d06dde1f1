"""The conventions every committed notebook follows (nbval runs them; this checks their shape).

A notebook here must: be valid nbformat; be committed without outputs; open with a markdown
title that says what it teaches; have as first code cell the Colab setup cell from
colab/setup_cell.py; size its training with labcore.budget; check results with assert; set at
least three exercises checked by labcore.course.exercises, on the learner's stub or on a broken function
to fix (never on a visible solution); read no
file outside the installed package (users run the notebooks after a non-editable install, on
Colab or from any folder, where the repository's tests/, benchmarks/ and README are not there);
and be linked from the README and the Colab page.
"""

from __future__ import annotations

import copy
import inspect
import json
import io
import re
import tokenize

import nbformat
import pytest

from conftest import NOTEBOOKS_DIR, REPO_ROOT
from labcore.course import exercises
from labcore.course.lessons.nb10_debugging import exercises as nb10_debugging

NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
SETUP_CELL = (REPO_ROOT / "colab" / "setup_cell.py").read_text().strip()
CHECK_CALL = re.compile(r"""(?<![\w.])(?:assert\s+)?check\(\s*["'](\w+)["']""")


def stored_output_problems(nb: nbformat.NotebookNode) -> list[str]:
    """Cells that carry outputs or execution counts (notebooks are committed stripped)."""
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.get("outputs"):
            problems.append(f"cell {index} has stored outputs")
        if cell.get("execution_count") is not None:
            problems.append(f"cell {index} has an execution count")
    return problems


# Folders and files of the repository that an installed labcore does not have.
REPOSITORY_NAMES = {"tests", "benchmarks", "colab", "notebooks"}
WALKS_UP = re.compile(r"\.\s*parent\s*\.\s*parent\b|\.\s*parents\s*\[")
CHANGES_DIRECTORY = re.compile(r"\bos\s*\.\s*chdir\s*\(|^\s*%cd\b", re.MULTILINE)


def _code_and_strings(source: str) -> tuple[str, list[str]]:
    """The cell's code with strings and comments blanked, and the contents of its string literals."""
    code, strings = [], []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.STRING:
                body = re.sub(r"^[rbuf]*", "", token.string, flags=re.IGNORECASE)
                quote = body[:3] if body[:3] in ('"""', "'''") else body[:1]
                strings.append(body[len(quote):-len(quote)])
                code.append('""')
            elif token.type != tokenize.COMMENT:
                code.append(token.string)
    except (tokenize.TokenError, IndentationError):  # magics and shell lines: fall back to the raw text
        return source, re.findall(r"""["']([^"'\n]*)["']""", source)
    return " ".join(code), strings


def repository_reads(source: str) -> list[str]:
    """What in one code cell reads files outside the installed package: walking up from a module's
    or the notebook's folder (``.parent.parent``, ``.parents[i]``), a path literal naming a folder
    or file of the repository (tests/, benchmarks/, colab/, notebooks/, README) or going up
    (``..``), or changing the working directory."""
    code, strings = _code_and_strings(source)
    problems = []
    if WALKS_UP.search(code):
        problems.append("walks up the folder tree (.parent.parent / .parents[...])" +
                        (" from __file__" if "__file__" in code else ""))
    if CHANGES_DIRECTORY.search(source):
        problems.append("changes the working directory")
    for text in strings:
        if not text or any(c.isspace() for c in text):  # prose, not a path
            continue
        parts = re.split(r"[/\\]", text)
        if ".." in parts:
            problems.append(f"relative path out of the notebook's folder: {text!r}")
        elif any(part in REPOSITORY_NAMES or part.startswith("README") for part in parts):
            problems.append(f"path into the repository: {text!r}")
    return problems


def code_cells(nb: nbformat.NotebookNode) -> list[str]:
    return [cell.source for cell in nb.cells if cell.cell_type == "code"]


def test_there_are_notebooks():
    assert NOTEBOOKS, f"no notebooks found in {NOTEBOOKS_DIR}"


def test_notebook_names_are_numbered_and_unique():
    numbers = []
    for path in NOTEBOOKS:
        match = re.fullmatch(r"(\d\d)_[a-z0-9_]+\.ipynb", path.name)
        assert match, f"{path.name}: expected NN_lower_snake_name.ipynb"
        numbers.append(match.group(1))
    assert len(numbers) == len(set(numbers)), f"duplicate notebook numbers: {numbers}"


def test_stored_output_rule_catches_outputs_and_counts():
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    assert stored_output_problems(nb) == []
    dirty = copy.deepcopy(nb)
    first_code = next(i for i, c in enumerate(dirty.cells) if c.cell_type == "code")
    dirty.cells[first_code].outputs = [nbformat.v4.new_output("stream", text="hello\n")]
    dirty.cells[first_code].execution_count = 3
    assert stored_output_problems(dirty) == [
        f"cell {first_code} has stored outputs",
        f"cell {first_code} has an execution count",
    ]


@pytest.mark.parametrize("source", [
    'bench = pathlib.Path(labcore.__file__).parent.parent / "benchmarks" / "iqn_modes.py"',
    'TESTS = pathlib.Path(labcore.__file__).parent.parent.joinpath("tests").glob("test_*.py")',
    'root = Path(__file__).resolve().parents[1]',
    'text = open("../README.md").read()',
    "table = Path('README.md').read_text()",
    'spec = importlib.util.spec_from_file_location("b", "benchmarks/iqn_modes.py")',
    'cell = (Path("colab") / "setup_cell.py").read_text()',
    'import os\nos.chdir("..")',
    '%cd ..\nx = 1',
    'data = np.load(r"..\\data\\x.npy")',
])
def test_repository_read_rule_catches_reads_outside_the_package(source):
    assert repository_reads(source), source


@pytest.mark.parametrize("source", [
    'runs_dir = Path("runs") / "07_masked_ppo"  # written next to the notebook',
    'print("the same comparisons run in tests/test_iqn_parity.py on every commit")',
    "# benchmarks/iqn_modes.py measures the same at a larger size\nx = 1",
    'from labcore.agents.iqn.timing import timed_block\nfrom labcore.tools.benchmarking import matmul_rate',
    'workdir = Path(tempfile.mkdtemp(prefix="labcore-03-"))',
    'package_data = pathlib.Path(labcore.__file__).parent / "envs"',
    'x = a[1:3]  # slices are not paths\ny = f"{x!r}"',
    '!pip install -q labcore',
])
def test_repository_read_rule_passes_cells_that_stay_in_the_package(source):
    assert repository_reads(source) == [], source


SHOW_CALL = re.compile(r"""(?<![\w.])show_source\(\s*([\w.]+)""")
SOLUTION_CALL = re.compile(r"""(?<![\w])solution\(\s*["'](\w+)["']""")


# Find-the-bug exercises hand the learner a broken function to fix instead of a stub to fill in.
HANDED_OUT = dict(nb10_debugging.BROKEN)


def exercise_problems(nb: nbformat.NotebookNode) -> dict[str, list[str]]:
    """The exercises a notebook checks, and what breaks the rule that each is checked once, on the
    learner's own unfinished function (its cell defines it and raises NotImplementedError, or, for
    a find-the-bug exercise, it is the broken function handed out, verbatim), with no solution on
    the page: a worked one is only a ``solution("name")`` call away."""
    checked, errors = [], []
    for index, source in enumerate(code_cells(nb)):
        for match in CHECK_CALL.finditer(source):
            name = match.group(1)
            if name not in exercises.names():
                errors.append(f"code cell {index}: unknown exercise {name!r}")
                continue
            if match.group(0).startswith("assert") or name in checked:
                errors.append(f"code cell {index}: {name!r} is checked a second time (a visible solution)")
                continue
            checked.append(name)
            call = re.search(rf"""check\(\s*["']{name}["']\s*,\s*(\w+)""", source)
            function = call.group(1) if call else None
            handed_out = HANDED_OUT.get(name)
            if handed_out is not None:  # a find-the-bug exercise: checked on the broken function, verbatim
                if not (function == handed_out.__name__ and inspect.getsource(handed_out) in source):
                    errors.append(f"code cell {index}: {name!r} must be checked on the broken {handed_out.__name__} "
                                  "that labcore.course.exercises hands out, defined verbatim in the same cell")
            elif not (function and re.search(rf"^def {function}\(", source, re.MULTILINE) and "raise NotImplementedError" in source):
                errors.append(f"code cell {index}: {name!r} must be checked on a stub defined in the same cell "
                              "that raises NotImplementedError (the learner's answer), not on a solution")
            if exercises.get(name).solution is None:
                errors.append(f"{name!r} has no worked solution for solution() to show")
    asked = {match.group(1) for source in code_cells(nb) for match in SOLUTION_CALL.finditer(source)}
    markdown = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")
    if checked and not asked and "solution(" not in markdown:
        errors.append("the notebook never tells the reader how to see a solution (labcore.course.exercises.solution)")
    return {"checked": checked, "errors": errors}


def notebook_aliases(nb: nbformat.NotebookNode) -> dict[str, str]:
    """{name used in the notebook: the dotted path it was imported as}, from the import statements
    of every code cell (``from labcore.agents.dqn import core as dqn`` gives dqn -> labcore.agents.dqn.core)."""
    import ast

    aliases = {}
    for source in code_cells(nb):
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("!", "%"))]
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def shown_sources(nb: nbformat.NotebookNode) -> set[str]:
    """The qualified names (``module.function``) of what the notebook's ``show_source(...)`` calls
    show, resolved through the notebook's own imports."""
    import importlib

    aliases, shown = notebook_aliases(nb), set()
    for source in code_cells(nb):
        for match in SHOW_CALL.finditer(source):
            head, _, rest = match.group(1).partition(".")
            dotted = aliases.get(head, head) + (f".{rest}" if rest else "")
            parts = dotted.split(".")
            for split in range(len(parts) - 1, 0, -1):  # the longest importable prefix is the module
                try:
                    obj = importlib.import_module(".".join(parts[:split]))
                except ImportError:
                    continue
                for attribute in parts[split:]:
                    obj = getattr(obj, attribute)
                shown.add(f"{obj.__module__}.{obj.__qualname__}")
                break
    return shown


# Each training notebook shows its algorithm's core from labcore's source (what must be among the
# show_source calls) and sets a core exercise on it. Notebook 05 runs notebook 04's update, written
# there, across processes: its exercises are the bookkeeping around it, none of them core.
TRAINING_CORES = {
    "01": {"labcore.agents.dqn.core.make_loss", "labcore.agents.dqn.core.make_update"},
    "03": {"labcore.agents.dqn.scan.make_parts"},
    "04": {"labcore.agents.dqn.data_parallel.make_shard_map_update"},
    "06": {"labcore.agents.iqn.core.train_step"},
    "07": {"labcore.agents.ppo.core.make_ppo"},
    "09": {"labcore.agents.gflownet.core.trajectory_balance"},
    "12": {"labcore.agents.pqn.core.make_pqn", "labcore.losses.q_lambda_targets"},
}


def test_show_source_resolution_follows_the_notebooks_imports():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from labcore.agents.dqn import core as dqn\nimport labcore.agents.ppo.core\n"
                                  "from labcore.course.source import show_source"),
        nbformat.v4.new_code_cell('show_source(dqn.make_update)\nshow_source(labcore.agents.ppo.core.make_ppo, piece="loss_fn")'),
    ])
    assert shown_sources(nb) == {"labcore.agents.dqn.core.make_update", "labcore.agents.ppo.core.make_ppo"}


def test_exercise_rule_catches_visible_solutions(monkeypatch):
    import dataclasses

    from labcore.course.exercises import checking

    name = "rule_example"
    base = exercises.get(exercises.names()[0])  # reading it first adds the lessons' exercises, so the copy holds them
    monkeypatch.setattr(checking, "_REGISTRY", {**checking._REGISTRY, name: dataclasses.replace(base, name=name, solution=abs)})
    stub = f'def answer(x):\n    raise NotImplementedError\n\n\ncheck("{name}", answer)'
    hidden = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(stub),
                                             nbformat.v4.new_markdown_cell(f'Stuck? `solution("{name}")`')])
    assert exercise_problems(hidden)["errors"] == []
    printed = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(stub),
        nbformat.v4.new_code_cell(f'def answer_solution(x):\n    return x\n\n\nassert check("{name}", answer_solution)'),
    ])
    assert any("second time" in error for error in exercise_problems(printed)["errors"])
    solved_in_place = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(f'def answer(x):\n    return x\n\n\ncheck("{name}", answer)'),
        nbformat.v4.new_markdown_cell(f'`solution("{name}")`'),
    ])
    assert any("stub" in error for error in exercise_problems(solved_in_place)["errors"])


@pytest.mark.parametrize("number", sorted(TRAINING_CORES))
def test_training_notebook_shows_its_core_and_sets_it_as_an_exercise(number):
    (path,) = [p for p in NOTEBOOKS if p.name.startswith(f"{number}_")]
    nb = nbformat.read(path, as_version=4)
    missing = TRAINING_CORES[number] - shown_sources(nb)
    assert not missing, f"{path.name} does not show_source {sorted(missing)}"
    checked = exercise_problems(nb)["checked"]
    core = [name for name in checked if exercises.get(name).core]
    assert core, f"{path.name} sets no core exercise (Exercise.core) among {checked}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
class TestNotebookConventions:
    def test_valid_and_committed_without_outputs(self, path):
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        raw = json.loads(path.read_text())
        ids = [cell.get("id") for cell in raw["cells"]]
        assert None not in ids and len(set(ids)) == len(ids), f"{path.name}: every cell needs its own id (nbformat 4.5)"
        assert stored_output_problems(nb) == [], (
            f"{path.name} was committed with outputs; clear them with "
            f"`jupyter nbconvert --clear-output --inplace {path.relative_to(REPO_ROOT)}`"
        )

    def test_opens_with_a_title_and_what_it_teaches(self, path):
        first = nbformat.read(path, as_version=4).cells[0]
        number = path.name[:2]
        assert first.cell_type == "markdown"
        assert first.source.startswith(f"# {number} "), f"{path.name}: title must start with '# {number} '"
        assert "What this notebook teaches" in first.source

    def test_first_code_cell_is_the_colab_setup_cell(self, path):
        first_code = code_cells(nbformat.read(path, as_version=4))[0]
        assert first_code.strip() == SETUP_CELL, f"{path.name}: first code cell must be colab/setup_cell.py verbatim"

    def test_sizes_training_with_budget_and_checks_with_assert(self, path):
        sources = "\n".join(code_cells(nbformat.read(path, as_version=4)))
        assert "labcore.budget(" in sources
        assert re.search(r"^\s*assert ", sources, re.MULTILINE)
        assert "TODO" not in path.read_text()

    def test_reads_no_file_outside_the_installed_package(self, path):
        problems = {index: found for index, cell in enumerate(nbformat.read(path, as_version=4).cells)
                    if cell.cell_type == "code" and (found := repository_reads(cell.source))}
        assert problems == {}, (
            f"{path.name} reads files an installed labcore does not have (cell: problems): {problems}; "
            "move what the cell needs into labcore, or its check into tests/"
        )

    def test_prose_between_code(self, path):
        # Explain before running: never more than three code cells in a row without markdown.
        run = 0
        for cell in nbformat.read(path, as_version=4).cells:
            run = run + 1 if cell.cell_type == "code" else 0
            assert run <= 3, f"{path.name}: more than three code cells in a row without prose"

    def test_exercises_are_checked_and_their_solutions_stay_hidden(self, path):
        problems = exercise_problems(nbformat.read(path, as_version=4))
        assert len(problems["checked"]) >= 3, f"{path.name}: needs at least three exercises, found {problems['checked']}"
        assert problems["errors"] == [], f"{path.name}: {problems['errors']}"

    def test_linked_from_readme_and_colab_page(self, path):
        for page in ("README.md", "colab/README.md"):
            text = (REPO_ROOT / page).read_text()
            assert f"notebooks/{path.name}" in text, f"{page} does not link {path.name}"
