"""iqn: the port of the original iRainbow agent (IQN) and the multi-agent Treasurehunt experiment.

The agent:

* ``config``: ``IQNConfig``, the agent's settings, validated (imports no JAX);
* ``core``: the agent state, network and optimiser, acting, the loss and the train step;
* ``frame_buffer``: the frame-stacking replay buffer (pure functions on a pytree; ``replay_buffer`` puts them
  behind ``labcore.replay.Buffer``'s interface, through which the agent stores and samples).

The experiment (many agents in the Treasurehunt world, in four run modes):

* ``run_config``: ``IQNRunConfig``, the run's settings composed with the world's and the agents' (imports
  no JAX: the command line's flags);
* ``programs``: the compiled JAX programs (the key schedule, one turn, the fused epoch);
* ``runners``: the four run modes, pytorch, jax_sequential, jax_parallel and jax_fused;
* ``algorithm``: its record for ``labcore.agents.registry`` (imports no JAX);
* ``run``: ``train`` (any mode, in a results folder; the fused mode on ``labcore.loop``), the fused
  mode's ``make_program`` and ``make_train``, checkpoints, ``load_checkpoint``, ``params``, ``evaluate``;
* ``timing``: the helpers that time the modes (``benchmarks/iqn_modes.py``);
* ``torch_reference``: the PyTorch reference agent (``labcore.torch_ref.irainbow``) built from an ``IQNConfig``.

The package itself exports the agent contract of ``labcore.agents`` (``Config`` is ``IQNRunConfig``; ``train``
runs any mode): ``Config``, ``make_train``, ``make_program``, ``train``, ``load_checkpoint``, ``params``, ``evaluate``.
"""

from labcore.agents import agent_exports
from labcore.agents.iqn.algorithm import ALGORITHM as _RECORD

__all__, __getattr__, __dir__ = agent_exports(__name__, _RECORD)
