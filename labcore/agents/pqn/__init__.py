"""pqn: Parallel Q-Networks (Gallici et al., ICLR 2025), DQN without a replay buffer or a target network.

* ``config``: ``PQNConfig`` (with the paper's MinAtar settings and purejaxql's Atari settings),
  validated (imports no JAX: the command line's flags);
* ``core``: the LayerNorm Q-network's training as one jitted ``train(key)`` over vectorised envs,
  gymnax's or ALE's own vector env (``labcore.envs.batched``): epsilon-greedy rollouts, Q(lambda)
  targets, minibatch epochs; vmappable over seeds on gymnax envs;
* ``algorithm``: its record for ``labcore.agents.registry`` (imports no JAX);
* ``run``: the driver: results folder, progress bar, checkpoints, exact resume, evaluation.

The package itself exports the agent contract of ``labcore.agents``: ``Config``,
``make_train``, ``make_program``, ``train``, ``load_checkpoint``, ``params``, ``evaluate``.
"""

from labcore.agents import agent_exports
from labcore.agents.pqn.algorithm import ALGORITHM as _RECORD

__all__, __getattr__, __dir__ = agent_exports(__name__, _RECORD)
