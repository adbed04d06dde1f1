"""The end-of-lesson quizzes: a few multiple-choice questions, every answer explained.

Each lesson ends with two cells::

    quiz("01")                                   # shows the questions
    quiz("01", {1: None, 2: None, 3: None})      # the learner writes "a", "b", ... and runs it

The second call says, question by question, whether the chosen answer is right and why (a wrong
answer's explanation says what it misses, without giving the right one away); ``reveal=True``
prints every answer with its explanation. The questions of lesson NN live in
``labcore.course.lessons.nbNN_<topic>.quiz`` as ``QUIZ``; this module holds the records and the checking.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Mapping, Sequence

MIN_QUESTIONS, MAX_QUESTIONS = 3, 5


@dataclasses.dataclass(frozen=True)
class Choice:
    """One answer offered: its text, and why it is right or why it is wrong."""

    text: str
    why: str


@dataclasses.dataclass(frozen=True)
class Question:
    """A question, its choices in order (shown as a, b, c, ...) and the letter of the right one."""

    prompt: str
    choices: tuple[Choice, ...]
    answer: str

    def __post_init__(self):
        if len(self.choices) < 3:
            raise ValueError(f"question {self.prompt[:40]!r}: offer at least three choices")
        if self.answer not in self.letters:
            raise ValueError(f"question {self.prompt[:40]!r}: answer {self.answer!r} is not one of {self.letters}")
        if any(not choice.why.strip() for choice in self.choices):
            raise ValueError(f"question {self.prompt[:40]!r}: every choice needs its explanation")

    @property
    def letters(self) -> tuple[str, ...]:
        return tuple("abcdefgh"[: len(self.choices)])


@dataclasses.dataclass(frozen=True)
class Quiz:
    """The quiz that ends lesson ``lesson`` (its two-digit number)."""

    lesson: str
    title: str
    questions: tuple[Question, ...]

    def __post_init__(self):
        if not MIN_QUESTIONS <= len(self.questions) <= MAX_QUESTIONS:
            raise ValueError(f"quiz {self.lesson}: {len(self.questions)} questions, where "
                             f"{MIN_QUESTIONS} to {MAX_QUESTIONS} are asked for")


def quizzes() -> dict[str, Quiz]:
    """Every lesson's quiz, by lesson number, in lesson order."""
    from labcore.course import lessons

    found = {}
    for lesson in lessons.names():
        module = lessons.part(lesson, "quiz")
        if module is not None:
            found[module.QUIZ.lesson] = module.QUIZ
    return found


def get_quiz(lesson: str | int) -> Quiz:
    """The quiz of ``lesson`` ('01' or 1); a ValueError listing the lessons with quizzes otherwise."""
    every = quizzes()
    key = f"{int(lesson):02d}" if str(lesson).isdigit() else str(lesson)
    if key not in every:
        raise ValueError(f"no quiz for lesson {lesson!r}; lessons with a quiz: {', '.join(every)}")
    return every[key]


def _fill(text: str, indent: str = "") -> str:
    return textwrap.fill(" ".join(text.split()), 100, initial_indent=indent, subsequent_indent=indent)


def _normalise(quiz: Quiz, answers: Mapping[int, str | None] | Sequence[str | None] | str) -> dict[int, str | None]:
    if isinstance(answers, Mapping):
        given = {int(number): answers[number] for number in answers}
    else:
        given = {number: answer for number, answer in enumerate(answers, start=1)}
    unknown = sorted(set(given) - set(range(1, len(quiz.questions) + 1)))
    if unknown:
        raise ValueError(f"quiz {quiz.lesson} has questions 1 to {len(quiz.questions)}; got answers for {unknown}")
    return {number: (given.get(number) or None) for number in range(1, len(quiz.questions) + 1)}


def quiz(lesson: str | int, answers=None, *, reveal: bool = False, verbose: bool = True) -> bool:
    """Show lesson ``lesson``'s questions (no ``answers``), or check ``answers``: {question number:
    letter}, a list of letters, or a string such as "bac". Prints each verdict with its explanation
    and returns whether every answer is right; an unanswered question (None) is reported as such.
    ``reveal=True`` prints every right answer and every explanation."""
    the_quiz = get_quiz(lesson)
    lines: list[str] = []
    if answers is None and not reveal:
        lines.append(f"Quiz {the_quiz.lesson}: {the_quiz.title}")
        for number, question in enumerate(the_quiz.questions, start=1):
            lines.append(_fill(f"{number}. {question.prompt}"))
            lines += [_fill(f"({letter}) {choice.text}", "     ") for letter, choice in zip(question.letters, question.choices)]
        lines.append(f'Answer with quiz("{the_quiz.lesson}", {{1: "a", 2: ..., ...}}).')
        if verbose:
            print("\n".join(lines))
        return False
    chosen = _normalise(the_quiz, answers) if answers is not None else {}
    right = 0
    for number, question in enumerate(the_quiz.questions, start=1):
        if reveal:
            lines.append(_fill(f"{number}. {question.prompt}"))
            for letter, choice in zip(question.letters, question.choices):
                mark = "right" if letter == question.answer else "wrong"
                lines.append(_fill(f"({letter}) {mark}: {choice.text} -- {choice.why}", "     "))
            continue
        letter = chosen[number]
        if letter is None:
            lines.append(f"{number}. not answered yet.")
            continue
        letter = str(letter).strip().lower().strip("()")
        if letter not in question.letters:
            lines.append(f"{number}. {letter!r} is not a choice: answer one of {', '.join(question.letters)}.")
            continue
        choice = question.choices[question.letters.index(letter)]
        if letter == question.answer:
            right += 1
            lines.append(_fill(f"{number}. ({letter}) right. {choice.why}"))
        else:
            lines.append(_fill(f"{number}. ({letter}) not quite. {choice.why} Think again, and try another answer."))
    if not reveal:
        lines.append(f"{right} of {len(the_quiz.questions)} right"
                     + ("." if right < len(the_quiz.questions) else ": well done.")
                     + ("" if right == len(the_quiz.questions) else
                        f' quiz("{the_quiz.lesson}", reveal=True) shows every answer explained.'))
    if verbose:
        print("\n".join(lines))
    return right == len(the_quiz.questions) and not reveal
