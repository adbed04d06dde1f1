"""Lesson 05, "Many processes and machines: `jax.distributed` and Ray" (``notebooks/05_many_processes.ipynb``): its
exercises (``exercises``) and its quiz (``quiz``), and the helpers of its checkers (``ape_x_checks``)."""
