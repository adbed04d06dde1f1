"""Lesson 10, "Debugging JAX RL: the errors, the silent bugs, and seven bugs to find"
(``notebooks/10_debugging.ipynb``): its exercises (``exercises``) and its quiz (``quiz``), and the helpers of
its checkers (``debugging_drills``)."""

# The checking framework first: importing it registers every lesson's exercises, this one's included, so a
# lesson module imported before anything else of the course finds the framework whole.
import labcore.course.exercises  # noqa: F401
