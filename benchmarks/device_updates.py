"""One training update of PPO and of DQN on the default device, with its memory: the figures to record per device.

Rows, each compiled first and then timed over ``--repeats`` calls waited for with
``block_until_ready`` (median and minimum):

- PPO on CartPole (4 envs x 128 steps, 4 epochs x 4 minibatches, 64 units), float32 and bfloat16
  compute (``PPOConfig.compute_dtype``): one update includes its 512 environment steps, which run
  on the device inside the same program;
- the PPO update at 64 envs x 128 steps x 256 units (the size ``auto_tune`` keeps on a T4), both dtypes;
- DQN's jitted update on a batch of 128 CartPole transitions (the (120, 84) MLP) and on a batch of
  32 Atari frame stacks (the Nature CNN, 4 x 84 x 84 uint8): the gradient step alone.

``temp MiB`` is XLA's scratch memory for the compiled program (``memory_analysis()``). Notebook 08
measures the first and the DQN CartPole row on whatever device runs it; this script is how the
per-device figures of docs/results/devices.md are produced, with the device recorded in the JSON.

    python benchmarks/device_updates.py
    python benchmarks/device_updates.py --repeats 50

Writes benchmarks/results/device_updates.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import os

# Before jax is imported: the scheduler setting that avoids jax 0.10.2's CPU hang after compiling
# large vmapped programs; it costs nothing here.
_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"
if _FLAG.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FLAG}".strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from labcore.agents.dqn import core as dqn  # noqa: E402
from labcore.agents.ppo import core as ppo
from labcore.tools.benchmarking import time_call, write_results  # noqa: E402
from labcore.nets.q_networks import make_q_network  # noqa: E402


def ppo_row(name: str, config: ppo.PPOConfig, repeats: int) -> dict:
    agent = ppo.make_ppo(config)
    runner = agent.init(jax.random.key(0))
    update = jax.jit(agent.run, static_argnums=1).lower(runner, 1).compile()
    timing = time_call(update, runner, warmup=1, repeats=repeats)
    steps = config.num_envs * config.num_steps
    return {"update": name, "compute": config.compute_dtype, "median ms": timing.median_s * 1e3,
            "min ms": timing.min_s * 1e3, "env steps/s": steps / timing.median_s,
            "temp MiB": update.memory_analysis().temp_size_in_bytes / 2**20}


def dqn_row(name: str, kind: str, obs: jax.Array, num_actions: int, repeats: int) -> dict:
    config = dqn.DQNConfig(batch_size=obs.shape[0])
    network = make_q_network(kind, num_actions=num_actions, hidden_sizes=config.hidden_sizes)
    optimizer = dqn.make_optimizer(config)
    state = dqn.init_train_state(config, network, optimizer, obs[0], jax.random.key(0))
    k1, k2 = jax.random.split(jax.random.key(1))
    batch = dqn.Transition(obs=obs, action=jax.random.randint(k1, (obs.shape[0],), 0, num_actions),
                           reward=jax.random.normal(k2, (obs.shape[0],)), next_obs=obs[::-1],
                           terminated=jnp.arange(obs.shape[0]) % 9 == 0)
    update = jax.jit(dqn.make_update(config, network, optimizer)).lower(state, batch).compile()
    timing = time_call(update, state, batch, warmup=1, repeats=repeats)
    return {"update": name, "compute": "float32", "median ms": timing.median_s * 1e3, "min ms": timing.min_s * 1e3,
            "env steps/s": None, "temp MiB": update.memory_analysis().temp_size_in_bytes / 2**20}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--skip-large", action="store_true", help="only the small PPO and the CartPole DQN rows")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)

    rows = []
    sizes = [("PPO CartPole 4 x 128, 64 units", {})]
    if not args.skip_large:
        sizes.append(("PPO CartPole 64 x 128, 256 units", {"num_envs": 64, "hidden_size": 256}))
    for name, overrides in sizes:
        for dtype in ("float32", "bfloat16"):
            rows.append(ppo_row(name, ppo.PPOConfig.cartpole(compute_dtype=dtype, **overrides), args.repeats))
            print(rows[-1], flush=True)
    observations = jax.random.normal(jax.random.key(2), (128, 4))
    rows.append(dqn_row("DQN CartPole, batch 128", "mlp", observations, 2, args.repeats))
    if not args.skip_large:
        frames = jax.random.randint(jax.random.key(3), (32, 4, 84, 84), 0, 256).astype(jnp.uint8)  # [B, stack, H, W]
        rows.append(dqn_row("DQN Nature CNN, batch 32", "nature_cnn", frames, 4, args.repeats))
    for row in rows:  # bfloat16 beside float32 of the same update, measured in this run
        base = next(r for r in rows if r["update"] == row["update"] and r["compute"] == "float32")
        row["time vs float32"] = row["median ms"] / base["median ms"]
    write_results("device_updates", rows, out_dir=args.out, extra={"repeats": args.repeats})


if __name__ == "__main__":
    main()
