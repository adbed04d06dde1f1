"""Lesson 00, "JAX primitives" (``notebooks/00_jax_primitives.ipynb``): its exercises (``exercises``) and its quiz
(``quiz``)."""

# The checking framework first: importing it registers every lesson's exercises, this one's included, so a
# lesson module imported before anything else of the course finds the framework whole.
import labcore.course.exercises  # noqa: F401
