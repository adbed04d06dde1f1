"""DQN (the jitted scan) and PQN on MinAtar, side by side in one run: curves, wall time, time to a score.

For each game, each algorithm trains ``--seeds`` seeds at once (``labcore.course.curves``: a point of the
learning curve against env steps and against wall time at each chunk's end, compiles apart):

* DQN: ``DQNConfig.minatar`` (the MinAtar paper's DQN: one update of 32 transitions per agent
  step, a 100k replay, a target network), ``labcore.agents.dqn.scan``;
* PQN: ``PQNConfig.minatar`` (the PQN paper's settings: 128 envs x 32 steps, LayerNorm,
  Q(lambda)), ``labcore.agents.pqn.core``.

Beside each run: the MinAtar paper's DQN at the same env steps (``labcore.course.published``), and the
time to ``--score`` (default: the published DQN return at ``--pqn-steps``; a run that never
reaches it says so). Three seeds of DQN cannot run long enough here to reach that, so ``--race``
times one seed of each to a lower fixed score, side by side, each stopping at the first chunk
(10k env steps for DQN, 8 updates for PQN) that reaches it: the wall-time ratio at equal score.

    python benchmarks/minatar.py                                   # the curves of docs/results/pqn.md's table
    python benchmarks/minatar.py --race 5 --games Breakout-MinAtar # docs/results/pqn.md's time to a score
    python benchmarks/minatar.py --games Breakout-MinAtar --pqn-steps 200000 --dqn-steps 20000

Writes benchmarks/results/minatar.json (curves included) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import os

# Before jax is imported: jax 0.10.2 on the CPU can hang after compiling a vmapped training run
# with its concurrency-optimised scheduler (labcore/__main__.py says more); this setting avoids it.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_concurrency_optimized_scheduler=false").strip()
os.environ["LABCORE_COMPILATION_CACHE"] = "0"  # compile times are real compiles

from labcore.course import curves, published  # noqa: E402
from labcore.agents.dqn.core import DQNConfig  # noqa: E402
from labcore.agents.pqn.core import PQNConfig  # noqa: E402
from labcore.tools.benchmarking import write_results  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", nargs="+", default=["Breakout-MinAtar", "SpaceInvaders-MinAtar"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--pqn-steps", type=int, default=1_000_000)
    parser.add_argument("--dqn-steps", type=int, default=100_000)
    parser.add_argument("--chunks", type=int, default=10, help="curve points per run")
    parser.add_argument("--score", type=float, default=None,
                        help="time-to-score threshold (default: each game's published DQN return at --pqn-steps)")
    parser.add_argument("--race", type=float, default=None, metavar="SCORE",
                        help="instead: one seed of each until its return reaches SCORE (DQN at most --race-dqn-steps)")
    parser.add_argument("--race-dqn-steps", type=int, default=400_000)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    if args.race is not None:
        return race(args)

    rows, runs = [], {}
    for env_id in args.games:
        pqn_run = curves.pqn_curve(PQNConfig.minatar(env_id, total_steps=args.pqn_steps), args.seeds, args.chunks)
        dqn_run = curves.dqn_scan_curve(DQNConfig.minatar(env_id, total_steps=args.dqn_steps), args.seeds, args.chunks)
        published_curve = published.MINATAR_DQN.get(env_id, ())
        score = args.score if args.score is not None else published.at(published_curve, args.pqn_steps)
        dqn_final = dqn_run.mean_return[-1]
        for run in (pqn_run, dqn_run):
            steps, wall = run.env_steps[-1], run.wall_s[-1]
            reached_steps, reached_s = run.time_to(score) if score is not None else (None, None)
            rows.append({
                "game": env_id, "algorithm": run.name, "seeds": run.seeds, "env steps": steps,
                "compile (s)": run.compile_s, "wall (s)": wall, "env steps/s (all seeds)": run.seeds * steps / wall,
                "final training return": run.mean_return[-1],
                "published DQN at these steps": published.at(published_curve, steps),
                "greedy return": run.greedy_return, "score": score,
                "steps to score": reached_steps, "seconds to score": reached_s,
                "seconds to DQN's final return": run.time_to(dqn_final)[1],
            })  # fmt: skip
            runs[f"{env_id} {run.name}"] = run.as_dict()
            print(rows[-1], flush=True)
        pqn_row, dqn_row = rows[-2], rows[-1]
        dqn_row["seconds to DQN's final return"] = dqn_row["wall (s)"]  # where its curve ends
        if pqn_row["seconds to DQN's final return"]:
            pqn_row["DQN / PQN seconds to DQN's final return"] = dqn_row["wall (s)"] / pqn_row["seconds to DQN's final return"]
        if pqn_row["seconds to score"]:
            pqn_row["DQN / PQN seconds to score"] = (dqn_row["seconds to score"] or dqn_row["wall (s)"]) / pqn_row["seconds to score"]
            pqn_row["that ratio is a lower bound"] = dqn_row["seconds to score"] is None
    write_results("minatar", rows, out_dir=args.out, extra={"curves": runs, "args": vars(args),
                                                             "published_source": published.MINATAR_SOURCE})


def race(args: argparse.Namespace) -> None:
    """One seed of PQN (the 1M-step MinAtar config) and of DQN, each until it reaches args.race."""
    rows, runs = [], {}
    for env_id in args.games:
        pqn_config = PQNConfig.minatar(env_id, total_steps=args.pqn_steps)
        dqn_config = DQNConfig.minatar(env_id, total_steps=args.race_dqn_steps)
        pqn_run = curves.pqn_curve(pqn_config, seeds=1, chunks=pqn_config.num_updates // 8, stop_at=args.race)
        dqn_chunks = (args.race_dqn_steps - dqn_config.learning_starts) // 10_000
        dqn_run = curves.dqn_scan_curve(dqn_config, seeds=1, chunks=dqn_chunks, stop_at=args.race)
        for run in (pqn_run, dqn_run):
            steps, seconds = run.time_to(args.race)
            rows.append({"game": env_id, "algorithm": run.name, "score": args.race, "reached": steps is not None,
                         "env steps": steps or run.env_steps[-1], "seconds": seconds or run.wall_s[-1],
                         "compile (s)": run.compile_s, "env steps/s": run.env_steps[-1] / run.wall_s[-1]})
            runs[f"{env_id} {run.name}"] = run.as_dict()
            print(rows[-1], flush=True)
        rows[-2]["DQN / PQN seconds"] = rows[-1]["seconds"] / rows[-2]["seconds"]
        rows[-2]["DQN / PQN env steps"] = rows[-1]["env steps"] / rows[-2]["env steps"]
    write_results("minatar_race", rows, out_dir=args.out, extra={"curves": runs, "args": vars(args)})


if __name__ == "__main__":
    main()
