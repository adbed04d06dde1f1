"""PQN on Atari from pixels: long training runs on this machine, resumable, and the curve they leave.

    python benchmarks/atari.py train --runs ~/atari-runs --seeds 0 1 2           # hours on a 2-core CPU
    python benchmarks/atari.py train --runs ~/atari-runs --seeds 0 --preset atari_dopamine
    python benchmarks/atari.py curve --runs ~/atari-runs                          # docs/results/atari_breakout.json

``train`` runs ``PQNConfig.<preset>(env_id)`` through ``labcore.agents.pqn.train`` (the same driver
as ``python -m labcore train pqn --preset atari``) into ``RUNS/<preset>-<game>-seed<k>``, one seed
after another, with a checkpoint and an evaluation (32 whole games at epsilon 0.001) every
``--eval-every`` updates (61 updates of 4,096 agent steps: about 1M frames). Run it again after an
interruption and each run goes on from its newest checkpoint (a finished run is skipped), so it can
run in slices, e.g. ``--max-minutes 9`` on a machine lent for ten minutes at a time. Keep the run
folders outside the repository: they hold checkpoints.

``curve`` reads the run folders and writes the small file the results page renders from: per seed,
the mean return of every training game (all five lives, the game's points) that ended in each
1M-frame block, the evaluations, wall time and throughput.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

FRAMES_PER_STEP = 4  # ALE's action repeat: one agent step is 4 frames
BLOCK_FRAMES = 1_000_000  # Dopamine's iteration: 250,000 agent steps
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "atari_breakout.json"


def run_folder(runs: Path, preset: str, env_id: str, seed: int) -> Path:
    game = env_id.split("/")[-1].split("-")[0].lower()
    return runs / f"{preset}-{game}-seed{seed}"


def train(args: argparse.Namespace) -> int:
    from labcore.agents import pqn

    overrides = {} if args.frames is None else {"total_steps": args.frames // FRAMES_PER_STEP}
    if args.env_stepping:
        overrides["env_stepping"] = args.env_stepping
    for seed in args.seeds:
        config = getattr(pqn.Config, args.preset)(args.env, seed=seed, **overrides)
        folder = run_folder(args.runs, args.preset, args.env, seed)
        if (folder / "summary.json").exists():
            print(f"{folder}: finished", flush=True)
            continue
        resume = (folder / "checkpoints").exists() and any((folder / "checkpoints").iterdir())
        started = time.time()
        deadline = None if args.max_minutes is None else started + 60 * args.max_minutes

        def show(row, folder=folder):
            if int(row["update"]) % 10 == 0:
                print(f"{folder.name} update {int(row['update'])}: return {float(row['episode_return']):.1f} "
                      f"epsilon {float(row['epsilon']):.3f} loss {float(row['loss']):.4f}", flush=True)

        print(f"{folder}: {'resuming' if resume else 'starting'} {config}", flush=True)
        result = pqn.train(config, folder, log_every=1, checkpoint_every=args.eval_every, eval_every=args.eval_every,
                           resume=resume, progress=False, on_metrics=show, stop_after_s=None if deadline is None
                           else max(0.0, deadline - time.time()))
        print(f"{folder}: {json.dumps(result.summary)}", flush=True)
        if deadline is not None and time.time() >= deadline:
            return 0
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("train", help="train (or go on training) one run per seed")
    run.add_argument("--runs", type=Path, required=True, help="folder of the run folders (outside the repository)")
    run.add_argument("--seeds", type=int, nargs="+", default=[0])
    run.add_argument("--preset", default="atari", choices=("atari", "atari_dopamine"))
    run.add_argument("--env", default="ALE/Breakout-v5")
    run.add_argument("--frames", type=int, default=None, help="frames per run (default: the preset's 10M)")
    run.add_argument("--eval-every", type=int, default=61, help="updates between checkpoints and evaluations")
    run.add_argument("--env-stepping", default=None, choices=("xla", "callback"))
    run.add_argument("--max-minutes", type=float, default=None,
                     help="stop after about this many minutes (after a checkpoint); the same command goes on")
    args = parser.parse_args(argv)
    if args.command == "train":
        return train(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
