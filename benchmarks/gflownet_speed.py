"""GFlowNet trainers side by side: iterations per second and where the time goes.

HyperGrid D=4, H=8, batch 64 trajectories, TB loss, 256x2 networks, the same seed for every
trainer. ``torch`` is all PyTorch; ``hybrid`` samples with the PyTorch agent and takes a jitted
JAX gradient step, then copies the parameters back; ``jax_policy`` keeps the policy in JAX but
samples with a Python loop of jitted steps; ``jax`` samples and learns in one compiled program
(its compile time is reported apart). Times per iteration are split into sampling,
conversion (PyTorch batch -> JAX arrays), gradient step and parameter sync, and the gradient step
is also timed alone (a loop of nothing else, on one fixed batch); a run of
``--warmup`` iterations (JAX's compile) is subtracted from a run of ``--warmup`` + ``--iterations``.

    python benchmarks/gflownet_speed.py
    python benchmarks/gflownet_speed.py --iterations 100 --loss subtb

Writes benchmarks/results/gflownet_speed.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import os

# Compile times here are real compiles: with labcore's persistent compilation cache on, a second
# run's "compile" would be a file read (labcore.compile_cache), so this script runs without it.
os.environ["LABCORE_COMPILATION_CACHE"] = "0"

from labcore.agents.gflownet import trainers as gflownet_train  # noqa: E402
from labcore.agents.gflownet.core import GFlowNetConfig  # noqa: E402
from labcore.tools.benchmarking import write_results  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--jax-iterations", type=int, default=2000, help="iterations of the all-JAX run")
    parser.add_argument("--loss", default="tb")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)

    rows = []
    for trainer in ("torch", "hybrid", "jax_policy"):
        config = GFlowNetConfig(ndim=4, height=8, batch_size=64, loss=args.loss, trainer=trainer, iterations=args.iterations)
        rows.append({"trainer": trainer, **gflownet_train.profile_phases(config, args.warmup)})
        print(rows[-1], flush=True)
    # jax: one compiled program; its compile is timed apart, the iterations are fused (no phases)
    config = GFlowNetConfig(ndim=4, height=8, batch_size=64, loss=args.loss, trainer="jax", iterations=args.jax_iterations)
    seconds = gflownet_train.train(config, log_every=config.iterations)["seconds"]
    per_iteration = 1000 * seconds["fused iteration"] / config.iterations
    rows.append({"trainer": "jax", "iteration (ms)": per_iteration, "iterations/s": 1000 / per_iteration,
                 "compile (s)": seconds["compile"]})
    print(rows[-1], flush=True)
    alone = gflownet_train.time_gradient_step(GFlowNetConfig(ndim=4, height=8, batch_size=64, loss=args.loss), args.iterations)
    rows[0]["gradient alone (ms)"], rows[1]["gradient alone (ms)"] = alone["torch"], alone["jax"]
    base = rows[0]
    for row in rows:
        if "gradient (ms)" in row:
            row["gradient speed-up"] = base["gradient (ms)"] / row["gradient (ms)"]
        if "gradient alone (ms)" in row:
            row["speed-up alone"] = base["gradient alone (ms)"] / row["gradient alone (ms)"]
        row["end-to-end speed-up"] = row["iterations/s"] / base["iterations/s"]
    columns = ["trainer", "sampling (ms)", "conversion (ms)", "gradient (ms)", "sync (ms)", "iteration (ms)", "iterations/s",
               "gradient speed-up", "gradient alone (ms)", "speed-up alone", "end-to-end speed-up", "compile (s)"]
    write_results("gflownet_speed", rows, out_dir=args.out, columns=columns,
                  extra={"ndim": 4, "height": 8, "batch_size": 64, "loss": args.loss, "iterations": args.iterations})


if __name__ == "__main__":
    main()
