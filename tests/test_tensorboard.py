"""TensorBoard event files: MetricsLogger writes them, every trainer's run folder holds them, and
TensorBoard's own reader gets back exactly the rows of metrics.jsonl (steps and float32 values).

Each trainer runs the smallest budget that logs a few rows with a loss in them; the comparison is
against the run's own metrics.jsonl, so any row, key, step or value that goes missing, moves or
changes fails it.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import pytest

from labcore import runs
from labcore.logging import (MetricsLogger, _scalar_events, event_files, read_metrics, read_tensorboard_scalars,
                             rebuild_tensorboard)


def expected_scalars(rows: list[dict], step_key: str) -> dict[str, list[tuple[int, float]]]:
    """What the event files should hold for ``rows``: every number but the step, as float32, at the row's step."""
    expected: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for key, value in row.items():
            if key != step_key and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                expected.setdefault(key, []).append((row[step_key], float(np.float32(value))))
    return expected


def assert_mirrors_jsonl(run_dir, step_key: str, must_have: tuple[str, ...]) -> dict:
    rows = read_metrics(run_dir)
    scalars = read_tensorboard_scalars(run_dir)
    assert scalars == expected_scalars(rows, step_key)
    for key in must_have:  # the comparison is not vacuous: these were written, at more than one step
        assert len(scalars[key]) >= 2, (key, scalars.get(key))
    return scalars


@dataclasses.dataclass(frozen=True)
class Config:
    seed: int = 0


LIKE = {"x": [0.0]}  # the structure fake_checkpoint saves


def fake_checkpoint(run_path, step: int) -> None:
    from labcore import checkpoint

    checkpoint.save(run_path / "checkpoints", step, {"x": [1.0]}, {"config": runs.config_dict(Config())})


# ----------------------------------------------------------------------------------------------
# MetricsLogger and RunDir


def test_every_number_but_the_step_becomes_a_scalar_at_the_rows_step(tmp_path):
    with MetricsLogger(tmp_path, step_key="update") as logger:
        logger.log({"update": 1, "loss": np.float32(0.1), "count": 7, "none": None, "nan": float("nan"),
                    "inf": float("inf"), "text": "a", "list": [1, 2], "flag": True})
        logger.log({"update": 2, "loss": 0.2, "nan": 3.5})
        logger.log({"loss": 0.3})  # no step: in the JSONL only
    assert read_tensorboard_scalars(tmp_path) == {
        "loss": [(1, float(np.float32(0.1))), (2, float(np.float32(0.2)))], "count": [(1, 7.0)], "nan": [(2, 3.5)]}
    assert len(read_metrics(tmp_path)) == 3 and len(event_files(tmp_path)) == 1
    MetricsLogger(tmp_path / "off", tensorboard=False).log({"step": 1, "loss": 1.0})
    assert (tmp_path / "off" / "metrics.jsonl").exists() and event_files(tmp_path / "off") == []
    MetricsLogger(tmp_path / "no_numbers").log({"step": 1, "note": "x"})
    assert event_files(tmp_path / "no_numbers") == []  # the writer opens at the first number


def test_a_row_is_readable_before_the_logger_is_closed(tmp_path):
    logger = MetricsLogger(tmp_path)
    for step in (1, 2, 3):
        logger.log({"step": step, "loss": step / 4})
    deadline = time.monotonic() + 10.0  # the writer's thread puts points on disk within about a second
    while read_tensorboard_scalars(tmp_path).get("loss") != [(1, 0.25), (2, 0.5), (3, 0.75)]:
        assert time.monotonic() < deadline, read_tensorboard_scalars(tmp_path)
        time.sleep(0.05)
    logger.close()


def test_a_logger_never_closed_closes_its_writer_when_collected(tmp_path):
    # What a driver that raised, or an interrupted notebook cell, leaves behind.
    import gc
    import threading

    before = set(threading.enumerate())
    logger = MetricsLogger(tmp_path)
    logger.log({"step": 1, "loss": 0.5})
    started = set(threading.enumerate()) - before
    assert started, "the writer runs a thread"
    del logger
    gc.collect()
    for thread in started:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in started)
    assert read_tensorboard_scalars(tmp_path) == {"loss": [(1, 0.5)]}


def test_a_resumed_run_rebuilds_its_event_files_from_the_cut_jsonl(tmp_path):
    run = runs.RunDir.open(tmp_path, Config(), step_key="update")
    for update in (1, 2, 3):
        run.log({"update": update, "loss": update / 10})
    run.logger.close()
    first_wall_time = _scalar_events(tmp_path)["loss"][0].wall_time
    # the killed process's last points never reached its event file: rows 4 and 5 are in the JSONL only
    killed = MetricsLogger(tmp_path, tensorboard=False, step_key="update")
    killed.log({"update": 4, "loss": 0.4})
    killed.log({"update": 5, "loss": 0.5})
    fake_checkpoint(tmp_path, 4)
    resumed = runs.RunDir.open(tmp_path, Config(), step_key="update", resume=True, like=LIKE)
    # rebuilt: row 5 (past the checkpoint) cut, row 4 (lost by the writer) back, wall times kept
    assert read_tensorboard_scalars(tmp_path) == {"loss": [(1, float(np.float32(0.1))), (2, float(np.float32(0.2))),
                                                           (3, float(np.float32(0.3))), (4, float(np.float32(0.4)))]}
    assert _scalar_events(tmp_path)["loss"][0].wall_time == first_wall_time
    resumed.log({"update": 5, "loss": 0.55})
    resumed.finish()
    assert [step for step, _ in read_tensorboard_scalars(tmp_path)["loss"]] == [1, 2, 3, 4, 5]
    assert_mirrors_jsonl(tmp_path, "update", ("loss",))
    # resumed without TensorBoard: no event files left that disagree with the JSONL
    runs.RunDir.open(tmp_path, Config(), step_key="update", resume=True, tensorboard=False, like=LIKE)
    assert event_files(tmp_path) == []
    assert rebuild_tensorboard(tmp_path, "update") == 4  # and they can be written again from it


def test_event_files_are_part_of_an_earlier_run(tmp_path):
    MetricsLogger(tmp_path, step_key="update").log({"update": 1, "loss": 1.0})
    (tmp_path / "metrics.jsonl").unlink()
    (tmp_path / "metrics.csv").unlink()
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="events.out.tfevents"):
        runs.RunDir.open(tmp_path, Config(), step_key="update")
    run = runs.RunDir.open(tmp_path, Config(), step_key="update", overwrite=True)
    assert event_files(tmp_path) == [] and (tmp_path / "notes.txt").read_text() == "mine"
    run.log({"update": 2, "loss": 2.0})
    run.finish()
    assert read_tensorboard_scalars(tmp_path) == {"loss": [(2, 2.0)]}


# ----------------------------------------------------------------------------------------------
# Every trainer, for real


def test_dqn_run_folder_mirrors_its_metrics_in_tensorboard(tmp_path):
    from labcore.agents.dqn import core as dqn
    from labcore.agents.dqn import host_loop as dqn_loop

    config = dqn.DQNConfig(total_steps=600, buffer_size=500, batch_size=32, learning_starts=200, hidden_sizes=(16,))
    result = dqn_loop.train(config, run_dir=tmp_path, log_every=10, progress=False)  # updates of 10 agent steps
    # at their agent step: the host loop's checkpoints, which a resume cuts the rows at, count agent steps
    scalars = assert_mirrors_jsonl(tmp_path, "timesteps", ("loss", "epsilon", "steps_per_second", "update"))
    assert [step for step, _ in scalars["epsilon"]] == [100, 200, 300, 400, 500, 600]
    assert [update for _, update in scalars["update"]] == [10, 20, 30, 40, 50, 60]
    assert len(result.metrics) == 6


def test_ppo_run_folder_mirrors_its_metrics_in_tensorboard(tmp_path):
    from labcore.agents.ppo import core as ppo
    from labcore.agents.ppo import run as ppo_run

    config = ppo.PPOConfig(env_id="Vault-v0", num_envs=8, num_steps=16, total_steps=8 * 16 * 4, hidden_size=16)
    ppo_run.train(config, tmp_path, log_every=1, progress=False, evaluate=False)
    scalars = assert_mirrors_jsonl(tmp_path, "update", ("entropy", "value_loss", "timesteps"))
    assert [step for step, _ in scalars["timesteps"]] == [1, 2, 3, 4]


def test_iqn_run_folder_mirrors_its_metrics_in_tensorboard(tmp_path):
    from labcore.agents.iqn import run as iqn_run
    from labcore.agents.iqn.run_config import IQNRunConfig

    # the pytorch mode: no compile. Training starts in the fourth epoch, so updates 1-3 have no loss
    # (None: in the JSONL, not in TensorBoard); gems_per_world is a list (JSONL only).
    config = IQNRunConfig(mode="pytorch", epochs=6, height=8, width=8, n_agents=3, vision_radius=1, max_turns=20, n_frames=2,
                          hidden_size=16, n_quantiles=4, n_tau_act=8, buffer_size=512, batch_size=64)
    iqn_run.train(config, run_dir=tmp_path, log_every=1, progress=False, evaluate=False)
    scalars = assert_mirrors_jsonl(tmp_path, "update", ("gems", "loss", "epsilon"))
    assert [step for step, _ in scalars["loss"]] == [4, 5, 6] and "gems_per_world" not in scalars


def test_gflownet_run_folder_mirrors_its_metrics_in_tensorboard(tmp_path):
    from labcore.agents import gflownet

    config = gflownet.Config(trainer="torch", loss="tb", ndim=2, height=4, iterations=30, batch_size=16, hidden_size=16,
                             l1_samples=200)
    gflownet.train(config, tmp_path, log_every=10, evaluate=False)
    scalars = assert_mirrors_jsonl(tmp_path, "update", ("loss", "l1"))
    assert [step for step, _ in scalars["l1"]] == [10, 20, 30]
