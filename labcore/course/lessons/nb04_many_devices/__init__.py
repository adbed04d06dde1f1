"""Lesson 04, "Many devices in one process: data-parallel DQN" (``notebooks/04_many_devices.ipynb``): its exercises
(``exercises``) and its quiz (``quiz``), and the helpers of its checkers (``data_parallel_dqn``, ``meshes``)."""

# The checking framework first: importing it registers every lesson's exercises, this one's included, so a
# lesson module imported before anything else of the course finds the framework whole.
import labcore.course.exercises  # noqa: F401
