"""Kernels per loop turn of every jitted training program, as XLA compiles it for an NVIDIA H200, no GPU needed.

Each program is the one ``labcore.loop.train`` runs (its driver's ``make_program``, the metrics
callback on, the default ``log_every``), traced in the form it takes on a GPU and compiled for the
H200 by ``labcore.tools.gpu_program``.
For each program: every loop with its trip count and the kernels one turn launches, and the
kernels of one update. PPO comes as side-by-side pairs on CartPole: the default beside the run
stripped to PureJaxRL's computation (no mask, no truncation bootstrap, no metrics callback), the
pair ``benchmarks/ppo_speed.py`` times on a device.

    make gpu-compiler                      # JAX's CUDA plugin for this jaxlib, into .venv/gpu-compiler
    .venv/bin/python benchmarks/gpu_kernels.py                   # every program
    .venv/bin/python benchmarks/gpu_kernels.py --programs ppo    # PPO's pairs only

Writes benchmarks/results/gpu_kernels.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

# Before JAX starts: find the CUDA plugin, and run nothing on a GPU (there is none to run on).
COMPILER = pathlib.Path(os.environ.get("LABCORE_GPU_COMPILER", pathlib.Path(__file__).parent.parent / ".venv" / "gpu-compiler"))
sys.path.insert(0, str(COMPILER))
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["LABCORE_COMPILATION_CACHE"] = "0"  # compiled for another device: nothing to keep

import jax  # noqa: E402

from labcore import loop, training_run  # noqa: E402
from labcore.tools import gpu_program  # noqa: E402
from labcore.tools.benchmarking import write_results  # noqa: E402


def programs(names: list[str]) -> list[tuple[str, loop.Program]]:
    """(label, program) of each jitted training program asked for, built as ``loop.train`` builds them."""
    from labcore.agents.dqn import scan as dqn_scan
    from labcore.agents.dqn.config import DQNConfig
    from labcore.agents.gflownet import run as gflownet_run
    from labcore.agents.gflownet.config import GFlowNetConfig
    from labcore.agents.iqn import run as iqn_run
    from labcore.agents.iqn.run_config import IQNRunConfig
    from labcore.agents.ppo import run as ppo_run
    from labcore.agents.ppo.config import PPOConfig
    from labcore.agents.pqn import run as pqn_run
    from labcore.agents.pqn.config import PQNConfig

    def build(make_program, config, callback=True):
        num_updates = make_program(config).num_updates
        return make_program(config, callback=(lambda row: None) if callback else None,
                            log_every=training_run.default_log_every(num_updates))

    built = []
    if "ppo" in names:
        for envs in (4, 64):
            config = dict(num_envs=envs, total_steps=500_000)
            built += [
                (f"PPO CartPole {envs}x128, stripped to PureJaxRL's computation",
                 build(ppo_run.make_program, PPOConfig.cartpole(**config, mask_actions=False, bootstrap_truncation=False),
                       callback=False)),
                (f"PPO CartPole {envs}x128, default (mask, truncation bootstrap, metrics)",
                 build(ppo_run.make_program, PPOConfig.cartpole(**config))),
            ]
    if "pqn" in names:
        built.append(("PQN Breakout-MinAtar 128x32", build(pqn_run.make_program, PQNConfig.minatar())))
    if "dqn-scan" in names:
        built.append(("jitted DQN CartPole", build(dqn_scan.make_program, DQNConfig())))
    if "iqn" in names:
        built.append(("IQN fused", build(iqn_run.make_program, IQNRunConfig(mode="jax_fused"))))
    if "gflownet" in names:
        built.append(("all-JAX GFlowNet", build(gflownet_run.make_program, GFlowNetConfig(trainer="jax"))))
    return built


def rows_of(label: str, program: loop.Program, text: str) -> list[dict]:
    """One row for the program (kernels of one update), then one per loop (where the same loop is
    compiled twice, e.g. in a burst of updates and in the rest, once)."""
    per_call = gpu_program.kernels_per_call(text)
    rows = [{"program": label, "loop": "one update, every loop in it", "turns": "",
             "kernels per turn": round(per_call / program.num_updates)}]
    seen = set()
    for found in gpu_program.kernel_loops(text):
        if (found.where, found.trips, found.kernels) in seen:
            continue
        seen.add((found.where, found.trips, found.kernels))
        rows.append({"program": label, "loop": f"{'  ' * found.depth}{found.where or found.body}",
                     "turns": "decided at run time" if found.trips is None else found.trips,
                     "kernels per turn": found.kernels})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    every = ["ppo", "pqn", "dqn-scan", "iqn", "gflownet"]
    parser.add_argument("--programs", nargs="+", choices=every, default=every)
    parser.add_argument("--target", choices=sorted(gpu_program.TARGETS), default="h200")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)

    rows = []
    for label, program in programs(args.programs):
        text = gpu_program.compile_for_gpu(lambda key: program.run(program.init(key), program.num_updates),
                                           jax.random.key(0), target=args.target)
        rows += (found := rows_of(label, program, text))
        print(f"{label}: {found[0]['kernels per turn']} kernels per update", flush=True)
    write_results("gpu_kernels", rows, out_dir=args.out,
                  columns=["program", "loop", "turns", "kernels per turn"],
                  extra={"target": args.target, "jax": jax.__version__, "programs": args.programs})


if __name__ == "__main__":
    main()
