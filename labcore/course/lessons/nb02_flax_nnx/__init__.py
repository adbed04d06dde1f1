"""Lesson 02, "Flax NNX for PyTorch users: modules, training, and the functional form labcore runs"
(``notebooks/02_flax_nnx.ipynb``): its exercises (``exercises``) and its quiz (``quiz``), and the helpers of its
checkers (``nnx_dqn_checks``, ``noisy_layer_checks``)."""
