"""The ppo record the registry lists (``labcore.agents.contract.Algorithm``): imports no JAX; its driver,
``labcore.agents.ppo.run``, is imported when the record is used."""

from __future__ import annotations

from labcore.agents.contract import Algorithm
from labcore.agents.ppo.config import NAME, PPOConfig


def _driver():
    from labcore.agents.ppo import run

    return run


ALGORITHM = Algorithm(
    NAME, "action-masked PPO on Vault-v0 or a gymnax env, all of training one jitted program", PPOConfig, _driver,
    presets=("cartpole",), eval_fields={"episodes": "eval_episodes"})
