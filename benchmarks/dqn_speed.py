"""DQN speed: environment steps per second of labcore's loop, side by side with a per-step loop.

For CartPole-v1 (MLP, batch 128, one update every 10 steps) and ALE/Breakout-v5 (Nature CNN,
batch 32, one update every 4 steps), in one run on one machine:

* ``labcore``: ``labcore.agents.dqn.host_loop.train`` (transitions collected on the host, one jitted
  ``learn`` call per update, replay on the device; for Breakout the frame-once replay);
* ``per-step loop``: the structure of the well-known single-file JAX DQNs: a host epsilon coin,
  one jitted greedy-action call per step, a numpy ring buffer, a numpy batch handed to a jitted
  update every ``train_frequency`` steps. Same networks, same update function, same envs;
* ``labcore, num_envs=10`` (CartPole): the same update schedule with 10 envs stepped together,
  so one act call serves 10 agent steps;
* ``update alone``: the jitted update on a fixed batch, and the steps/s it allows at that
  train frequency if acting and the env were free (the compute floor).

Learning is on from the start (a short fill first) so the timed window is all learning steps.
Both loops run with ``labcore.devices.synchronous_cpu_dispatch()`` (set before JAX starts), as
``python -m labcore train dqn-host`` and notebook 01 do: each step needs its action before the next.

    python benchmarks/dqn_speed.py                         # CartPole 20k steps, Breakout 2k
    python benchmarks/dqn_speed.py --cartpole-steps 50000 --breakout-steps 4000

Writes benchmarks/results/dqn_speed.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time

import jax
import jax.numpy as jnp
import numpy as np

from labcore import devices, envs
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn import host_loop as dqn_loop
from labcore.agents.dqn import host_parts
from labcore.tools.benchmarking import time_call, write_results


def labcore_steps_per_second(config: dqn.DQNConfig, steps: int) -> float:
    """Steps/s of dqn_loop.train over its last ``steps`` steps (the first log interval, with compiles, dropped)."""
    config = dataclasses.replace(config, total_steps=config.learning_starts + steps)
    result = dqn_loop.train(config, log_every=steps // (4 * config.train_frequency), progress=False, evaluate=False)
    timed = result.metrics[-3:]  # the last three quarters
    seconds = sum((row["timesteps"] - previous["timesteps"]) / row["steps_per_second"]
                  for previous, row in zip(result.metrics[-4:], timed))
    return (timed[-1]["timesteps"] - result.metrics[-4]["timesteps"]) / seconds


def per_step_loop_steps_per_second(config: dqn.DQNConfig, steps: int) -> float:
    """The per-step host loop described in the module docstring; steps/s after the fill and a warm-up."""
    obs_shape, obs_dtype, num_actions = host_parts.env_spec(config)
    network = host_parts.make_agent(config).network
    optimizer = dqn.make_optimizer(config)
    state = dqn.init_train_state(config, network, optimizer, jnp.zeros(obs_shape, obs_dtype), jax.random.key(0))
    update = jax.jit(dqn.make_update(config, network, optimizer), donate_argnums=0)
    greedy = jax.jit(lambda params, obs: jnp.argmax(network.apply(params, None, obs), axis=-1))
    capacity = config.buffer_size
    buffer = {
        "obs": np.zeros((capacity, *obs_shape), obs_dtype),
        "next_obs": np.zeros((capacity, *obs_shape), obs_dtype),
        "action": np.zeros(capacity, np.int32),
        "reward": np.zeros(capacity, np.float32),
        "terminated": np.zeros(capacity, bool),
    }
    env = host_parts.open_envs(config, 1, seed=0)
    obs, _ = env.reset(seed=[0])
    rng, np_rng, position, size = random.Random(0), np.random.default_rng(0), 0, 0
    warmup = steps // 4
    duration = max(1, int(config.exploration_fraction * config.total_steps))
    total = config.learning_starts + warmup + steps
    for step in range(total):
        if step == config.learning_starts + warmup:
            jax.block_until_ready(state)
            started = time.perf_counter()
        epsilon = config.epsilon_start + min(step / duration, 1.0) * (config.epsilon_end - config.epsilon_start)
        if rng.random() < epsilon:
            action = np.array([rng.randrange(num_actions)])
        else:
            action = np.asarray(greedy(state.params, obs))
        next_obs, reward, terminated, truncated, info = env.step(action)
        real_next = envs.final_observations(next_obs, terminated | truncated, info)
        for key, value in (("obs", obs[0]), ("next_obs", real_next[0]), ("action", action[0]),
                           ("reward", reward[0]), ("terminated", terminated[0])):
            buffer[key][position] = value
        position, size = (position + 1) % capacity, min(size + 1, capacity)
        obs = next_obs
        if step >= config.learning_starts and step % config.train_frequency == 0:
            index = np_rng.integers(0, size, config.batch_size)
            batch = dqn.Transition(**{key: values[index] for key, values in buffer.items()})
            state, _ = update(state, batch)
    jax.block_until_ready(state)
    env.close()
    return steps / (time.perf_counter() - started)


def update_seconds(config: dqn.DQNConfig) -> float:
    """Median seconds of one jitted update on a fixed random batch."""
    obs_shape, obs_dtype, num_actions = host_parts.env_spec(config)
    network = host_parts.make_agent(config).network
    optimizer = dqn.make_optimizer(config)
    state = dqn.init_train_state(config, network, optimizer, jnp.zeros(obs_shape, obs_dtype), jax.random.key(0))
    rng = np.random.default_rng(0)
    make_obs = (lambda: rng.integers(0, 256, (config.batch_size, *obs_shape), dtype=np.uint8)) if obs_dtype == np.uint8 \
        else (lambda: rng.normal(size=(config.batch_size, *obs_shape)).astype(np.float32))
    batch = dqn.Transition(jnp.asarray(make_obs()), jnp.zeros(config.batch_size, jnp.int32),
                           jnp.ones(config.batch_size), jnp.asarray(make_obs()), jnp.zeros(config.batch_size, bool))
    update = jax.jit(dqn.make_update(config, network, optimizer))
    return time_call(lambda: update(state, batch), repeats=20).median_s


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cartpole-steps", type=int, default=20_000)
    parser.add_argument("--breakout-steps", type=int, default=2_000)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    # Both loops call a jitted function per env step and need its result before the next step.
    # Before the first JAX computation: run CPU calls on the calling thread (see the function).
    devices.synchronous_cpu_dispatch()

    cartpole = dqn.DQNConfig(learning_starts=2_000, exploration_fraction=0.01, total_steps=100_000)
    setups = [
        ("CartPole-v1", cartpole, args.cartpole_steps),
        # Same update schedule (one batch-128 update per 10 agent steps), 10 envs stepped together:
        # one act call per 10 agent steps. The per-step column stays the single-env loop.
        ("CartPole-v1, num_envs=10", dataclasses.replace(cartpole, num_envs=10), args.cartpole_steps),
        ("ALE/Breakout-v5", dqn.DQNConfig.atari_short(learning_starts=500, exploration_fraction=0.01, buffer_size=20_000), args.breakout_steps),
    ]
    rows = []
    for name, config, steps in setups:
        ours = labcore_steps_per_second(config, steps)
        baseline = per_step_loop_steps_per_second(dataclasses.replace(config, num_envs=1), steps)
        seconds = update_seconds(config)
        rows.append({
            "env": name,
            "labcore steps/s": ours,
            "per-step loop steps/s": baseline,
            "labcore / per-step": ours / baseline,
            "update alone (ms)": seconds * 1e3,
            "floor steps/s (update only)": config.train_frequency / seconds,
            "labcore / floor": ours / (config.train_frequency / seconds),
        })
    write_results("dqn_speed", rows, out_dir=args.out,
                  extra={"cartpole_steps": args.cartpole_steps, "breakout_steps": args.breakout_steps})


if __name__ == "__main__":
    main()
