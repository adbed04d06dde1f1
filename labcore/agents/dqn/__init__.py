"""dqn: DQN (Mnih et al. 2015) and the ways labcore runs it.

* ``config``: ``DQNConfig`` (with the Nature Atari settings), validated, and the drivers' own settings
  (imports no JAX: the command line's flags);
* ``core``: epsilon-greedy acting, the loss and the jitted update;
* ``agent``: DQN built once: ``make_dqn`` returns its pure functions (init, act, collect, learn,
  evaluate) and its replay buffer, which every driver below runs;
* ``algorithm``: the four drivers' records for ``labcore.agents.registry`` (imports no JAX);
* ``host_loop``: gymnasium envs stepped in Python (CartPole, Atari), greedy evaluation,
  checkpoints and exact resume; its pieces in ``host_parts``, its state and checkpoints in ``host_checkpoints``;
* ``frame_replay``: the Atari replay buffer that stores each frame once;
* ``scan``: the whole of training in one ``lax.scan`` over gymnax envs, vmappable over seeds;
* ``data_parallel``: one update over a device mesh, three ways (pmap, shard_map, jit with shardings);
* ``multi_process``: data-parallel DQN over every device of every process of a cluster;
* ``actor_learner``: Ray actors feeding one learner that owns the replay (staleness, node ids, restarts, resume);
  the actors as its learner sees them in ``actor_pool``, its checkpoints in ``learner_checkpoints``.

The package itself exports the agent contract of ``labcore.agents`` (``train`` is the jitted DQN's, ``scan.train``): ``Config``,
``make_train``, ``make_program``, ``train``, ``load_checkpoint``, ``params``, ``evaluate``.
"""

from labcore.agents import agent_exports
from labcore.agents.dqn.algorithm import SCAN as _RECORD

__all__, __getattr__, __dir__ = agent_exports(__name__, _RECORD)  # the jitted DQN's record
