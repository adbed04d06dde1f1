"""The iqn record the registry lists (``labcore.agents.contract.Algorithm``): imports no JAX; its driver,
``labcore.agents.iqn.run``, is imported when the record is used."""

from __future__ import annotations

from labcore.agents.contract import Algorithm, Setting
from labcore.agents.iqn.run_config import RUN_FIELDS, NAME, IQNRunConfig


def _driver():
    from labcore.agents.iqn import run

    return run


ALGORITHM = Algorithm(
    NAME, "multi-agent IQN on treasurehunt in one of four run modes, pytorch .. jax_fused "
          "(--mode jax_fused: checkpoints, resume, seeds)", IQNRunConfig, _driver,
    eval_settings=(Setting("epochs", int, 10, "epochs of play"),), eval_overrides=True, training_only=RUN_FIELDS,
    smallest_run={"checkpoint_every": 3},  # half of its 6 epochs
    # as lesson 06 runs it: XLA's concurrency-optimised CPU scheduler off
    # (set when vmapped PPO runs hung; docs/results/ppo.md, "Many agents at once on a CPU")
    xla_flags=("--xla_cpu_enable_concurrency_optimized_scheduler=false",))
