"""Lesson 06, "A multi-agent IQN, ported from PyTorch to JAX and checked number for number"
(``notebooks/06_iqn_port.ipynb``): its exercises (``exercises``) and its quiz (``quiz``), and the helpers of its
checkers (``iqn_train_step_checks``)."""
