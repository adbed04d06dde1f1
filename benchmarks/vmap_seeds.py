"""Seeds per call: the fully jitted DQN vmapped over 1, 8, 64 and 256 seeds, next to the host loop.

Same CartPole-v1 configuration everywhere (MLP 120-84, batch 128, one update every 10 steps,
buffer 10k, learning from step 2,000):

* ``host loop``: ``labcore.agents.dqn.host_loop.train`` over gymnasium, one seed; steps/s over the
  last three quarters of the run (its small jit compile excluded);
* ``jitted scan``: ``labcore.agents.dqn.scan.make_train`` over gymnax, ``jax.jit(jax.vmap(train))``
  on N keys: N agents trained in one call; compile time reported separately, then one timed run.

    python benchmarks/vmap_seeds.py                       # 20k steps per seed; 1, 8, 64, 256 seeds
    python benchmarks/vmap_seeds.py --steps 50000 --seeds 1 8 64

Writes benchmarks/results/vmap_seeds.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import time

# Before jax is imported: XLA's concurrency-optimised CPU scheduler off, as in every vmapped run the
# results pages record (docs/results/ppo.md, "Many agents at once on a CPU", says why it was set).
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_concurrency_optimized_scheduler=false").strip()

# Compile times here are real compiles: with labcore's persistent compilation cache on, a second
# run's "compile" would be a file read (labcore.compile_cache), so this script runs without it.
os.environ["LABCORE_COMPILATION_CACHE"] = "0"

import jax  # noqa: E402
import numpy as np  # noqa: E402

from labcore.agents.dqn import core as dqn  # noqa: E402
from labcore.agents.dqn import host_loop as dqn_loop
from labcore.agents.dqn import scan as dqn_scan
from labcore.tools.benchmarking import write_results  # noqa: E402


def host_loop_steps_per_second(config: dqn.DQNConfig) -> float:
    result = dqn_loop.train(config, log_every=config.total_steps // (4 * config.train_frequency), progress=False,
                            evaluate=False)
    rows = result.metrics
    seconds = sum((row["timesteps"] - before["timesteps"]) / row["steps_per_second"]
                  for before, row in zip(rows[-4:], rows[-3:]))
    return (rows[-1]["timesteps"] - rows[-4]["timesteps"]) / seconds


def scan_run(config: dqn.DQNConfig, seeds: int) -> dict[str, float]:
    run = jax.jit(jax.vmap(dqn_scan.make_train_and_evaluate(config)))  # each seed's run, then its episodes
    keys = jax.random.split(jax.random.key(0), seeds)
    started = time.perf_counter()
    compiled = run.lower(keys).compile()
    compile_s = time.perf_counter() - started
    started = time.perf_counter()
    returns = jax.block_until_ready(compiled(keys))
    wall_s = time.perf_counter() - started
    return {"compile (s)": compile_s, "wall (s)": wall_s, "eval return": float(np.mean(returns))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20_000, help="agent steps per seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 8, 64, 256])
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)

    config = dqn.DQNConfig(total_steps=args.steps, learning_starts=2_000, eval_episodes=10)
    host = host_loop_steps_per_second(config)
    rows = [{"run": "host loop (gymnasium)", "seeds": 1, "compile (s)": None, "wall (s)": args.steps / host,
             "steps/s (all seeds)": host, "x host loop": 1.0, "wall / 1-seed scan wall": None, "eval return": None}]
    single_wall = None
    for seeds in args.seeds:
        run = scan_run(config, seeds)
        single_wall = run["wall (s)"] if single_wall is None else single_wall
        rate = seeds * args.steps / run["wall (s)"]
        rows.append({"run": "jitted scan (gymnax)", "seeds": seeds, **{k: run[k] for k in ("compile (s)", "wall (s)")},
                     "steps/s (all seeds)": rate, "x host loop": rate / host,
                     "wall / 1-seed scan wall": run["wall (s)"] / single_wall, "eval return": run["eval return"]})
        print(rows[-1], flush=True)
    write_results("vmap_seeds", rows, out_dir=args.out, extra={"steps_per_seed": args.steps})


if __name__ == "__main__":
    main()
