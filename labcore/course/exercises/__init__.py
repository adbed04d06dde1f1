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

This package is the checking framework: ``checking`` holds the exercise record, the catalogue and the
comparison, ``quizzing`` the quizzes, ``behaviour`` what checkers share to judge a function by what it
does. Each lesson's exercises live in its folder, ``labcore.course.lessons.nbNN_<topic>.exercises``,
found and registered in lesson order the first time the catalogue is read (``check``, ``names``,
``progress``, ...), so ``names()`` lists the exercises in the order a reader meets them.

``hint(name)`` and ``solution(name)`` show a hint and a worked answer on request (neither is
printed unasked: a failing check names the classic mistake it sees, if any, and says how to ask); ``progress()`` says which exercises this kernel has passed, failed or not tried, notebook by
notebook. ``quiz(lesson)`` shows the questions that end a lesson and ``quiz(lesson, answers)`` checks
them, every answer explained (``labcore.course.exercises.quizzing``). ``python -m labcore exercises`` lists
every exercise.
"""

from __future__ import annotations

from labcore.course.exercises.checking import (
    Exercise, InputMaker, check, first_mismatch, get, hint, names, progress, register, solution,
)
from labcore.course.exercises.quizzing import quiz

__all__ = ["Exercise", "InputMaker", "check", "first_mismatch", "get", "hint", "names", "progress", "quiz",
           "register", "solution"]
