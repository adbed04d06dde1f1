"""The questions that end each lesson: module ``nbNN_<topic>`` holds lesson NN's ``QUIZ``.

``labcore.course.exercises.quizzing`` shows and checks them; each choice carries the explanation printed
when a learner picks it.
"""
