"""Each lesson's own material, one folder per notebook: ``nbNN_<topic>/`` for ``notebooks/NN_<topic>.ipynb``.

A lesson's folder holds

* ``exercises.py``: ``catalogue()``, the lesson's exercises in the order the notebook checks them
  (``labcore.course.exercises`` registers them: ``check``, ``hint``, ``solution``, ``progress``);
* ``quiz.py``: ``QUIZ``, the questions that end the lesson (``labcore.course.exercises.quiz``);
* the checkers' helpers that only this lesson uses (e.g. ``nb07_masked_ppo/ppo_loss_checks.py``).

The folders are found here, in lesson order (their two digits), so adding a lesson's material is
its folder; nothing in the framework lists the lessons.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType

FOLDER = re.compile(r"nb\d\d_[a-z0-9_]+")  # nbNN_<topic>, named after notebooks/NN_<topic>.ipynb


def names() -> list[str]:
    """Every lesson folder's name, in lesson order ("nb00_jax_primitives", ...)."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__) if info.ispkg and FOLDER.fullmatch(info.name))


def part(lesson: str, module: str) -> ModuleType | None:
    """Lesson ``lesson``'s module ``module`` ("exercises", "quiz"), or None where its folder has none."""
    try:
        return importlib.import_module(f"{__name__}.{lesson}.{module}")
    except ModuleNotFoundError as error:
        if error.name != f"{__name__}.{lesson}.{module}":  # a module it imports is missing: say so
            raise
        return None
