"""Sentences a reader of the course cannot use: words about how the course is made.

A learner needs to know which machine a figure came from and what a budget does, not which process
of the project ran what, nor targets the text never stated. Two kinds of phrase are looked for:

* ``HOW_MADE``, phrases about the course's own making instead of what the reader meets (the patterns
  below): where the reader needs a named reference to compare with or the budget, the version
  measured, and what the code is and does. Nowhere a reader looks: every lesson cell, every docs page (the development guide, the changelog and the
  history of the measurements included: a commit there identifies what was measured, and may be
  named), labcore's source (its docstrings are the API reference, its help the command line's),
  the benchmarks and their README;
* ``ABOUT_TESTS``, the project's own test machinery (CI, "the tests of this course"), which the
  pages about the project (``ABOUT_THE_PROJECT``) may name.

``python docs/tooling/prose.py`` prints each one found and exits 1 if there is any.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The pages that are about how the project is made, where such words belong.
ABOUT_THE_PROJECT = {"docs/guide/development.md", "docs/changelog.md", "docs/results/history.md",  # history: the test-suite runs
                     "README.md", "CHANGELOG.md"}

# (pattern, what to write instead). "CI" is matched in capitals only (CIFAR, "CIs" pass); the rest in any case.
ABOUT_TESTS = [
    (re.compile(r"\bCI\b"), "names continuous integration: say what the budget or the run is instead"),
    (re.compile(r"\bcontinuous integration\b", re.IGNORECASE),
     "names continuous integration: say what the budget or the run is instead"),
    (re.compile(r"runs? (?:this course's|the course's|our) tests", re.IGNORECASE),
     "names the project's test machine: name the machine itself"),
    (re.compile(r"\b(?:people|those|engineers|the team) who (?:built|wrote|made)\b", re.IGNORECASE),
     "speaks of who made the course: say what was measured, on which machine"),
    (re.compile(r"\bour (?:[\w-]+ ){0,3}goals?\b|\bthe goals\b|\(goal:|\bset as the goal\b", re.IGNORECASE),
     "a goal the reader was never told: compare with a named reference"),
]

_ANY_CASE = re.IGNORECASE
HOW_MADE = [
    (re.compile(r"\bdid not fit in the\b|\bshort of the \d|\bstill short of\b", _ANY_CASE),
     "compare with a named reference, or give the budget"),
    (re.compile(r"\bat commit [0-9a-f]{7,},? the last\b|\bthe last (?:commit )?that has (?:it|them)\b", _ANY_CASE),
     "a commit as part of a story: say what the code does, or name the version measured"),
    (re.compile(r"\b(?:first|then) (?:in )?Linen,? then (?:in )?NNX\b|\bwas first written in Linen\b", _ANY_CASE),
     "the order the code was written in: say what it is"),
    (re.compile(r"^#+ .*\b\d+(?:\.\d+)?x and \d+(?:\.\d+)?x\s*$", re.MULTILINE),
     "targets never stated to the reader, as a heading: compare with a named reference"),
]


def how_made(text: str, about_the_project: bool = False) -> list[tuple[str, str]]:
    """Every (phrase with its context, why) in ``text``; ``about_the_project``: a page about the
    project, where the test machinery may be named."""
    found = []
    for pattern, why in HOW_MADE + ([] if about_the_project else ABOUT_TESTS):
        for match in pattern.finditer(text):
            start, end = max(0, match.start() - 40), min(len(text), match.end() + 40)
            found.append((" ".join(text[start:end].split()), why))
    return found


def sources(root: pathlib.Path = ROOT) -> dict[str, str]:
    """Relative path -> text of everything a reader of the course reads."""
    texts = {}
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        texts[str(path.relative_to(root))] = "\n".join("".join(cell["source"]) for cell in cells)
    for path in sorted((root / "docs").rglob("*.md")):
        if "_build" in path.parts or "generated" in path.parts or "lessons" in path.parts:
            continue
        texts[str(path.relative_to(root))] = path.read_text()
    for folder in ("labcore", "benchmarks"):
        for path in sorted((root / folder).rglob("*.py")):
            texts[str(path.relative_to(root))] = path.read_text()
    for name in ("README.md", "CHANGELOG.md", "benchmarks/README.md", "colab/README.md"):
        if (root / name).exists():
            texts[name] = (root / name).read_text()
    return texts


def problems(root: pathlib.Path = ROOT) -> list[str]:
    return [f"{name}: {why}: ...{context}..." for name, text in sources(root).items()
            for context, why in how_made(text, about_the_project=name in ABOUT_THE_PROJECT)]


if __name__ == "__main__":
    found = problems()
    print("\n".join(found) or "no words about how the course is made")
    sys.exit(1 if found else 0)
