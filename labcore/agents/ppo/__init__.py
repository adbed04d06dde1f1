"""ppo: action-masked PPO.

* ``core``: ``PPOConfig``, the masked policy, and all of training as one jitted ``train(key)``
  (PureJaxRL style), plus the trained policy's returns;
* ``run``: the driver: results folder, progress bar, checkpoints, exact resume, evaluation.
"""
