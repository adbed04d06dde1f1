"""The four IQN run modes side by side: epochs per second, speed-up over PyTorch, and the compute floor.

The original experiment's configuration (the default ``IQNRunConfig``): treasurehunt 10 x 10,
5 agents, 50 turns per epoch; iRainbow with hidden size 250, batch 256, 12 quantiles, 256 acting
taus, 5 frames (``labcore.agents.iqn.runners`` runs the modes).
Only steady-state epochs are timed:

* every mode first plays ``--warmup`` epochs (default: just enough that every agent's buffer allows
  a train step, ceil((batch + n_frames + 1) / 50) = 6), so every agent trains in every timed epoch;
* epsilon is 0 throughout (``epsilon_start = 0``), so every action runs the greedy 256-tau forward
  in every mode (PyTorch would skip it for a random action; JAX computes it either way);
* the modes are timed in rounds, interleaved (pytorch, jax_sequential, jax_parallel, jax_fused,
  then again), and each row reports the median round, so a noisy neighbour hits all modes alike;
* PyTorch runs with ``--torch-threads`` threads, 1 by default: on this shared 2-core machine its
  two OpenMP threads collapse whenever another process holds a core (measured: 0.54 s per epoch
  on a quiet machine, 9 to 21 s per epoch beside one busy process, against 0.55 to 0.75 s with one
  thread either way).

The compute floor: the floating-point work of one epoch counted analytically (acting: agents x
turns x one 256-tau forward; training: agents x one train step = local(next) + target(next) +
local(states) forwards and the backward of the last), cross-checked with XLA's cost analysis of
the compiled per-turn and end-of-epoch programs, divided by the machine's measured float32 matmul
rate at the shapes that dominate ([1280, 250] x [250, 250]: 5 agents x 256 taus; [3072, 250] x
[250, 250]: 256 samples x 12 quantiles), and beside it at 1024^3. ``jax_fused / floor`` says how
far the fused program is from doing nothing but those matmuls at that rate.

Also jax_fused with 1, 8 and 32 worlds of 5 agents each (``--worlds``): epochs per second and
world-epochs per second.

    python benchmarks/iqn_modes.py
    python benchmarks/iqn_modes.py --epochs 5 --rounds 2 --modes jax_parallel jax_fused --worlds 1 8

Writes benchmarks/results/iqn_modes.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics

# Before jax is imported: jax 0.10.2 on the CPU can hang after compiling a vmapped training run
# with its concurrency-optimised scheduler (labcore/__main__.py says more); this setting avoids it.
_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()

# Compile times here are real compiles: with labcore's persistent compilation cache on, a second
# run's "compile" would be a file read (labcore.compile_cache), so this script runs without it.
os.environ["LABCORE_COMPILATION_CACHE"] = "0"

from labcore.agents.iqn import runners  # noqa: E402
from labcore.agents.iqn.run_config import MODES, IQNRunConfig  # noqa: E402
from labcore.agents.iqn.timing import epoch_flops, timed_block, timing_config, warmup_epochs  # noqa: E402
from labcore.tools.benchmarking import matmul_rate, write_results  # noqa: E402

# The timing helpers (the reference configuration at epsilon 0, the warm-up, the analytic matmul
# FLOPs and the timed block) live in labcore.agents.iqn.timing and labcore.tools.benchmarking, so that
# they are tested with the package and importable from an installed labcore.


def xla_flops(config: IQNRunConfig, parallel: runners.JaxParallelRunner | None = None,
              fused: runners.JaxFusedRunner | None = None) -> dict[str, float]:
    """XLA's cost analysis of the compiled programs: jax_parallel's one turn x turns plus its end
    of the epoch, and jax_fused's whole-epoch program as compiled (which may count a while loop's
    body once rather than once per trip). Reuses the benchmark's runners when given."""
    parallel = parallel or runners.JaxParallelRunner(dataclasses.replace(config, mode="jax_parallel"))
    fused = fused or runners.JaxFusedRunner(dataclasses.replace(config, mode="jax_fused"))

    def flops(compiled) -> float:
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        return float(cost.get("flops", float("nan")))

    turn, end = flops(parallel._turn), flops(parallel._end)
    turns = config.world.max_turns
    return {"acting": turn * turns, "training": end, "total": turn * turns + end,
            "fused_program": flops(fused.compile(1))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=10, help="timed epochs per mode and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (the median is reported)")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--worlds", nargs="*", type=int, default=[1, 8, 32], help="jax_fused world counts")
    parser.add_argument("--world-epochs", type=int, default=3, help="timed epochs per world count")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch.set_num_threads for the pytorch mode")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    if "pytorch" in args.modes:
        import torch

        torch.set_num_threads(args.torch_threads)

    base = timing_config("jax_fused")
    warmup = warmup_epochs(base)
    print(f"warm-up {warmup} epochs per mode (pre-fill), then {args.rounds} rounds of {args.epochs} timed epochs",
          flush=True)

    # Build (and compile) every runner, then pre-fill its buffers with the warm-up epochs.
    timed, compile_s = {}, {}
    for mode in args.modes:
        per_call = args.epochs if mode == "jax_fused" else 1
        runner = runners.make_runner(timing_config(mode))
        for _ in range(warmup):
            runner.run_epochs(1)
        timed[mode], compile_s[mode] = (runner, per_call), runner.compile_s
        print(f"{mode}: compiled in {runner.compile_s:.1f} s, {warmup} warm-up epochs done", flush=True)
    if "jax_fused" in timed:  # the fused mode also one epoch per call: what the dispatch per epoch costs
        timed["jax_fused (1 epoch/call)"] = (timed["jax_fused"][0], 1)
        compile_s["jax_fused (1 epoch/call)"] = compile_s["jax_fused"]

    # The matmul rates are measured in every round too, beside the modes, so the floor sees the
    # same machine load as the timings it is compared with (the median round of each is used).
    agent, hidden = base.agent, base.agent.hidden_size
    shapes = {"act": (base.world.n_agents * agent.n_tau_act, hidden, hidden),
              "train": (agent.batch_size * agent.n_quantiles, hidden, hidden), "square": (1024, 1024, 1024)}
    seconds: dict[str, list[float]] = {name: [] for name in timed}
    rates: dict[str, list[float]] = {name: [] for name in shapes}
    for round_index in range(args.rounds):
        for name, (runner, per_call) in timed.items():
            seconds[name].append(timed_block(runner, args.epochs, per_call) / args.epochs)
        for name, shape in shapes.items():
            rates[name].append(matmul_rate(*shape))
        print(f"round {round_index + 1}: " + ", ".join(f"{n} {s[-1]:.3f} s/epoch" for n, s in seconds.items())
              + "; matmul GFLOP/s " + ", ".join(f"{n} {r[-1]:.0f}" for n, r in rates.items()), flush=True)

    analytic = epoch_flops(base)
    xla = xla_flops(base, timed.get("jax_parallel", (None,))[0], timed.get("jax_fused", (None,))[0])
    rate_act, rate_train, rate_square = (statistics.median(rates[name]) for name in ("act", "train", "square"))
    floor = analytic["acting"] / (rate_act * 1e9) + analytic["training"] / (rate_train * 1e9)
    floor_square = analytic["total"] / (rate_square * 1e9)
    print(f"analytic GFLOP/epoch {analytic['total'] / 1e9:.2f} (acting {analytic['acting'] / 1e9:.2f}, training "
          f"{analytic['training'] / 1e9:.2f}); XLA cost analysis {xla['total'] / 1e9:.2f}; matmul GFLOP/s: "
          f"[1280,250]x[250,250] {rate_act:.1f}, [3072,250]x[250,250] {rate_train:.1f}, 1024^3 {rate_square:.1f}; "
          f"floor {floor:.3f} s/epoch ({floor_square:.3f} at the 1024^3 rate)", flush=True)

    rows = []
    reference = statistics.median(seconds["pytorch"]) if "pytorch" in seconds else None
    for name, values in seconds.items():
        median = statistics.median(values)
        label = f"pytorch ({args.torch_threads} torch thread{'s' * (args.torch_threads > 1)})" if name == "pytorch" else name
        rows.append({"mode": label, "worlds": 1, "s/epoch (median)": median, "s/epoch (min)": min(values),
                     "epochs/s": 1 / median, "world-epochs/s": 1 / median,
                     "speed-up vs pytorch": None if reference is None else reference / median,
                     "x floor": median / floor, "compile (s)": compile_s[name]})
    rows.append({"mode": "floor (matmuls at the measured rate)", "worlds": 1, "s/epoch (median)": floor,
                 "epochs/s": 1 / floor, "speed-up vs pytorch": None if reference is None else reference / floor,
                 "x floor": 1.0})

    # jax_fused over many worlds, one epoch per call (one compile; the dispatch is negligible here).
    for num_worlds in args.worlds:
        runner = runners.make_runner(timing_config("jax_fused", num_worlds))
        for _ in range(warmup):
            runner.run_epochs(1)
        per_epoch = timed_block(runner, args.world_epochs, 1) / args.world_epochs
        rows.append({"mode": "jax_fused", "worlds": num_worlds, "s/epoch (median)": per_epoch, "epochs/s": 1 / per_epoch,
                     "world-epochs/s": num_worlds / per_epoch, "x floor": per_epoch / (num_worlds * floor),
                     "compile (s)": runner.compile_s})
        print(rows[-1], flush=True)
        del runner

    columns = ["mode", "worlds", "s/epoch (median)", "s/epoch (min)", "epochs/s", "world-epochs/s", "speed-up vs pytorch",
               "x floor", "compile (s)"]
    write_results("iqn_modes", rows, out_dir=args.out, columns=columns, extra={
        "config": base.as_dict(), "epsilon": 0.0, "warmup_epochs": warmup, "timed_epochs": args.epochs,
        "torch_threads": args.torch_threads,
        "rounds": args.rounds, "seconds_per_round": seconds,
        "gflop_per_epoch": {"analytic": {k: v / 1e9 for k, v in analytic.items()},
                            "xla_cost_analysis": {k: v / 1e9 for k, v in xla.items()}},
        "matmul_gflops": {"[1280,250]x[250,250]": rate_act, "[3072,250]x[250,250]": rate_train, "1024^3": rate_square},
        "matmul_gflops_per_round": rates,
        "floor_s_per_epoch": floor, "floor_s_per_epoch_1024_rate": floor_square,
        "note": ("steady state: buffers pre-filled so every agent trains every timed epoch; "
                 "epsilon 0 so every act runs the 256-tau forward"),
    })


if __name__ == "__main__":
    main()
