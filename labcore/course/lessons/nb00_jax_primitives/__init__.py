"""Lesson 00, "JAX primitives" (``notebooks/00_jax_primitives.ipynb``): its exercises (``exercises``) and its quiz
(``quiz``)."""
