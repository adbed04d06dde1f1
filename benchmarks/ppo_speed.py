"""Masked PPO throughput: environment steps per second once compiled, compile time apart.

Each row is one ``jax.jit`` of ``labcore.agents.ppo.core.make_train`` (the whole training run):

* side-by-side pairs on CartPole-v1 (PureJaxRL's settings, 64 x 2 tanh, 128 steps per env per
  update) at each ``--envs`` count: the default PPO (action masking, truncation bootstrap, metrics
  callback) beside the same run stripped to what PureJaxRL computes (no mask, no bootstrap, no
  callback). Both are compiled first, then timed in ``--rounds`` rounds, each running them in order
  and then in reverse (its time for a program: the mean of the two); the run time is the median
  of the rounds, and "x stripped" the median of the rounds' ratios (its range beside it). On a CPU
  the pairs are timed under each ``--schedulers`` setting of XLA's CPU scheduler, each in a
  process of its own (see ``SCHEDULERS`` below);
* Vault-v0 with the default PPOConfig (256 envs x 128 steps, 256 x 2), XLA's default scheduler;
* CartPole 4 x 128 vmapped over ``--seeds`` seeds: wall time per seed (the concurrency-optimised
  scheduler off, as in the PPO lesson).

    python benchmarks/ppo_speed.py                              # pairs at 4 and 64 envs, 500k steps each
    python benchmarks/ppo_speed.py --envs 4 64 2048 --rounds 5  # a GPU: PureJaxRL's large batch too
    python benchmarks/ppo_speed.py --timesteps 100000 --vault-timesteps 0 --seeds   # pairs only
    python benchmarks/ppo_speed.py --schedulers default --vault-timesteps 0 --seeds # XLA's default only
    python benchmarks/ppo_speed.py --envs 4 64 --timesteps 262144 --features --vault-timesteps 0 --seeds
                                                                # what each feature costs alone

A pair runs ``max(--timesteps, --min-updates updates)`` steps, so a large batch still runs enough
updates to time. Writes benchmarks/results/ppo_speed.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

# Compile times here are real compiles: with labcore's persistent compilation cache on, a second
# run's "compile" would be a file read (labcore.compile_cache), so this script runs without it.
os.environ["LABCORE_COMPILATION_CACHE"] = "0"

import jax  # noqa: E402
import numpy as np  # noqa: E402

from labcore.agents.ppo import core as ppo  # noqa: E402
from labcore.tools.benchmarking import write_results  # noqa: E402


def compiled_run(config: ppo.PPOConfig, seeds: int | None = None, metrics_callback: bool = True) -> dict:
    """The whole training run, compiled (seeds: None = one unvmapped run): {'call', 'key', 'compile (s)', 'steps'}."""
    train = ppo.make_train(config, callback=(lambda metrics: None) if metrics_callback else None, log_every=10)
    if seeds is None:
        fn, key = jax.jit(train), jax.random.key(0)
    else:
        fn, key = jax.jit(jax.vmap(train)), jax.random.split(jax.random.key(0), seeds)
    started = time.perf_counter()
    call = fn.lower(key).compile()
    return {"call": call, "key": key, "compile (s)": time.perf_counter() - started,
            "steps": config.num_updates * config.num_envs * config.num_steps * (seeds or 1), "updates": config.num_updates}


def timed(run: dict) -> tuple[float, dict, int]:
    """One whole training run of a compiled program: (seconds, metrics, thread switches).

    Thread switches: the times a thread of this process gave up its core to wait during the run
    (voluntary context switches), as XLA's CPU runtime does when one of its threads waits for an op
    another runs; -1 where the OS does not count them.
    """
    switches = _voluntary_switches()
    started = time.perf_counter()
    _, metrics = jax.block_until_ready(run["call"](run["key"]))
    seconds = time.perf_counter() - started
    return seconds, metrics, (_voluntary_switches() - switches if switches >= 0 else -1)


def _voluntary_switches() -> int:
    try:
        import resource
    except ImportError:  # Windows
        return -1
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


def row(name: str, run: dict, seconds: list[float], metrics: dict, switches: list[int], seeds: int | None = None) -> dict:
    returns = np.asarray(metrics["episode_return"])
    median = statistics.median(seconds)
    return {
        "run": name,
        "compile (s)": run["compile (s)"],
        "run (s)": median,
        "steps/s": run["steps"] / median,
        "thread switches / update": statistics.median(switches) / run["updates"] if min(switches) >= 0 else None,
        "wall per seed (s)": median / (seeds or 1),
        "final return": float(np.nanmean(returns[..., -max(1, returns.shape[-1] // 20):])),
        "invalid rate": float(np.mean(metrics["invalid_action_rate"])),
    }


# The runs of a side-by-side comparison: (name, config overrides, metrics callback). The stripped run
# comes first: the others' "x stripped" is the median of the rounds' ratios to it.
STRIPPED = ("stripped to PureJaxRL's computation", dict(mask_actions=False, bootstrap_truncation=False), False)
DEFAULT = ("default (mask, truncation bootstrap, metrics)", {}, True)
EACH_FEATURE = (
    ("stripped, plus the action mask", dict(mask_actions=True, bootstrap_truncation=False), False),
    ("stripped, plus the truncation bootstrap", dict(mask_actions=False, bootstrap_truncation=True), False),
    ("stripped, plus the metrics callback", dict(mask_actions=False, bootstrap_truncation=False), True),
)


def side_by_side(envs: int, timesteps: int, rounds: int, features: bool = False) -> list[dict]:
    """The stripped and the default PPO at ``envs`` x 128 (with ``features``, also each feature alone on
    top of the stripped run), compiled, then timed in ``rounds`` rounds, each in order and in reverse."""
    variants = [STRIPPED, *(EACH_FEATURE if features else ()), DEFAULT]
    runs = {name: compiled_run(ppo.PPOConfig.cartpole(num_envs=envs, total_steps=timesteps, **overrides),
                               metrics_callback=callback)
            for name, overrides, callback in variants}
    seconds = {name: [] for name in runs}
    switches = {name: [] for name in runs}
    metrics = {}
    for _ in range(rounds):
        # A round runs the programs in order, then in reverse, and a program's time is its two runs:
        # a drift across the round (a device's clock, a host's turbo) then adds the same to each program,
        # where a fixed order would charge it to the later ones.
        walls = {name: 0.0 for name in runs}
        for name in [*runs, *reversed(runs)]:
            wall, metrics[name], switched = timed(runs[name])
            walls[name] += wall
            switches[name].append(switched)
        for name, wall in walls.items():
            seconds[name].append(wall / 2)
    label = f"CartPole {envs}x128"
    rows = []
    for name in runs:
        ratios = [s / d for s, d in zip(seconds[STRIPPED[0]], seconds[name])]
        rows.append(row(f"{label}, {name}", runs[name], seconds[name], metrics[name], switches[name]))
        rows[-1]["x stripped"] = statistics.median(ratios)
        if name != STRIPPED[0]:
            rows[-1]["x stripped, range"] = f"{min(ratios):.3f}-{max(ratios):.3f}"
        print(f"{label}, {name}: seconds {seconds[name]}, ratios {ratios}", flush=True)
    return rows


# XLA's CPU scheduler setting, read when a process first runs a JAX program, so each setting's runs
# get a process of their own. The PPO lesson and the vmapped runs turn the concurrency-optimised one
# off (docs/results/ppo.md, "Many agents at once on a CPU", says why). A plain training run (``labcore train ppo``, ``loop.train``)
# keeps XLA's default. On a 2-core CPU the setting changes how often XLA's runtime hands a small op
# to its second thread, so the pairs are timed under both. On a GPU or TPU it changes nothing.
SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler"
SCHEDULERS = {"default": "XLA's default", "off": "concurrency-optimised off"}


def child_env(scheduler: str) -> dict[str, str]:
    """This process's environment with XLA_FLAGS set for ``scheduler`` ("default" or "off")."""
    flags = [flag for flag in os.environ.get("XLA_FLAGS", "").split() if not flag.startswith(SCHEDULER_FLAG)]
    if scheduler == "off":
        flags.append(f"{SCHEDULER_FLAG}=false")
    return {**os.environ, "XLA_FLAGS": " ".join(flags)}


def in_child(part: str, scheduler: str, argv: list[str]) -> dict:
    """Run ``part`` ("pairs" or "seeds") of this benchmark, with this command line's ``argv``, in a new
    process under ``scheduler``: {"platform": ..., "rows": [...]}; its progress lines go to this
    process's output."""
    with tempfile.TemporaryDirectory() as folder:
        found = pathlib.Path(folder) / "rows.json"
        command = [sys.executable, __file__, *argv, "--part", part, "--rows-to", str(found)]
        subprocess.run(command, env=child_env(scheduler), check=True)
        done = json.loads(found.read_text())
    for row in done["rows"]:
        row["CPU scheduler"] = SCHEDULERS[scheduler] if done["platform"] == "cpu" else "(not a CPU)"
    return done


def run_part(part: str, args: argparse.Namespace) -> list[dict]:
    """The rows of ``part``, run in this process: "pairs" (the side-by-side pairs and the Vault run)
    or "seeds" (the vmapped runs)."""
    rows = []
    singles = []
    if part == "pairs":
        for envs in args.envs:
            rows += side_by_side(envs, max(args.timesteps, args.min_updates * envs * 128), args.rounds, args.features)
        if args.vault_timesteps:
            singles.append(("Vault 256x128 (the default PPOConfig)", ppo.PPOConfig(total_steps=args.vault_timesteps), None))
    else:
        cartpole = ppo.PPOConfig.cartpole(total_steps=args.timesteps)
        singles += [(f"CartPole 4x128, vmap {n} seeds", cartpole, n) for n in args.seeds]
    for name, config, seeds in singles:
        run = compiled_run(config, seeds)
        seconds, metrics, switched = timed(run)
        rows.append(row(name, run, [seconds], metrics, [switched], seeds))
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, nargs="*", default=[4, 64], help="env counts of the side-by-side pairs")
    parser.add_argument("--timesteps", type=int, default=500_000, help="steps per CartPole run (per seed)")
    parser.add_argument("--min-updates", type=int, default=32, help="a pair runs at least this many updates")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds, each running the programs in order and then in reverse")
    parser.add_argument("--vault-timesteps", type=int, default=2_097_152, help="steps of the Vault run (0: none)")
    parser.add_argument("--seeds", type=int, nargs="*", default=[1, 8, 64], help="seed counts of the vmapped runs")
    parser.add_argument("--features", action="store_true",
                        help="also each feature alone (mask, bootstrap, metrics) on top of the stripped run, in the same rounds")
    parser.add_argument("--schedulers", nargs="+", choices=list(SCHEDULERS), default=list(SCHEDULERS),
                        help="XLA CPU scheduler settings to time the pairs under, each in a process of its own "
                             "(the vmapped runs always run with the concurrency-optimised one off)")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--part", choices=["pairs", "seeds"], help=argparse.SUPPRESS)  # set for a child process
    parser.add_argument("--rows-to", help=argparse.SUPPRESS)  # where a child process writes its rows
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.part:
        payload = {"platform": jax.default_backend(), "rows": run_part(args.part, args)}
        pathlib.Path(args.rows_to).write_text(json.dumps(payload))
        return

    rows = []
    if args.envs or args.vault_timesteps:
        # the Vault run (one program, no pair) runs once, in the first setting's process
        for number, scheduler in enumerate(args.schedulers if args.envs else args.schedulers[:1]):
            done = in_child("pairs", scheduler, argv + (["--vault-timesteps", "0"] if number else []))
            rows += done["rows"]
            if done["platform"] != "cpu":
                print(f"on {done['platform']} XLA's CPU scheduler changes nothing: the pairs ran once", flush=True)
                break
    if args.seeds:
        rows += in_child("seeds", "off", argv)["rows"]
    write_results(
        "ppo_speed",
        rows,
        out_dir=args.out,
        columns=["run", "CPU scheduler", "compile (s)", "run (s)", "steps/s", "x stripped", "x stripped, range",
                 "thread switches / update", "wall per seed (s)", "final return", "invalid rate"],
        extra={"envs": args.envs, "timesteps": args.timesteps, "min_updates": args.min_updates, "rounds": args.rounds,
               "features": args.features, "vault_timesteps": args.vault_timesteps, "seeds": args.seeds,
               "schedulers": args.schedulers},
    )


if __name__ == "__main__":
    main()
