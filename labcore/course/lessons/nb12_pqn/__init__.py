"""Lesson 12, "PQN: DQN without the replay buffer or the target network" (``notebooks/12_pqn.ipynb``): its
exercises (``exercises``) and its quiz (``quiz``), and the helpers of its checkers (``pqn_update_checks``)."""
