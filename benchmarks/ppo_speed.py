"""Masked PPO throughput: environment steps per second once compiled, compile time apart.

Rows, each one ``jax.jit`` of ``labcore.agents.ppo.core.make_train`` (the whole training run):

* (a) CartPole-v1, PureJaxRL's settings (4 envs x 128 steps, 64 x 2 tanh), masking and metrics on;
  beside it the same run stripped to what PureJaxRL computes (no mask, no truncation bootstrap,
  no metrics callback) as the side-by-side baseline;
* (b) CartPole-v1 with 64 envs x 128 steps;
* (c) Vault-v0 with the default PPOConfig (256 envs x 128 steps, 256 x 2);
* (d) (a)'s configuration vmapped over 1, 8 and 64 seeds: wall time per seed.

    python benchmarks/ppo_speed.py                           # 500k steps per run
    python benchmarks/ppo_speed.py --timesteps 200000 --vault-timesteps 1000000 --seeds 1 8

Writes benchmarks/results/ppo_speed.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import time

# Before jax is imported: jax 0.10.2 on the CPU can hang after compiling a vmapped training run
# with its concurrency-optimised scheduler (labcore/__main__.py says more); this setting avoids it.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_concurrency_optimized_scheduler=false").strip()

# Compile times here are real compiles: with labcore's persistent compilation cache on, a second
# run's "compile" would be a file read (labcore.compile_cache), so this script runs without it.
os.environ["LABCORE_COMPILATION_CACHE"] = "0"

import jax  # noqa: E402
import numpy as np  # noqa: E402

from labcore.agents.ppo import core as ppo  # noqa: E402
from labcore.tools.benchmarking import write_results  # noqa: E402


def timed_run(config: ppo.PPOConfig, seeds: int | None = None, metrics_callback: bool = True) -> dict:
    """Compile, then time one whole training run (seeds: None = one unvmapped run)."""
    train = ppo.make_train(config, callback=(lambda metrics: None) if metrics_callback else None, log_every=10)
    if seeds is None:
        fn, key = jax.jit(train), jax.random.key(0)
    else:
        fn, key = jax.jit(jax.vmap(train)), jax.random.split(jax.random.key(0), seeds)
    started = time.perf_counter()
    compiled = fn.lower(key).compile()
    compile_s = time.perf_counter() - started
    started = time.perf_counter()
    _, metrics = jax.block_until_ready(compiled(key))
    wall_s = time.perf_counter() - started
    steps = config.num_updates * config.num_envs * config.num_steps * (seeds or 1)
    returns = np.asarray(metrics["episode_return"])
    return {
        "compile (s)": compile_s,
        "run (s)": wall_s,
        "steps/s": steps / wall_s,
        "final return": float(np.nanmean(returns[..., -max(1, returns.shape[-1] // 20) :])),
        "invalid rate": float(np.mean(metrics["invalid_action_rate"])),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timesteps", type=int, default=500_000, help="steps per CartPole run (per seed)")
    parser.add_argument("--vault-timesteps", type=int, default=2_097_152, help="steps of the Vault run (c)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 8, 64], help="seed counts for (d)")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)

    cartpole = ppo.PPOConfig.cartpole(total_steps=args.timesteps)
    bare = ppo.PPOConfig.cartpole(total_steps=args.timesteps, mask_actions=False, bootstrap_truncation=False)
    runs = [
        ("(a) CartPole 4x128, PureJaxRL's computation (baseline)", bare, None, False),
        ("(a) CartPole 4x128, masked, metrics on", cartpole, None, True),
        ("(b) CartPole 64x128, masked, metrics on", ppo.PPOConfig.cartpole(total_steps=args.timesteps, num_envs=64), None, True),
        ("(c) Vault 256x128 (the default PPOConfig)", ppo.PPOConfig(total_steps=args.vault_timesteps), None, True),
    ] + [(f"(d) CartPole 4x128, vmap {n} seeds", cartpole, n, True) for n in args.seeds]

    rows = []
    for name, config, seeds, callback in runs:
        result = timed_run(config, seeds, callback)
        row = {"run": name, **result, "wall per seed (s)": result["run (s)"] / (seeds or 1)}
        rows.append(row)
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    baseline = rows[0]["steps/s"]
    for row in rows:
        row["x baseline"] = row["steps/s"] / baseline
    write_results(
        "ppo_speed",
        rows,
        out_dir=args.out,
        columns=["run", "compile (s)", "run (s)", "steps/s", "x baseline", "wall per seed (s)", "final return", "invalid rate"],
        extra={"timesteps": args.timesteps, "vault_timesteps": args.vault_timesteps},
    )


if __name__ == "__main__":
    main()
