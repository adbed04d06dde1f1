"""The API a learner of each lesson needs one click away, for the header of each lesson page.

``LESSON_API[stem]`` lists ``(label, dotted.path, role)`` for the notebook ``notebooks/<stem>.ipynb``, as
its entry in ``lesson_index.LESSONS`` gives them (``api``):
``role`` is the Python-domain role that links it (``class``, ``func`` or ``mod``), and
``docs/tooling/lessons.py`` writes each entry as ``{py:<role>}`<label> <dotted.path>```. Each
algorithm's lesson lists its config class, its pure trainer (or update), its driver (results
folder, checkpoints, resume), its checkpoint loader where it has one, and its evaluation, then the
modules the lesson teaches with; lessons 00, 08 and 10 list the modules they teach.

A path is the object's home, the module that defines it (where the API reference documents it),
not a module that re-exports it: ``labcore.course.exercises.checking.check``, not
``labcore.course.exercises.check``. ``python docs/tooling/lesson_api.py`` (and ``check()``) imports
every path and fails on one that does not resolve, is not where the path says it is defined, or
is not of its role.
"""

from __future__ import annotations

import inspect
import pathlib
import pkgutil
import sys
from typing import Any

from lesson_index import LESSONS  # beside this file: its folder is on the path wherever it is imported

# Each lesson's entries, from the one list of lessons (lesson_index.LESSONS).
LESSON_API: dict[str, list[tuple[str, str, str]]] = {lesson.stem: list(lesson.api) for lesson in LESSONS}

ROLES = ("class", "func", "mod")


def resolve(path: str) -> Any:
    """The object a dotted path names (the longest importable module, then its attributes)."""
    return pkgutil.resolve_name(path)


def problem(path: str, role: str) -> str | None:
    """Why ``path`` cannot be linked with ``role``, or None when it can."""
    if role not in ROLES:
        return f"role {role!r} is not one of {ROLES}"
    if any(part.startswith("_") for part in path.split(".")):
        return "a private name (the API reference documents public names only)"
    try:
        obj = resolve(path)
    except (ImportError, AttributeError, ValueError) as err:
        return f"does not resolve: {err}"
    if role == "mod":
        return None if inspect.ismodule(obj) else f"is a {type(obj).__name__}, not a module"
    if role == "class" and not inspect.isclass(obj):
        return f"is a {type(obj).__name__}, not a class"
    if role == "func" and (inspect.isclass(obj) or inspect.ismodule(obj) or not callable(obj)):
        return f"is a {type(obj).__name__}, not a function"
    home = f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', None)}"
    if home != path:
        return f"is defined as {home} (link the object where the API reference documents it)"
    return None


def check() -> None:
    """Raise ValueError naming every entry of LESSON_API whose path does not resolve as its role says."""
    notebooks = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
    stems = {path.stem for path in notebooks.glob("*.ipynb")}
    errors = [f"{stem}: no notebooks/{stem}.ipynb" for stem in LESSON_API if stems and stem not in stems]
    errors += [f"{stem}: a lesson without entries" for stem in sorted(stems - set(LESSON_API))]
    for stem, entries in LESSON_API.items():
        for label, path, role in entries:
            reason = problem(path, role)
            if reason:
                errors.append(f"{stem}: {label!r} -> {path} ({role}): {reason}")
    if errors:
        raise ValueError("docs/tooling/lesson_api.py: " + "; ".join(errors))


if __name__ == "__main__":
    check()
    print(f"lesson_api: {sum(map(len, LESSON_API.values()))} links in {len(LESSON_API)} lessons resolve")
    sys.exit(0)
