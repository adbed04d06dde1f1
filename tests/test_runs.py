"""labcore.runs.RunDir, and every driver that resumes, killed for real and resumed from the command line.

The kill tests start a run in a subprocess, wait (polling the files, no fixed sleeps) until a
checkpoint exists and at least one metrics row was logged after it, SIGKILL every process of the
run, resume it with --resume and check that metrics.jsonl and metrics.csv hold each update or step
exactly once, in order, ending at the last one: one uninterrupted run; and that the TensorBoard event
files hold the same rows (the killed writer's are rebuilt from the cut JSONL on resume).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labcore import run_lock, runs
from labcore.logging import MetricsLogger, cut_metrics, read_metrics
from conftest import descendants
from test_tensorboard import assert_mirrors_jsonl


@dataclasses.dataclass(frozen=True)
class Config:
    seed: int = 0
    sizes: tuple[int, ...] = (8, 8)


LIKE = {"x": [0.0, 0.0]}  # the structure fake_checkpoint saves


def fake_checkpoint(run_path: Path, step: int, config, x: float = 1.0) -> None:
    from labcore import checkpoint

    checkpoint.save(run_path / "checkpoints", step, {"x": [x, 2.0]}, {"config": runs.config_dict(config)})


def write_rows(run_path: Path, steps, key="update") -> None:
    logger = MetricsLogger(run_path)
    for step in steps:
        logger.log({key: step, "loss": step / 10})


def csv_column(run_path: Path, key: str) -> list[float]:
    with open(run_path / "metrics.csv", newline="") as f:
        return [float(row[key]) for row in csv.DictReader(f)]


# ----------------------------------------------------------------------------------------------
# RunDir


def test_open_writes_the_config_and_refuses_an_earlier_run(tmp_path):
    run = runs.RunDir.open(tmp_path / "run", Config(), step_key="update")
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == {"seed": 0, "sizes": [8, 8]}
    assert run.checkpoints == tmp_path / "run" / "checkpoints" and run.resume_step is None
    run.log({"update": 1, "loss": 0.5})
    run.finish({"final": 1.0})
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == {"final": 1.0}
    assert read_metrics(tmp_path / "run") == [{"update": 1, "loss": 0.5}] == run.rows == run.history()
    with pytest.raises(FileExistsError, match="holds an earlier run"):
        runs.RunDir.open(tmp_path / "run", Config(), step_key="update")
    for name in ("metrics.jsonl", "summary.json", "metrics.csv"):  # any one run file is enough to refuse
        lone = tmp_path / f"lone-{name}"
        lone.mkdir()
        (lone / name).write_text("")
        with pytest.raises(FileExistsError, match=name.replace(".", r"\.")):
            runs.RunDir.open(lone, Config(), step_key="update")
    with pytest.raises(ValueError, match="exclude each other"):
        runs.RunDir.open(tmp_path / "run", Config(), step_key="update", resume=True, overwrite=True)


def test_overwrite_deletes_the_run_files_and_only_those(tmp_path):
    run_path = tmp_path / "run"
    fake_checkpoint(run_path, 3, Config())
    write_rows(run_path, [1, 2, 3])
    for name in ("config.json", "summary.json", "metrics.png"):
        (run_path / name).write_text("old")
    (run_path / "notes.txt").write_text("mine")
    (run_path / "data").mkdir()
    run = runs.RunDir.open(run_path, Config(seed=1), step_key="update", overwrite=True)
    assert sorted(p.name for p in run_path.iterdir()) == [run_lock.LOCK_NAME, "config.json", "data", "notes.txt"]
    assert json.loads((run_path / "config.json").read_text())["seed"] == 1
    assert (run_path / "notes.txt").read_text() == "mine"
    run.log({"update": 1})
    assert read_metrics(run_path) == [{"update": 1}]  # a new run, not appended to the old one


def test_resume_needs_a_checkpoint_written_with_the_same_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        runs.RunDir.open(tmp_path / "empty", Config(), step_key="update", resume=True)
    with pytest.raises(FileNotFoundError, match="no run folder"):
        runs.RunDir.open(None, Config(), step_key="update", resume=True)
    run_path = tmp_path / "run"
    write_rows(run_path, [1, 2, 3])
    with pytest.raises(FileNotFoundError, match="no checkpoint"):  # rows, but no checkpoint
        runs.RunDir.open(run_path, Config(), step_key="update", resume=True)
    fake_checkpoint(run_path, 2, Config())
    with pytest.raises(ValueError, match=r"different config: \['seed', 'sizes'\]"):
        runs.RunDir.open(run_path, Config(seed=1, sizes=(4,)), step_key="update", resume=True)
    assert [row["update"] for row in read_metrics(run_path)] == [1, 2, 3]  # refused before touching anything
    run = runs.RunDir.open(run_path, Config(), step_key="update", resume=True)
    assert run.resume_step is None and run.restored is None  # nothing read or cut until restore()
    assert [row["update"] for row in read_metrics(run_path)] == [1, 2, 3]
    with pytest.raises(RuntimeError, match="only after restore"):
        run.log({"update": 3})
    assert run.restore(LIKE) is run and run.resume_step == 2
    assert float(run.restored[0]["x"][0]) == 1.0 and run.restored[1]["config"] == {"seed": 0, "sizes": [8, 8]}
    assert [row["update"] for row in read_metrics(run_path)] == [1, 2]
    run.log({"update": 3, "loss": 0.3})
    assert [row["update"] for row in run.history()] == [1, 2, 3] and run.rows == [{"update": 3, "loss": 0.3}]
    assert csv_column(run_path, "update") == [1, 2, 3]


def test_cut_metrics_drops_rows_past_the_step_in_jsonl_and_csv(tmp_path):
    write_rows(tmp_path, [1, 2, 3, 4, 5])
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"note": "no step"}\n')
    assert cut_metrics(tmp_path, "update", 3) == 2
    assert [row.get("update") for row in read_metrics(tmp_path)] == [1, 2, 3, None]  # a row without the key stays
    assert csv_column(tmp_path, "update") == [1, 2, 3]
    assert (tmp_path / "metrics.csv").read_text().splitlines()[0] == "update,loss"
    assert cut_metrics(tmp_path, "update", 0) == 3
    assert [row.get("update") for row in read_metrics(tmp_path)] == [None]
    assert (tmp_path / "metrics.csv").read_text().splitlines() == ["update,loss"]  # the header stays
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("cut_at", [3, 6, 9, 12, 15])
def test_cut_metrics_tolerates_a_last_line_cut_short_by_a_kill(tmp_path, cut_at):
    write_rows(tmp_path, [1, 2, 3])
    for name, line in (("metrics.jsonl", '{"update": 4, "loss": 0.4}'), ("metrics.csv", "4,0.4")):
        with open(tmp_path / name, "a") as f:
            f.write(line[: min(cut_at, len(line))])  # no newline: killed mid-write
    cut_metrics(tmp_path, "update", 3)
    assert [row["update"] for row in read_metrics(tmp_path)] == [1, 2, 3]
    assert csv_column(tmp_path, "update") == [1, 2, 3]
    # and the files go on as before: the next row starts a line of its own
    logger = MetricsLogger(tmp_path)
    logger.log({"update": 4, "loss": 0.4})
    assert [row["update"] for row in read_metrics(tmp_path)] == [1, 2, 3, 4]
    assert csv_column(tmp_path, "update") == [1, 2, 3, 4]


def test_cut_metrics_on_a_header_cut_short_leaves_an_empty_csv(tmp_path):
    (tmp_path / "metrics.csv").write_text("upd")
    cut_metrics(tmp_path, "update", 3)
    assert (tmp_path / "metrics.csv").read_text() == ""
    MetricsLogger(tmp_path).log({"update": 4})
    assert csv_column(tmp_path, "update") == [4]


def test_an_in_memory_run_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = runs.RunDir.open(None, Config(), step_key="update")
    assert run.path is None and run.checkpoints is None and run.resume_step is None
    run.log({"update": 1, "loss": float("nan")})
    plotted = []
    run.finish({"final": 1}, lambda rows: plotted.append(rows))
    assert run.rows == run.history() == [{"update": 1, "loss": None}]
    assert plotted == [] and list(tmp_path.iterdir()) == []  # nothing to write the plot to: not even drawn


def test_finish_plots_the_whole_history_of_a_resumed_run(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from labcore.logging import plot_metrics

    write_rows(tmp_path, [1, 2, 3])
    fake_checkpoint(tmp_path, 2, Config())
    run = runs.RunDir.open(tmp_path, Config(), step_key="update", resume=True, like=LIKE)
    run.log({"update": 3, "loss": 0.3})
    seen = []
    run.finish(None, lambda rows: seen.append(rows) or plot_metrics(rows, ["loss"], x_key="update"))
    assert [row["update"] for row in seen[0]] == [1, 2, 3]
    assert (tmp_path / "metrics.png").stat().st_size > 0 and not (tmp_path / "summary.json").exists()


def test_other_processes_of_a_run_read_the_checkpoint_step_and_write_nothing(tmp_path):
    fake_checkpoint(tmp_path, 5, Config())
    write_rows(tmp_path, [4, 5, 6])
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    other = runs.RunDir.open(tmp_path, Config(), step_key="update", resume=True, primary=False, like=LIKE)
    assert other.resume_step == 5 and other.checkpoints == tmp_path / "checkpoints"
    other.log({"update": 6})
    other.finish({"x": 1})
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before
    assert [row["update"] for row in read_metrics(tmp_path)] == [4, 5, 6]


def damage(checkpoint_folder: Path, only: str = "") -> None:
    """Flip bytes all through the files of one checkpoint's saved arrays, as a bad disk would
    (orbax's metadata and tensorstore's indexes included, unless ``only`` names the folder to
    damage, such as the array data itself: "ocdbt.process_0/d")."""
    for path in (checkpoint_folder / "state" / only).rglob("*"):
        if path.is_file() and path.stat().st_size > 0:
            data = bytearray(path.read_bytes())
            for i in range(min(16, len(data) // 2), len(data), 7):
                data[i] ^= 0x5A
            path.write_bytes(bytes(data))


def test_a_damaged_newest_checkpoint_is_named_set_aside_and_the_one_before_it_restored(tmp_path, capfd):
    for step in (2, 4):
        fake_checkpoint(tmp_path, step, Config(), x=float(step))
    write_rows(tmp_path, [1, 2, 3, 4, 5])
    damage(tmp_path / "checkpoints" / "4")
    run = runs.RunDir.open(tmp_path, Config(), step_key="update", resume=True, like=LIKE)
    assert run.resume_step == 2 and float(run.restored[0]["x"][0]) == 2.0
    err = capfd.readouterr().err
    damaged = [line for line in err.splitlines() if "is damaged" in line]
    assert len(damaged) == 1 and "checkpoint 4 in" in damaged[0], err
    assert "resuming from checkpoint 2, the newest intact one" in err and "Traceback" not in err
    assert [row["update"] for row in read_metrics(tmp_path)] == [1, 2]  # cut to the checkpoint restored
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()) == ["2"]
    assert (tmp_path / "damaged-checkpoints" / "4").is_dir()  # kept for a look, out of orbax's way
    from labcore import checkpoint

    checkpoint.save(tmp_path / "checkpoints", 4, {"x": [4.5, 2.0]}, {"config": runs.config_dict(Config())})
    assert checkpoint.all_steps(tmp_path / "checkpoints") == [2, 4]  # the resumed run writes step 4 again


def test_no_intact_checkpoint_is_refused_naming_each(tmp_path):
    for step in (2, 4):
        fake_checkpoint(tmp_path, step, Config())
        damage(tmp_path / "checkpoints" / str(step))
    with pytest.raises(RuntimeError, match=r"no intact checkpoint in .*step 4 \(.*step 2 \("):
        runs.RunDir.open(tmp_path, Config(), step_key="update", resume=True, like=LIKE)


def test_a_run_folder_that_is_a_file_is_named_as_such(tmp_path):
    (tmp_path / "taken").write_text("not a run")
    for resume in (False, True):
        with pytest.raises(NotADirectoryError, match="taken is a file, not a folder"):
            runs.RunDir.open(tmp_path / "taken", Config(), step_key="update", resume=resume)


def test_checkpoint_dir_takes_a_run_folder_or_its_checkpoints(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    assert runs.checkpoint_dir(tmp_path) == tmp_path / "checkpoints"
    assert runs.checkpoint_dir(tmp_path / "checkpoints") == tmp_path / "checkpoints"


# ----------------------------------------------------------------------------------------------
# Killed and resumed, for real


def complete_rows(run_path: Path) -> list[dict]:
    """The rows of metrics.jsonl whose line is complete (a running process may be mid-write)."""
    path = run_path / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().split("\n")[:-1] if line.strip()]


def finished_checkpoints(run_path: Path) -> list[int]:
    """The finished checkpoint steps, oldest first (orbax writes to a temporary name, then renames)."""
    folder = run_path / "checkpoints"
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


def newest_checkpoint(run_path: Path) -> int | None:
    return max(finished_checkpoints(run_path), default=None)


def kill_after_a_checkpoint(command: list[str], run_path: Path, step_key: str, last_step: int, log: Path,
                            timeout_s: float = 300.0, checkpoints: int = 1) -> tuple[int, list[dict]] | None:
    """Run ``command``; once ``checkpoints`` checkpoints before ``last_step`` exist and a row past the newest was logged,
    SIGKILL the process and everything it started. Returns (newest checkpoint, rows at the kill), or
    None when the run finished before it could be killed there (the caller retries slower)."""
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if process.poll() is not None:
                assert process.returncode == 0, f"the run failed before the kill:\n{log.read_text()[-3000:]}"
                return None
            assert time.monotonic() < deadline, f"no checkpoint and later row within {timeout_s} s:\n{log.read_text()[-3000:]}"
            finished = finished_checkpoints(run_path)  # read once: a checkpoint may finish between two reads
            saved = max(finished, default=None)
            if (len(finished) >= checkpoints and saved < last_step
                    and any(row[step_key] > saved for row in complete_rows(run_path))):
                break
            time.sleep(0.02)
    finally:
        for pid in [process.pid, *descendants(process.pid)]:  # every process of the run, at once
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait()
    saved = newest_checkpoint(run_path)  # it may have written one more between the poll and the kill
    rows = complete_rows(run_path)
    if saved >= last_step or not any(row[step_key] > saved for row in rows):
        return None
    return saved, rows


def killed_and_resumed(tmp_path, command_for, step_key: str, last_step_for, attempts: int = 3,
                       before_resume=None, checkpoints: int = 1):
    """Kill a run after a checkpoint, resume it, and check its metrics read as one uninterrupted
    run. command_for(run_dir, scale) -> argv; a run that ends before the kill is retried at twice
    the size, and the test fails after ``attempts`` of them. before_resume(run_path, saved) runs
    between the kill and the resume and may return the step the resume is to start from (default:
    the newest checkpoint). Returns (run folder, rows at the kill, checkpoint step, rows after the
    resume, last step); the resumed process's stderr is in ``resumed.err`` in the run folder."""
    for attempt in range(attempts):
        scale = 2**attempt
        run_path = tmp_path / f"run{attempt}"
        killed = kill_after_a_checkpoint(command_for(run_path, scale), run_path, step_key, last_step_for(scale),
                                         tmp_path / f"killed{attempt}.log", checkpoints=checkpoints)
        if killed is not None:
            break
    else:
        pytest.fail(f"the run finished before it could be killed after a checkpoint, {attempts} times")
    saved, at_kill = killed
    if before_resume is not None:
        saved = before_resume(run_path, saved) or saved
    resumed = subprocess.run([*command_for(run_path, scale), "--resume"], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    (run_path / "resumed.err").write_text(resumed.stderr)
    rows = read_metrics(run_path)
    steps = [row[step_key] for row in rows]
    assert steps == sorted(set(steps)), f"a step logged twice or out of order: {steps}"
    assert steps[-1] == last_step_for(scale)
    assert csv_column(run_path, step_key) == steps  # the CSV holds the same rows
    scalars = assert_mirrors_jsonl(run_path, step_key, ())  # and the TensorBoard files
    assert max(len(points) for points in scalars.values()) == len(rows)
    return run_path, at_kill, saved, rows, last_step_for(scale)


def labcore(*words: str) -> list[str]:
    return [sys.executable, "-m", "labcore", *words]


def same_but_time(a: dict, b: dict, timing=("time", "steps_per_second", "seconds")) -> bool:
    return {k: v for k, v in a.items() if k not in timing} == {k: v for k, v in b.items() if k not in timing}


IQN_TINY = ["--height", "6", "--width", "6", "--n-agents", "2", "--max-turns", "5", "--hidden-size", "8", "--n-quantiles",
            "2", "--n-tau-act", "4", "--buffer-size", "32", "--batch-size", "4", "--n-frames", "2"]


@pytest.mark.end_to_end
@pytest.mark.parametrize("algorithm", ["ppo", "pqn", "gflownet", "iqn"])
def test_killed_after_a_checkpoint_resumes_as_one_run(tmp_path, algorithm):
    """PPO, PQN, the all-JAX GFlowNet and IQN's fused mode on the shared driver (labcore.loop):
    SIGKILL after a checkpoint, then --resume."""
    updates, log_every = 80, 2
    network = ["--hidden-size", "16"] if algorithm == "ppo" else ["--hidden-sizes", "16", "16", "--num-minibatches", "4"]
    steps_per_update = 4 * 32

    def command(run_dir, scale):
        if algorithm == "iqn":  # an update: one epoch of 5 turns of 2 agents, then a train step each
            return labcore("train", "iqn", "--mode", "jax_fused", *IQN_TINY, "--epochs", str(updates * scale),
                           "--log-every", str(log_every), "--checkpoint-every", "10", "--no-eval", "--no-progress",
                           "--run-dir", str(run_dir))
        if algorithm == "gflownet":  # an update: 8 trajectories and one gradient step
            return labcore("train", "gflownet", "--trainer", "jax", "--ndim", "2", "--height", "4", "--hidden-size", "16",
                           "--batch-size", "8", "--l1-samples", "200", "--iterations", str(updates * scale),
                           "--log-every", str(log_every), "--checkpoint-every", "10", "--no-eval", "--no-progress",
                           "--run-dir", str(run_dir))
        return labcore("train", algorithm, "--preset", "cartpole", "--num-envs", "4", "--num-steps", "32", *network,
                       "--total-steps", str(steps_per_update * updates * scale), "--log-every", str(log_every),
                       "--checkpoint-every", "10", "--eval-episodes", "1", "--no-progress", "--run-dir", str(run_dir))

    run_path, at_kill, saved, rows, last = killed_and_resumed(tmp_path, command, "update", lambda scale: updates * scale)
    assert [row["update"] for row in rows] == list(range(log_every, last + 1, log_every))
    # each resumes bit for bit: the rows the killed run logged past its checkpoint come back identical
    again = {row["update"]: row for row in rows}
    logged_twice = [row for row in at_kill if row["update"] > saved]
    assert logged_twice and all(row == again[row["update"]] for row in logged_twice)
    summary = json.loads((run_path / "summary.json").read_text())
    if algorithm == "gflownet":
        assert summary["trajectories"] == 8 * last and rows[-1]["trajectories"] == 8 * last
    elif algorithm == "iqn":
        assert summary["timesteps"] == 5 * 2 * last and summary["epochs"] == last
    else:
        assert summary["timesteps"] == steps_per_update * last


@pytest.mark.end_to_end
def test_jitted_dqn_killed_with_its_newest_checkpoint_damaged_resumes_from_the_one_before(tmp_path):
    """The jitted DQN through the shared driver (labcore.loop): killed after two checkpoints, its
    newest checkpoint damaged, it resumes from the one before, saying so in one line, and its
    metrics read as one run that repeats, bit for bit, what the killed run logged past that one."""
    updates, log_every = 400, 10

    def command(run_dir, scale):
        return labcore("train", "dqn-scan", "--total-steps", str(10 * updates * scale), "--learning-starts", "500",
                       "--buffer-size", "1000", "--batch-size", "32", "--hidden-sizes", "32", "32", "--log-every",
                       str(log_every), "--checkpoint-every", "40", "--no-eval", "--no-progress", "--run-dir", str(run_dir))

    def damage_newest(run_path, saved):
        older = finished_checkpoints(run_path)[-2]
        damage(run_path / "checkpoints" / str(saved), only="ocdbt.process_0/d")  # the arrays, not the index
        return older

    run_path, at_kill, restored, rows, last = killed_and_resumed(tmp_path, command, "update", lambda s: updates * s,
                                                                 before_resume=damage_newest, checkpoints=2)
    err = (run_path / "resumed.err").read_text()
    assert "is damaged and is not used" in err and f"resuming from checkpoint {restored}, the newest intact one" in err
    assert "Traceback" not in err and "Event loop is closed" not in err, err[-3000:]
    assert [row["update"] for row in rows] == list(range(log_every, last + 1, log_every))
    again = {row["update"]: row for row in rows}
    logged_twice = [row for row in at_kill if row["update"] > restored]
    assert logged_twice and all(row == again[row["update"]] for row in logged_twice)
    assert json.loads((run_path / "summary.json").read_text())["timesteps"] == 10 * last


@pytest.mark.end_to_end
def test_dqn_host_loop_killed_after_a_checkpoint_resumes_as_one_run(tmp_path):
    steps, log_every = 6_000, 250  # agent steps: 25 and 100 updates of train_frequency 10

    def command(run_dir, scale):
        return labcore("train", "dqn-host", "--total-steps", str(steps * scale), "--learning-starts", "500", "--buffer-size", "1000",
                       "--batch-size", "32", "--hidden-sizes", "32", "32", "--log-every", "25",
                       "--checkpoint-every", "100", "--no-eval", "--run-dir", str(run_dir))

    # ordered and cut by agent step ("timesteps"), as its checkpoints are numbered
    run_path, at_kill, saved, rows, last = killed_and_resumed(tmp_path, command, "timesteps",
                                                              lambda scale: steps * scale)
    assert [row["timesteps"] for row in rows] == list(range(log_every, last + 1, log_every))
    assert [row["update"] for row in rows] == list(range(25, last // 10 + 1, 25))
    # with the replay buffer and the envs in the checkpoint the resumed run is exact (timings aside)
    again = {row["timesteps"]: row for row in rows}
    logged_twice = [row for row in at_kill if row["timesteps"] > saved]
    assert logged_twice and all(same_but_time(row, again[row["timesteps"]]) for row in logged_twice)
    times = [row["time"] for row in rows]
    assert times == sorted(times)  # the clock goes on from the checkpoint
    summary = json.loads((run_path / "summary.json").read_text())
    assert (summary["timesteps"], summary["updates"]) == (last, last // 10)


@pytest.mark.end_to_end
@pytest.mark.several_processes
def test_data_parallel_dqn_killed_after_a_checkpoint_resumes_as_one_run(tmp_path):
    steps, learning_starts = 3_000, 500  # agent steps per device; a row every 20 updates, a checkpoint every 40

    def command(run_dir, scale):
        return labcore("launch", "--num-processes", "2", "--devices-per-process", "1", "--timeout", "300", "--",
                       "train", "dqn-data-parallel", "--total-steps", str(steps * scale), "--learning-starts", str(learning_starts),
                       "--buffer-size", "2000", "--log-every", "20", "--checkpoint-every", "40",
                       "--run-dir", str(run_dir))

    def last_update(scale):
        return steps * scale // 10  # train_frequency 10: the warm-up's 50 updates included

    run_path, at_kill, saved, rows, last = killed_and_resumed(tmp_path, command, "update", last_update)
    assert [row["update"] for row in rows] == list(range(20, last + 1, 20))  # a row every 20 updates
    # the checkpoints hold every replica's envs and replay: the rows past the checkpoint come back bit for bit
    again = {row["update"]: row for row in rows}
    logged_twice = [row for row in at_kill if row["update"] > saved]
    assert logged_twice and all(row == again[row["update"]] for row in logged_twice)
    summary = json.loads((run_path / "summary.json").read_text())
    assert (summary["updates"], summary["timesteps"], summary["replicas"]) == (last, 2 * 10 * last, 2)


# ----------------------------------------------------------------------------------------------
# One writer per folder

HOLD = """
import sys, time
from pathlib import Path
from labcore import run_lock, runs
runs.RunDir.open(Path(sys.argv[1]), {"a": 1}, step_key="update", overwrite=True)
print("holding", flush=True)
time.sleep(600)
"""


def holding_process(run_path: Path) -> subprocess.Popen:
    """A process that opens ``run_path`` for writing and keeps it, as a running training run does."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(run_path)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "holding"
    return process


def test_a_second_writer_is_refused_naming_the_holder_and_readers_are_not(tmp_path):
    holder = holding_process(tmp_path)
    try:
        for resume, overwrite in ((False, False), (False, True), (True, False)):
            with pytest.raises(run_lock.FolderInUse, match=rf"run folder {tmp_path} is being written by pid {holder.pid} "
                                                       r"on host \S+, started \d{4}-\d\d-\d\dT"):
                runs.RunDir.open(tmp_path, {"a": 1}, step_key="update", resume=resume, overwrite=overwrite)
        assert (tmp_path / "config.json").exists()  # the holder's run is untouched
        fake_checkpoint(tmp_path, 2, Config())
        from labcore import checkpoint

        assert float(checkpoint.restore(tmp_path / "checkpoints", LIKE)[0]["x"][0]) == 1.0  # a reader is not blocked
        reader = runs.RunDir.open(tmp_path, Config(), step_key="update", resume=True, primary=False, like=LIKE)
        assert reader.resume_step == 2  # nor are the other processes of a multi-process run
    finally:
        holder.kill()
        holder.wait()
    # the lock of a killed process holds nothing: the folder opens, and a resume goes ahead
    run = runs.RunDir.open(tmp_path, Config(), step_key="update", resume=True, like=LIKE)
    assert run.resume_step == 2
    run.finish()


def test_the_same_process_may_open_its_folder_again_and_finish_frees_it(tmp_path):
    first = runs.RunDir.open(tmp_path, Config(), step_key="update")
    again = runs.RunDir.open(tmp_path, Config(), step_key="update", overwrite=True)  # a notebook cell run twice
    again.finish()
    first.finish()
    holder = holding_process(tmp_path)  # finished: another process can take it
    holder.kill()
    holder.wait()


def test_a_refused_open_leaves_the_folder_free(tmp_path):
    runs.RunDir.open(tmp_path, Config(), step_key="update").finish()
    with pytest.raises(FileExistsError, match="holds an earlier run"):
        runs.RunDir.open(tmp_path, Config(), step_key="update")
    holder = holding_process(tmp_path)
    holder.kill()
    holder.wait()
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        runs.RunDir.open(tmp_path / "never", Config(), step_key="update", resume=True)
    assert not (tmp_path / "never").exists()  # a refused resume creates nothing


def all_threads_stopped(pid: int) -> bool:
    """Whether every thread of process ``pid`` is stopped (state T in /proc/<pid>/task/*/stat)."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            continue
    return bool(states) and all(state in ("T", "t") for state in states)


@pytest.mark.end_to_end
def test_a_second_train_on_a_running_folder_is_refused_and_a_killed_writer_does_not_block_resume(tmp_path):
    """A run is stopped (SIGSTOP: alive, still holding its folder) once it has a checkpoint and a row
    past it; the same command, alone, with --resume and with --overwrite, is refused in one line
    naming the folder and the process, and the folder is untouched; the run is then killed (kill -9)
    and --resume finishes it: every row once, none twice."""
    run_path = tmp_path / "run"
    command = labcore("train", "dqn-scan", "--total-steps", "200000", "--learning-starts", "500", "--buffer-size",
                      "1000", "--batch-size", "32", "--hidden-sizes", "32", "32", "--log-every", "100",
                      "--checkpoint-every", "1000", "--no-eval", "--no-progress", "--run-dir", str(run_path))
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert first.poll() is None and time.monotonic() < deadline, "the run ended, or had no checkpoint in time"
            saved = newest_checkpoint(run_path)
            if saved is not None and any(row["update"] > saved for row in complete_rows(run_path)):
                break
            time.sleep(0.01)
        os.kill(first.pid, signal.SIGSTOP)
        # A stop takes effect when each thread next leaves the kernel: a write under way finishes
        # first (a fresh clone's run once saw metrics.jsonl change 12 ms after the signal).
        deadline = time.monotonic() + 30
        while not all_threads_stopped(first.pid):
            assert time.monotonic() < deadline, "the run did not stop"
            time.sleep(0.01)
        before = {p.name: p.stat().st_mtime_ns for p in run_path.iterdir()}
        for extra in ([], ["--resume"], ["--overwrite"]):
            second = subprocess.run([*command, *extra], capture_output=True, text=True, timeout=300)
            lines = second.stderr.strip().splitlines()
            assert second.returncode == 1 and len(lines) == 1, second.stderr[-2000:]
            assert lines[0].startswith(f"error: run folder {run_path.absolute()} is being written by pid {first.pid} "
                                       "on host"), lines[0]
        assert {p.name: p.stat().st_mtime_ns for p in run_path.iterdir()} == before  # nothing touched
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [row["update"] for row in read_metrics(run_path)] == list(range(100, 20001, 100))  # every row once
