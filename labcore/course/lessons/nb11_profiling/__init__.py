"""Lesson 11, "Profiling JAX RL: where the time goes, and the metrics in TensorBoard"
(``notebooks/11_profiling.ipynb``): its exercises (``exercises``) and its quiz (``quiz``)."""
