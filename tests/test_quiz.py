"""The quizzes that end each lesson: every lesson has one, every answer is explained, checking works.

``labcore.course.exercises.quizzing`` shows a lesson's questions and checks a learner's answers; the
questions live in each lesson's folder, ``labcore.course.lessons.nbNN_<topic>.quiz``. A right answer must pass, each wrong one must fail with
its own explanation (and not give the right answer away), and every notebook must end by showing
its quiz and checking the learner's answers.
"""

import re

import nbformat
import pytest

from conftest import NOTEBOOKS_DIR
from labcore.course.exercises import quizzing as quiz_module
from labcore.course.exercises import quiz
from labcore.course.exercises.quizzing import Choice, Question, Quiz

NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
LESSONS = [path.name[:2] for path in NOTEBOOKS]


def test_every_lesson_has_a_quiz_of_three_to_five_questions():
    every = quiz_module.quizzes()
    assert list(every) == LESSONS
    for lesson, the_quiz in every.items():
        assert 3 <= len(the_quiz.questions) <= 5, lesson
        # Every module is named after its notebook.
        assert any(path.name.startswith(f"{lesson}_") for path in NOTEBOOKS)


def test_the_right_answers_are_not_all_in_one_place():
    answers = [question.answer for the_quiz in quiz_module.quizzes().values() for question in the_quiz.questions]
    most_common = max(answers.count(letter) for letter in set(answers))
    assert len(set(answers)) >= 3 and most_common <= 0.5 * len(answers), answers


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_right_answers_pass_and_print_why(lesson, capsys):
    the_quiz = quiz_module.get_quiz(lesson)
    right = {number: question.answer for number, question in enumerate(the_quiz.questions, start=1)}
    assert quiz(lesson, right) is True
    out = capsys.readouterr().out
    for question in the_quiz.questions:
        why = question.choices[question.letters.index(question.answer)].why
        assert " ".join(why.split())[:60] in " ".join(out.split())
    assert f"{len(the_quiz.questions)} of {len(the_quiz.questions)} right" in out


@pytest.mark.parametrize("lesson", LESSONS)
def test_each_wrong_answer_fails_with_its_own_explanation_and_keeps_the_right_one_hidden(lesson, capsys):
    the_quiz = quiz_module.get_quiz(lesson)
    for number, question in enumerate(the_quiz.questions, start=1):
        for letter, choice in zip(question.letters, question.choices):
            if letter == question.answer:
                continue
            assert quiz(lesson, {number: letter}) is False
            out = " ".join(capsys.readouterr().out.split())
            assert f"{number}. ({letter}) not quite." in out
            assert " ".join(choice.why.split())[:60] in out
            right_why = question.choices[question.letters.index(question.answer)].why
            assert " ".join(right_why.split())[:60] not in out


def test_unanswered_questions_and_letters_that_are_not_choices_are_reported(capsys):
    assert quiz("00", {1: None, 2: "z"}) is False
    out = capsys.readouterr().out
    assert "1. not answered yet." in out and "2. 'z' is not a choice" in out and "3. not answered yet." in out
    assert quiz("00", "b") is False  # a string answers the questions in order
    assert "1. (b)" in capsys.readouterr().out
    with pytest.raises(ValueError, match="questions 1 to"):
        quiz("00", {9: "a"})
    with pytest.raises(ValueError, match="no quiz for lesson"):
        quiz("99")


def test_showing_a_quiz_lists_every_question_and_choice_but_no_explanation(capsys):
    assert quiz("00") is False
    out = capsys.readouterr().out
    the_quiz = quiz_module.get_quiz("00")
    for number, question in enumerate(the_quiz.questions, start=1):
        assert f"{number}. " in out
        for choice in question.choices:
            assert " ".join(choice.why.split())[:40] not in " ".join(out.split())
    quiz("00", reveal=True)
    revealed = " ".join(capsys.readouterr().out.split())
    assert all(" ".join(c.why.split())[:40] in revealed for q in the_quiz.questions for c in q.choices)


def test_malformed_quizzes_are_refused():
    choices = (Choice("a", "because"), Choice("b", "because"), Choice("c", "because"))
    with pytest.raises(ValueError, match="at least three choices"):
        Question("q", choices[:2], "a")
    with pytest.raises(ValueError, match="is not one of"):
        Question("q", choices, "d")
    with pytest.raises(ValueError, match="explanation"):
        Question("q", (*choices[:2], Choice("c", " ")), "a")
    with pytest.raises(ValueError, match="3 to 5 are asked for"):
        Quiz("00", "t", (Question("q", choices, "a"),) * 2)


QUIZ_CALL = re.compile(r"""quiz\(\s*["'](\d\d)["']\s*(,\s*\{(.*)\})?\s*\)""", re.DOTALL)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_each_notebook_ends_by_showing_its_quiz_then_checking_the_learners_answers(path):
    cells = [cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]
    lesson = path.name[:2]
    shown, answered = (QUIZ_CALL.search(cell.source) for cell in cells[-2:])
    assert shown and shown.group(1) == lesson and shown.group(2) is None, cells[-2].source
    assert answered and answered.group(1) == lesson and answered.group(2), cells[-1].source
    # Committed unanswered: one None per question, for the learner to replace.
    questions = len(quiz_module.get_quiz(lesson).questions)
    assert re.findall(r"(\d+)\s*:\s*None", answered.group(3)) == [str(n) for n in range(1, questions + 1)]
