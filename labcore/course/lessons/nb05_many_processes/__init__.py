"""Lesson 05, "Many processes and machines: `jax.distributed` and Ray" (``notebooks/05_many_processes.ipynb``): its
exercises (``exercises``) and its quiz (``quiz``), and the helpers of its checkers (``ape_x_checks``)."""

# The checking framework first: importing it registers every lesson's exercises, this one's included, so a
# lesson module imported before anything else of the course finds the framework whole.
import labcore.course.exercises  # noqa: F401
