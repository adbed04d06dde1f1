"""iqn: the port of the original iRainbow agent (IQN) and the multi-agent Treasurehunt experiment.

The agent:

* ``core``: ``IQNConfig``, the agent state, network and optimiser, acting, the loss and the train step;
* ``frame_buffer``: the frame-stacking replay buffer (pure functions on a pytree).

The experiment (many agents in the Treasurehunt world, in four run modes):

* ``run_config``: ``IQNRunConfig``, the run's settings composed with the world's and the agents';
* ``programs``: the compiled JAX programs (the key schedule, one turn, the fused epoch);
* ``runners``: the four run modes, pytorch, jax_sequential, jax_parallel and jax_fused;
* ``run``: ``run`` (results folder), checkpoints, ``load_checkpoint``, ``evaluate``;
* ``timing``: the helpers that time the modes (``benchmarks/iqn_modes.py``);
* ``torch_reference``: the PyTorch reference agent (``labcore.torch_ref.irainbow``) built from an ``IQNConfig``.
"""
