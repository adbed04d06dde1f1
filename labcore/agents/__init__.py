"""RL agents, one package per algorithm.

Each package holds ``core`` (the validated config and the pure functions: acting, losses, the
jitted update or whole jitted training run) beside the drivers that run it:

* ``dqn``: ``core``, ``host_loop`` (gymnasium envs stepped in Python), ``scan`` (the whole run in
  one ``lax.scan`` over gymnax envs), ``frame_replay`` (Atari frames stored once),
  ``data_parallel`` (one update over a device mesh), ``multi_process`` (every device of every
  process), ``actor_learner`` (Ray actors feeding one learner, on one machine or a Ray cluster);
* ``ppo``: ``core`` (masked PPO as one jitted ``train(key)``) and ``run`` (results folder,
  checkpoints, resume);
* ``iqn``: ``core`` and ``frame_buffer`` (the IQN port of the original iRainbow agent) and the
  multi-agent Treasurehunt experiment in four run modes (``run_config``, ``programs``,
  ``runners``, ``run``, ``timing``, ``torch_reference``);
* ``gflownet``: ``core`` (HyperGrid losses, policy and sampler) and ``trainers`` (four trainers
  and the driver).
"""
