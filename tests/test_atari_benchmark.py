"""benchmarks/atari.py at a size a test affords: the long run's slices (stop at a checkpoint, the same
command goes on), the finished run skipped, the recorded curve file; and make bench-device PART=atari."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "atari.py"
TINY = ["--frames", str(4 * 8 * 8 * 6), "--eval-every", "2",
        "--set", "num_envs=8", "num_steps=8", "num_minibatches=2", "update_epochs=1", "max_episode_steps=40", "eval_episodes=2"]


def atari(*args):
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.end_to_end
def test_the_long_run_goes_in_slices_then_leaves_its_curve(tmp_path):
    runs = tmp_path / "runs"
    first = atari("train", "--runs", str(runs), "--max-seconds", "0", *TINY)  # 6 updates: a checkpoint every 2
    assert "stopped at the budget" in first
    folder = runs / "atari-breakout-seed0"
    assert not (folder / "summary.json").exists() and sorted(p.name for p in (folder / "checkpoints").iterdir()) == ["2"]
    second = atari("train", "--runs", str(runs), "--max-seconds", "0", *TINY)
    assert "resuming" in second and sorted(p.name for p in (folder / "checkpoints").iterdir()) == ["2", "4"]
    atari("train", "--runs", str(runs), *TINY)  # goes on to the end
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["timesteps"] == 6 * 64 and summary["env_stepping"] in ("xla", "callback")
    assert "finished" in atari("train", "--runs", str(runs), *TINY)

    out = tmp_path / "curve.json"
    atari("curve", "--runs", str(runs), "--out", str(out), "--machine", "a test machine", "--date", "2026-01-01")
    curve = json.loads(out.read_text())
    (run,) = curve["runs"]
    assert run["frames"] == 6 * 64 * 4 and [e["frames"] for e in run["evaluations"]] == [2 * 256, 4 * 256, 6 * 256]
    assert all(block["games"] > 0 for block in run["blocks"]) and curve["machine"] == "a test machine"
    assert curve["protocol_short"] == "a lost life terminal" and curve["config"]["num_envs"] == 8
    # trained in three calls: the time is every call's (summary.json holds the last call's only)
    calls = [json.loads(line) for line in (folder / "calls.jsonl").read_text().splitlines()]
    assert run["calls"] == len(calls) == 3 and [call["updates_to"] for call in calls] == [2, 4, 6]
    # each call's steps are its rate (rounded to 0.1 step/s) times its seconds: exact to within a step or two
    assert sum(call["steps_run"] for call in calls) == pytest.approx(6 * 64, abs=3)
    assert run["train_s"] == pytest.approx(sum(call["compile_s"] + call["run_s"] for call in calls), abs=0.2)
    assert run["train_s"] > summary["compile_s"] + summary["run_s"] and run["wall_s"] >= run["train_s"]


def test_block_returns_weight_each_update_by_its_games():
    sys.path.insert(0, str(SCRIPT.parent))
    import atari as benchmark

    rows = [{"update": 1, "timesteps": 100_000, "episodes": 2, "episode_return": 3.0},
            {"update": 2, "timesteps": 250_000, "episodes": 1, "episode_return": 6.0},  # ends at frame 1,000,000: still the first block
            {"update": 3, "timesteps": 250_001, "episodes": 0, "episode_return": None},
            {"update": 3, "timesteps": 250_001, "eval_return_mean": 99.0},  # an evaluation row: not a training game
            {"update": 4, "timesteps": 400_000, "episodes": 4, "episode_return": 10.0}]
    assert benchmark.block_returns(rows) == [{"frames_end": 1_000_000, "games": 3, "mean_return": 4.0},
                                             {"frames_end": 2_000_000, "games": 4, "mean_return": 10.0}]


def test_make_bench_device_part_atari_runs_the_long_run_a_slice_a_call():
    done = subprocess.run(["make", "-n", "bench-device", "PART=atari", "BUDGET=540"], capture_output=True, text=True, cwd=REPO)
    assert "benchmarks/atari.py train --runs runs/atari --frames 40000000 --max-seconds 540" in done.stdout
