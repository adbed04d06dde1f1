"""Lesson 07, "Action-masked PPO in the PureJaxRL style, on a game of our own" (``notebooks/07_masked_ppo.ipynb``):
its exercises (``exercises``) and its quiz (``quiz``), and the helpers of its checkers (``ppo_epoch_checks``,
``ppo_loss_checks``)."""
