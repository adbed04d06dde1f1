"""The pqn record the registry lists (``labcore.agents.contract.Algorithm``): imports no JAX; its driver,
``labcore.agents.pqn.run``, is imported when the record is used."""

from __future__ import annotations

from labcore.agents.contract import Algorithm
from labcore.agents.pqn.config import NAME, PQNConfig


def _driver():
    from labcore.agents.pqn import run

    return run


ALGORITHM = Algorithm(
    NAME, "PQN (no replay, no target network) on a gymnax env or on Atari through ALE's vector env, all of "
          "training one jitted program", PQNConfig, _driver,
    presets=("cartpole", "minatar", "atari", "atari_dopamine"),
    eval_fields={"episodes": "eval_episodes", "epsilon": "eval_epsilon"})
