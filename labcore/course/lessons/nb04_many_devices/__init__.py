"""Lesson 04, "Many devices in one process: data-parallel DQN" (``notebooks/04_many_devices.ipynb``): its exercises
(``exercises``) and its quiz (``quiz``), and the helpers of its checkers (``data_parallel_dqn``, ``meshes``)."""
