"""Lesson 12, "PQN: DQN without the replay buffer or the target network" (``notebooks/12_pqn.ipynb``): its
exercises (``exercises``) and its quiz (``quiz``), and the helpers of its checkers (``pqn_update_checks``)."""

# The checking framework first: importing it registers every lesson's exercises, this one's included, so a
# lesson module imported before anything else of the course finds the framework whole.
import labcore.course.exercises  # noqa: F401
