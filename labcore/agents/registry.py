"""Every algorithm labcore trains, one record each; the command line, the tests and the docs read them here.

    from labcore.agents import registry

    ppo = registry.get("ppo")
    result = ppo.train(ppo.config_class.cartpole(total_steps=20_480), "runs/ppo", checkpoint_every=10)
    config, state = ppo.load_checkpoint("runs/ppo")
    print(ppo.evaluate(config, ppo.params(state), seed=0))  # {"greedy_return_mean": ..., ...}

Each record (``labcore.agents.contract.Algorithm``) is written in its algorithm's folder, in its ``algorithm``
module (which imports no JAX; its name comes from the config module), and gives the same things whatever drives
the algorithm underneath:
``config_class`` (``starting_points()``: its classmethods giving other starting points: ``smallest()``,
which every config has, the smallest run that trains and evaluates, then ``presets``), ``train``,
``load_checkpoint``, ``params``, ``evaluate`` and ``run_folder``; ``labcore.agents.contract`` says their shapes.

The names are the command line's (``python -m labcore train NAME``, ``eval NAME``) and the
``algorithm`` its checkpoints record. DQN has four drivers, so four names: ``dqn-scan`` (all of
training one jitted program on gymnax envs; also ``labcore.agents.dqn.train``), ``dqn-host``
(gymnasium envs, Atari included, stepped in Python), ``dqn-data-parallel`` (one update over every
device of one or several processes) and ``dqn-actor-learner`` (Ray actors feeding one learner).

**Adding an algorithm** is its folder, ``labcore/agents/<name>/`` (a config module importable without JAX
holding its ``NAME`` and a config class with a ``smallest()`` classmethod; an ``algorithm`` module holding its
``Algorithm`` record; a ``core``; a driver module with ``train``, ``load_checkpoint``, ``params`` and
``evaluate``, and with ``make_train`` and ``make_program`` too where its package exports the contract through
``labcore.agents.agent_exports``), and its record's line in ``ALGORITHMS`` below: the command line, the registry's tests (tests/test_registry.py
trains, resumes, loads and evaluates every entry from its smallest config) and the architecture guide's
table follow from it. tests/test_registry.py adds a bandit algorithm written outside labcore that way and
checks it.
"""

from __future__ import annotations

from labcore.agents.contract import RUN_FOLDER, SMALLEST, Algorithm, Setting, settings_of  # noqa: F401 (the contract's names, here too)
from labcore.agents.dqn import algorithm as dqn
from labcore.agents.gflownet.algorithm import ALGORITHM as GFLOWNET
from labcore.agents.iqn.algorithm import ALGORITHM as IQN
from labcore.agents.ppo.algorithm import ALGORITHM as PPO
from labcore.agents.pqn.algorithm import ALGORITHM as PQN

ALGORITHMS: tuple[Algorithm, ...] = (
    PPO,
    PQN,
    dqn.SCAN,
    dqn.HOST_LOOP,
    dqn.DATA_PARALLEL,
    dqn.ACTOR_LEARNER,
    GFLOWNET,
    IQN,
)

NAMES = tuple(algorithm.name for algorithm in ALGORITHMS)


def get(name: str) -> Algorithm:
    """The algorithm called ``name``; ValueError listing the names otherwise."""
    for algorithm in ALGORITHMS:
        if algorithm.name == name:
            return algorithm
    hint = " (DQN: name its driver)" if name == "dqn" else ""
    raise ValueError(f"algorithm: no algorithm {name!r}{hint}; labcore has {', '.join(NAMES)}")
