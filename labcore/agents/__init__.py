"""RL agents, one package per algorithm.

Each package holds ``config`` (the validated config dataclass, importable without JAX so that the
command line's help is instant; ``core`` re-exports it) and ``core`` (the pure functions: acting,
losses, the jitted update or whole jitted training run) beside the drivers that run it:

* ``dqn``: ``core``, ``agent`` (DQN's functions, built once for every driver), ``host_loop``
  (gymnasium envs stepped in Python), ``scan`` (the whole run in
  one ``lax.scan`` over gymnax envs), ``frame_replay`` (Atari frames stored once),
  ``data_parallel`` (one update over a device mesh), ``multi_process`` (every device of every
  process), ``actor_learner`` (Ray actors feeding one learner, on one machine or a Ray cluster);
* ``ppo``: ``core`` (masked PPO as one jitted ``train(key)``) and ``run`` (results folder,
  checkpoints, resume);
* ``iqn``: ``core`` and ``frame_buffer`` (the IQN port of the original iRainbow agent) and the
  multi-agent Treasurehunt experiment in four run modes (``run_config``, ``programs``,
  ``runners``, ``run``: the driver, the fused mode on ``labcore.loop``; ``timing``, ``torch_reference``);
* ``gflownet``: ``core`` (HyperGrid losses, policy and sampler), ``trainers`` (four trainers)
  and ``run`` (the driver; the all-JAX trainer on ``labcore.loop``).

**One contract.** ``labcore.agents.ppo``, ``pqn``, ``dqn``, ``gflownet`` and ``iqn`` export the same names, so that
``from labcore.agents import ppo; ppo.train(ppo.Config(...))`` reads the same for each:

* ``Config``: the validated config dataclass (``PPOConfig``, ``PQNConfig``, ``DQNConfig``, ``GFlowNetConfig``,
  ``IQNRunConfig``);
* ``make_train(config, *, callback=None, log_every=1) -> train(key) -> (state, metrics)``: all of training
  as one pure function, to jit and vmap; ``state`` is the one ``load_checkpoint`` returns (``params`` reads
  it), each metric [updates, ...]; ``callback`` gets every ``log_every``-th update's metrics on the host while
  it runs (``ppo``, ``pqn`` and ``dqn`` also take ``env=`` and ``env_params=``, a gymnax env; PPO's with an
  action mask, as ``labcore.envs.make_masked_env`` gives);
* ``make_program(config)``: the same training as a ``labcore.loop.Program``;
* ``train(config, run_dir=None, **options) -> labcore.training_run.RunResult``: ``labcore.loop.train``
  with the program bound (run folder, checkpoints, exact resume, seeds in one vmap);
* ``load_checkpoint(path, step=None) -> (config, state)``;
* ``params(state)``: the policy's parameters in a state of ``train`` or ``load_checkpoint``;
* ``evaluate(config, params, seed=0) -> dict``: the trained policy's episodes, summarised.

(``dqn.train`` is the jitted DQN, ``dqn-scan`` in the registry; its host loop over gymnasium,
data-parallel and actor-learner drivers stay in their modules. ``gflownet.train`` runs any of its
four trainers, the all-JAX one on the loop; ``evaluate`` there is the L1 of fresh samples, not
episodes. ``iqn.train`` runs any of its four modes, the fused one on the loop; ``evaluate`` there
plays epochs of the treasurehunt.) The names load on first use, so importing a package stays cheap.

**One registry.** ``labcore.agents.registry`` has one record per algorithm *and driver* (``ppo``,
``pqn``, ``dqn-scan``, ``dqn-host``, ``dqn-data-parallel``, ``dqn-actor-learner``, ``gflownet``,
``iqn``), each with the same ``train``, ``load_checkpoint``, ``params`` and ``evaluate``: what the
command line's ``train NAME`` and ``eval NAME`` run. Each record is written in its folder's ``algorithm``
module (``labcore.agents.contract`` says what a record and its driver hold); a new algorithm is its folder and one
line in the registry.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from labcore.agents.contract import Algorithm

CONTRACT = ("Config", "make_train", "make_program", "train", "load_checkpoint", "params", "evaluate")


def agent_exports(package: str, algorithm: Algorithm) -> tuple[list[str], Callable[[str], object], Callable[[], list[str]]]:
    """An algorithm package's ``__all__``, ``__getattr__`` and ``__dir__`` for the contract above, from its
    folder's record (``labcore.agents.contract.Algorithm``): ``Config`` is the record's config class, the
    rest its driver's (``algorithm.driver()``, which exports ``make_train`` beside ``train``). The driver is
    imported on first use of a name, so that importing the package stays as cheap as importing its record."""

    def __getattr__(name: str) -> object:
        if name not in CONTRACT:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return algorithm.config_class if name == "Config" else getattr(algorithm.driver(), name)

    def __dir__() -> list[str]:
        return sorted({*CONTRACT, *vars(sys.modules[package])})

    return list(CONTRACT), __getattr__, __dir__
