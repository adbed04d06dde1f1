"""ppo: action-masked PPO.

* ``config``: ``PPOConfig``, every setting, validated (imports no JAX: the command line's flags);
* ``core``: the masked policy, and all of training as one jitted ``train(key)`` (PureJaxRL style),
  plus the trained policy's returns;
* ``algorithm``: its record for ``labcore.agents.registry`` (imports no JAX);
* ``run``: the driver: results folder, progress bar, checkpoints, exact resume, evaluation.

The package itself exports the agent contract of ``labcore.agents``: ``Config``,
``make_train``, ``make_program``, ``train``, ``load_checkpoint``, ``params``, ``evaluate``.
"""

from labcore.agents import agent_exports
from labcore.agents.ppo.algorithm import ALGORITHM as _RECORD

__all__, __getattr__, __dir__ = agent_exports(__name__, _RECORD)
