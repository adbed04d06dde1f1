"""Lesson 10, "Debugging JAX RL: the errors, the silent bugs, and seven bugs to find"
(``notebooks/10_debugging.ipynb``): its exercises (``exercises``) and its quiz (``quiz``), and the helpers of
its checkers (``debugging_drills``)."""
