"""Lesson 03, "jit, scan and vmap: the DQN of notebook 01 as one compiled program, over many envs and seeds"
(``notebooks/03_jit_scan_vmap.ipynb``): its exercises (``exercises``) and its quiz (``quiz``)."""

# The checking framework first: importing it registers every lesson's exercises, this one's included, so a
# lesson module imported before anything else of the course finds the framework whole.
import labcore.course.exercises  # noqa: F401
