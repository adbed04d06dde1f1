"""Checkers for the notebooks' exercises.

A notebook cell asks the reader to write a function, then calls::

    labcore.course.exercises.check("stable_softmax", stable_softmax)

which runs the reader's function and labcore's reference on several fresh
random inputs and prints a pass, or the first mismatch (which input, which
output element, the two values). It returns True or False and never raises
for a wrong or unfinished answer, so a notebook with an unsolved exercise
still runs to the end (under nbval too). Exercises marked ``jit=True`` must
also work under ``jax.jit``: a solution that only works eagerly fails.
Input makers draw shapes as well as values, so that a solution hard-wired to
one shape fails.

``checking`` holds the exercise record, the catalogue and the comparison; each
``nbNN_*`` module holds the exercises of notebook NN, and is registered here in
notebook order, so ``names()`` lists the exercises in the order a reader meets them.

``hint(name)`` and ``solution(name)`` show a hint and a worked answer on request (neither is
printed unasked: a failing check names the classic mistake it sees, if any, and says how to ask); ``progress()`` says which exercises this kernel has passed, failed or not tried, notebook by
notebook. ``quiz(lesson)`` shows the questions that end a lesson and ``quiz(lesson, answers)`` checks
them, every answer explained (``labcore.course.exercises.quizzing``). ``python -m labcore exercises`` lists
every exercise.
"""

from __future__ import annotations

import importlib

from labcore.course.exercises.checking import (
    Exercise, InputMaker, check, first_mismatch, get, hint, names, progress, register, solution,
)
from labcore.course.exercises.nb04_many_devices import PMEAN_AXIS
from labcore.course.exercises.quizzing import quiz

__all__ = ["PMEAN_AXIS", "Exercise", "InputMaker", "check", "first_mismatch", "get", "hint", "names", "progress", "quiz",
           "register", "solution"]

# Notebook order: names() lists the exercises in the order a reader meets them.
NOTEBOOK_MODULES = tuple(
    importlib.import_module(f"labcore.course.exercises.{name}")
    for name in (
        "nb00_jax_primitives", "nb01_haiku_dqn", "nb02_flax_nnx", "nb03_jit_scan_vmap", "nb04_many_devices",
        "nb05_many_processes", "nb06_iqn_port", "nb07_masked_ppo", "nb08_accelerators", "nb09_gflownet",
        "nb10_debugging", "nb11_profiling", "nb12_pqn",
    )
)

for _module in NOTEBOOK_MODULES:
    for _exercise in _module.catalogue():
        register(_exercise, notebook=_module.__name__.rpartition(".")[2])
del _module, _exercise
