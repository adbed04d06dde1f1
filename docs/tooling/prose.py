"""Sentences a reader of the course cannot use: words about how the course is made.

A learner needs to know which machine a figure came from and what a budget does, not which process
of the project ran what, nor targets the text never stated. The lessons (every cell), every docs
page except the development guide, the changelog and the history of the measurements, and labcore's own source (its docstrings are
the API reference) are read for the phrases below; ``python docs/tooling/prose.py`` prints each one
found and exits 1 if there is any.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The pages that are about how the project is made, where such words belong.
ABOUT_THE_PROJECT = {"docs/guide/development.md", "docs/changelog.md", "docs/results/history.md"}  # history: the test-suite runs

# (pattern, what to write instead). "CI" is matched in capitals only (CIFAR, "CIs" pass); the rest in any case.
HOW_MADE = [
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


def how_made(text: str) -> list[tuple[str, str]]:
    """Every (phrase with its context, why) in ``text``."""
    found = []
    for pattern, why in HOW_MADE:
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
        relative = str(path.relative_to(root))
        if "_build" in path.parts or "generated" in path.parts or relative in ABOUT_THE_PROJECT:
            continue
        texts[relative] = path.read_text()
    for path in sorted((root / "labcore").rglob("*.py")):
        texts[str(path.relative_to(root))] = path.read_text()
    return texts


def problems(root: pathlib.Path = ROOT) -> list[str]:
    return [f"{name}: {why}: ...{context}..." for name, text in sources(root).items() for context, why in how_made(text)]


if __name__ == "__main__":
    found = problems()
    print("\n".join(found) or "no words about how the course is made")
    sys.exit(1 if found else 0)
