"""Lesson 01, "A Haiku DQN, from CartPole to Atari Breakout" (``notebooks/01_haiku_dqn.ipynb``): its exercises
(``exercises``) and its quiz (``quiz``)."""
