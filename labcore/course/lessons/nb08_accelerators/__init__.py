"""Lesson 08, "GPUs, TPUs and Colab: the same JAX on every device" (``notebooks/08_accelerators.ipynb``): its
exercises (``exercises``) and its quiz (``quiz``)."""
