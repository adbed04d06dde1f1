"""Lesson 11, "Profiling JAX RL: where the time goes, and the metrics in TensorBoard"
(``notebooks/11_profiling.ipynb``): its exercises (``exercises``) and its quiz (``quiz``)."""

# The checking framework first: importing it registers every lesson's exercises, this one's included, so a
# lesson module imported before anything else of the course finds the framework whole.
import labcore.course.exercises  # noqa: F401
