"""gflownet: GFlowNets on HyperGrid.

* ``config``: ``GFlowNetConfig``, every setting, validated (imports no JAX: the command line's flags);
* ``core``: the TB / DB / FL / SubTB / FM losses, the JAX policy, the ``lax.scan`` sampler and all
  of the all-JAX training as one ``make_train``;
* ``trainers``: the four trainers behind ``GFlowNetConfig.trainer`` (torch, hybrid, jax_policy,
  jax), each timing its phases (notebook 09's migration, one step at a time);
* ``algorithm``: its record for ``labcore.agents.registry`` (imports no JAX);
* ``run``: the driver, ``train``: a results folder for any trainer; the all-JAX one on
  ``labcore.loop`` (checkpoints, exact resume, seeds in one vmap).

The package itself exports the agent contract of ``labcore.agents``: ``Config``,
``make_train``, ``make_program``, ``train``, ``load_checkpoint``, ``params``, ``evaluate``.
"""

from labcore.agents import agent_exports
from labcore.agents.gflownet.algorithm import ALGORITHM as _RECORD

__all__, __getattr__, __dir__ = agent_exports(__name__, _RECORD)
