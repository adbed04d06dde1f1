"""The one run object (labcore.training_run.TrainingRun) that loop.train and every host-driven driver go
through: the summary's first entries, the folder, the plot, the result type and the default of log_every."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import pytest

from labcore import loop, training_run
from labcore.logging import read_metrics
from labcore.training_run import TrainingRun

SHARED = ["env", "seeds", "timesteps", "updates", "compile_s", "run_s", "steps_per_second", "final_episode_return"]


@dataclasses.dataclass(frozen=True)
class Config:
    env_id: str = "Count-v0"
    seed: int = 0


@pytest.mark.parametrize("updates, every", [(0, 1), (1, 1), (199, 1), (200, 2), (1_000, 10), (30_000, 300)])
def test_log_every_defaults_to_about_a_hundred_rows(updates, every):
    assert training_run.default_log_every(updates) == every


def test_the_shared_entries_come_first_in_one_order():
    rows = [{"update": u, "episode_return": float(u)} for u in range(1, 21)] + [{"update": 21, "episode_return": None}]
    summary = training_run.run_summary(Config(), rows, updates=21, steps=84, steps_run=40, compile_s=None, run_s=2.0)
    assert list(summary) == SHARED
    assert summary["timesteps"] == 84 and summary["compile_s"] is None and summary["steps_per_second"] == 20.0
    assert summary["final_episode_return"] == 19.5  # the last tenth of the returns logged
    other = training_run.run_summary(Config(), [{"update": 1, "l1": 0.5}], updates=1, steps=8, steps_run=8,
                                     compile_s=0.123, run_s=0.0, seeds=3, unit="trajectory", unit_plural="trajectories")
    assert other == {"env": "Count-v0", "seeds": 3, "trajectories": 8, "updates": 1, "compile_s": 0.12, "run_s": 0.0,
                     "trajectories_per_second": None}  # no episode return in the rows: no final one


def test_a_host_run_writes_the_folder_loop_train_writes(tmp_path):
    host = TrainingRun.open(tmp_path, Config(), name="counting", total_steps=40, shown={"ret": "episode_return"})
    assert host.count_key == "timesteps" and host.folder.awaiting_restore is False
    host.start(steps=0)
    for update in range(1, 11):
        host.advance(4 * update)
        if update % 5 == 0:
            row = host.log(update, {"episode_return": float(update), "loss": 1.0 / update}, steps=4 * update)
            assert list(row)[:2] == ["update", "timesteps"]
    host.stop()
    result = host.finish("the state", updates=10, steps=40, compile_s=1.5, extra={"episodes": 3},
                         evaluation={"eval_return_mean": 9.0})
    assert isinstance(result, training_run.RunResult) and result.state == "the state" and result.run_dir == str(tmp_path)
    assert list(result.summary) == [*SHARED, "episodes", "eval_return_mean"]
    assert (result.summary["timesteps"], result.summary["updates"], result.summary["compile_s"]) == (40, 10, 1.5)
    assert json.loads((tmp_path / "summary.json").read_text()) == result.summary
    assert read_metrics(tmp_path) == result.metrics == [
        {"update": 5, "timesteps": 20, "episode_return": 5.0, "loss": 0.2},
        {"update": 10, "timesteps": 40, "episode_return": 10.0, "loss": 0.1}]
    assert (tmp_path / "metrics.png").is_file() and (tmp_path / "config.json").is_file()


def test_a_host_run_of_another_unit_counts_it_by_name():
    host = TrainingRun.open(None, Config(), name="sampling", total_steps=80, unit="trajectory",
                            unit_plural="trajectories", x_key="update", progress=False)
    host.start()
    host.log(1, {"l1": 0.4}, steps=8)
    host.log(2, {"l1": 0.3})  # a driver whose rows hold no count
    result = host.finish(None, updates=2, steps=16, run_s=4.0)
    assert result.metrics == [{"update": 1, "trajectories": 8, "l1": 0.4}, {"update": 2, "l1": 0.3}]
    assert result.summary["trajectories"] == 16 and result.summary["trajectories_per_second"] == 4.0
    assert "final_episode_return" not in result.summary and result.run_dir is None


def counting_program(config: Config, callback=None, log_every: int = 1) -> loop.Program:
    """250 updates of 4 steps; the rows are logged after each chunk (no callback)."""

    def run(state, n):
        def update(count, _):
            return count + 1, {"timesteps": 4 * (count + 1), "episode_return": (count + 1).astype(jnp.float32)}

        return jax.lax.scan(update, state, None, length=n)

    return loop.Program(config=config, init=lambda key: jnp.int32(0), run=run, updates_done=int, num_updates=250,
                        steps_per_update=4, name="counting", streams_metrics=False)


def test_loop_train_logs_about_a_hundred_rows_by_default_and_writes_the_shared_entries():
    result = loop.train(Config(), counting_program, progress=False)
    assert [row["update"] for row in result.metrics] == list(range(2, 251, 2))  # 250 // 100
    assert list(result.summary) == SHARED and result.summary["timesteps"] == 1_000
    explicit = loop.train(Config(), counting_program, log_every=50, progress=False)
    assert [row["update"] for row in explicit.metrics] == [50, 100, 150, 200, 250]


def test_the_run_options_are_loop_trains_keywords_and_the_command_lines_flags():
    import argparse
    import inspect

    from labcore import __main__ as cli

    keywords = inspect.signature(loop.train).parameters
    for option in dataclasses.fields(training_run.RunOptions):
        assert keywords[option.name].default == option.default, option.name
    assert set(training_run.HOST_OPTIONS) | set(training_run.PROGRAM_OPTIONS) == set(training_run.RUN_OPTIONS)
    assert "resume" in training_run.PROGRAM_OPTIONS and "overwrite" in training_run.HOST_OPTIONS
    parser = argparse.ArgumentParser()
    cli._add_run_option_flags(parser)
    flags = {flag for action in parser._actions for flag in action.option_strings} - {"-h", "--help"}
    said = {option.metadata["flag"] for option in dataclasses.fields(training_run.RunOptions)} - {None}
    assert flags == said | {"--no-tensorboard"}
    given = vars(parser.parse_args(["--no-eval", "--no-progress", "--no-tensorboard", "--resume", "--seeds", "3"]))
    assert given == {"log_every": None, "checkpoint_every": None, "resume": True, "overwrite": False, "progress": False,
                     "tensorboard": False, "evaluate": False, "seeds": 3}


def test_a_host_trainer_refuses_what_only_a_checkpointed_program_honours_by_the_setting_that_chose_it():
    training_run.refuse_program_options({"overwrite": True, "progress": False}, "mode", "pytorch", "the fused mode")
    with pytest.raises(ValueError, match=r"^mode: checkpoint_every, resume need the fused mode; the 'pytorch' mode"):
        training_run.refuse_program_options({"resume": True, "checkpoint_every": 5}, "mode", "pytorch", "the fused mode")
    with pytest.raises(TypeError, match="unexpected keyword arguments"):
        training_run.refuse_program_options({"checkpoints": 5}, "mode", "pytorch", "the fused mode")
