"""A fault campaign: real run folders damaged in every way a disk, a kill or a person can, then resumed.

A finished run with two checkpoints is copied once per case, damaged, and resumed. Each case must end
one of three ways:

* **resumed**: from the newest intact checkpoint, its state bit for bit, every checkpoint it passed
  over named in one line with the reason; resumed to the end, the run finishes bit for bit as the
  run that was never damaged;
* **refused**: one line naming the folder and what is wrong, no traceback;
* **repaired**: resumed, after a one-line notice of what was mended (a metrics line cut short, a
  config.json missing or edited, a save that never finished set aside).

Anything else is a failure: **silent** (a state other than the newest intact checkpoint's, or a
checkpoint passed over without a word) or **raw** (an exception that is not a named refusal). Each
test prints its driver's tally (``pytest -s``).

Every file of the newest checkpoint is damaged in each of the four ways; under LABCORE_QUICK=1 (as in
CI) each file is damaged in one of them, the four taken in turn, so that every file and every way is
still met, in a quarter of the cases.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import assert_same_tree
from labcore import budget, checkpoint, loop, runs, training_run
from labcore.agents import dqn as jitted_dqn
from labcore.agents import gflownet, iqn, ppo, pqn
from labcore.agents.dqn import core as dqn_core
from labcore.agents.dqn import host_loop
from labcore.logging import read_metrics

CHECKPOINT_EVERY = 10  # updates; each run has two checkpoints, at 10 and 20 updates
TIMING = ("time", "seconds", "steps_per_second", "elapsed_s")  # wall-clock fields of a row, which differ per run
REFUSALS = (checkpoint.DamagedCheckpoints, checkpoint.DamagedCheckpoint, FileNotFoundError, ValueError)


# ----------------------------------------------------------------------------------------------
# Ways to damage a file, a checkpoint, a folder


def flipped(path: Path) -> None:
    """64 bytes in the middle inverted (a bad sector, a stray write): the size is unchanged."""
    data = bytearray(path.read_bytes())
    if not data:
        path.write_bytes(b"\xff")
        return
    middle, count = len(data) // 2, min(64, len(data))
    start = max(0, min(middle, len(data) - count))
    data[start:start + count] = bytes(b ^ 0xFF for b in data[start:start + count])
    path.write_bytes(bytes(data))


def truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def emptied(path: Path) -> None:
    path.write_bytes(b"")


def deleted(path: Path) -> None:
    path.unlink()


FILE_DAMAGES = {"flipped": flipped, "truncated": truncated, "emptied": emptied, "deleted": deleted}


def checkpoint_files(run_path: Path, step: int) -> list[str]:
    step_dir = run_path / "checkpoints" / str(step)
    return sorted(p.relative_to(step_dir).as_posix() for p in step_dir.rglob("*") if p.is_file())


def largest_data_file(run_path: Path, step: int) -> Path:
    step_dir = run_path / "checkpoints" / str(step)
    return max((p for p in step_dir.rglob("*") if p.is_file() and "/d/" in p.as_posix()), key=lambda p: p.stat().st_size)


def metrics_cut_mid_line(run_path: Path) -> None:
    text = (run_path / "metrics.jsonl").read_text()
    (run_path / "metrics.jsonl").write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])


def config_edited(run_path: Path) -> None:
    fields = json.loads((run_path / "config.json").read_text())
    fields["seed"] = fields.get("seed", 0) + 1
    (run_path / "config.json").write_text(json.dumps(fields))


def stray_temporary_checkpoint(run_path: Path) -> None:
    """A save killed before orbax renamed its temporary folder: a later step, half written."""
    newest = max(checkpoint.all_steps(run_path / "checkpoints"))
    shutil.copytree(run_path / "checkpoints" / str(newest),
                    run_path / "checkpoints" / f"{2 * newest}.orbax-checkpoint-tmp-1764201600")


# ----------------------------------------------------------------------------------------------
# One driver: how to run it, resume it and read its checkpoints


@dataclasses.dataclass
class Driver:
    name: str
    config: Any
    step_key: str
    train: Callable[..., training_run.RunResult]  # train(run_dir, resume) -> RunResult: the whole run, or its rest
    like: Any  # the template RunDir.restore takes (a state, or a function of the checkpoint's metadata)
    checkpoint_step: Callable[[int], int]  # updates -> the checkpoint's step number
    # parts of a state that differ between two runs of the same computation, left out of the
    # bit-for-bit comparison (the host loop's pickled gymnasium envs hold wall-clock times)
    unpinned: tuple[str, ...] = ()

    def read(self, run_path: Path, step: int) -> Any:
        """The state of checkpoint ``step`` of an intact run folder."""
        like = self.like(checkpoint.restore_metadata(run_path / "checkpoints", step)) if callable(self.like) else self.like
        state = checkpoint.restore(run_path / "checkpoints", like, step)[0]
        return {k: v for k, v in state.items() if k not in self.unpinned} if self.unpinned else state


def loop_driver(name: str, module: Any, config: Any) -> Driver:
    def train(run_dir, resume=False):
        return module.train(config, run_dir, checkpoint_every=CHECKPOINT_EVERY, log_every=5, resume=resume,
                            progress=False, evaluate=False)

    like = module.make_program(config).init(loop.seed_keys(config.seed, None))  # the state loop.train resumes into
    return Driver(name, config, "update", train, like, lambda updates: updates)


def host_loop_driver() -> Driver:
    config = dqn_core.DQNConfig(env_id="CartPole-v1", total_steps=20 * 10, learning_starts=50, buffer_size=200,
                                batch_size=16, hidden_sizes=(16, 16), num_envs=1)

    def train(run_dir, resume=False):
        return host_loop.train(config, run_dir=run_dir, checkpoint_every=CHECKPOINT_EVERY, log_every=5, resume=resume,
                               progress=False)

    return Driver("DQN host loop", config, "timesteps", train, host_loop.checkpoint_template(config),
                  lambda updates: updates * config.train_frequency, unpinned=("envs",))


# ----------------------------------------------------------------------------------------------
# Running a case


def resume_and_classify(driver: Driver, reference: Path, run_path: Path, newest_intact: int | None,
                        passed_over: list[int], to_the_end: bool = False, notices: tuple[str, ...] = ()) -> str:
    """Resume ``run_path`` and say how it ended: "resumed", "refused" or "repaired" (asserting what
    each means), or fail the test as silent or raw. newest_intact: the checkpoint step the resume
    must start from (None: it must be refused); passed_over: the newer steps it must name."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            if to_the_end:
                result = driver.train(run_path, resume=True)
                run = None
            else:
                run = runs.RunDir.open(run_path, driver.config, step_key=driver.step_key, resume=True, like=driver.like)
        except REFUSALS as refusal:
            message = str(refusal)
            assert newest_intact is None, f"silent: refused although checkpoint {newest_intact} is intact: {message}"
            assert "\n" not in message and str(run_path) in message, f"raw: not one named line: {message!r}"
            return "refused"
        except Exception as error:  # noqa: BLE001
            pytest.fail(f"raw: {type(error).__name__}: {error}")
    said = [line for line in err.getvalue().splitlines() if line.startswith("labcore:")]
    assert newest_intact is not None, f"silent: resumed although nothing intact was left; said {said}"
    for step in passed_over:
        assert any(f"checkpoint {step} in" in line and "damaged" in line for line in said), \
            f"silent: checkpoint {step} passed over without a word: {said}"
    for notice in notices:
        assert any(notice in line for line in said), f"silent: no notice '{notice}' in {said}"
    if run is not None:
        assert run.resume_step == newest_intact, (run.resume_step, newest_intact)
        restored = run.restored[0]
        if driver.unpinned:
            restored = {k: v for k, v in restored.items() if k not in driver.unpinned}
        assert_same_tree(restored, driver.read(reference, newest_intact))
        run.finish()
    else:  # the rest of the run, bit for bit as the run that was never damaged
        final = max(checkpoint.all_steps(reference / "checkpoints"))
        assert_same_tree(driver.read(run_path, final), driver.read(reference, final))
        untimed = lambda rows: [{k: v for k, v in row.items() if k not in TIMING} for row in rows]  # noqa: E731
        assert untimed(read_metrics(run_path)) == untimed(read_metrics(reference))
        assert result.summary is not None
    return "repaired" if notices else "resumed"


def copy_of(reference: Path, tmp_path: Path, case: str) -> Path:
    run_path = tmp_path / case.replace(" ", "-").replace("/", "_")
    shutil.copytree(reference, run_path)
    return run_path


def campaign(driver: Driver, reference: Path, tmp_path: Path, every_file: bool) -> Counter:
    """Every case for one driver; returns the tally of outcomes."""
    newest, older = driver.checkpoint_step(20), driver.checkpoint_step(10)
    tally = Counter()

    def case(name: str, damage: Callable[[Path], None], **expect: Any) -> None:
        run_path = copy_of(reference, tmp_path, f"{driver.name} {name}")
        damage(run_path)
        outcome = resume_and_classify(driver, reference, run_path, **expect)
        tally[outcome] += 1
        shutil.rmtree(run_path)

    files = checkpoint_files(reference, newest) if every_file else [
        largest_data_file(reference, newest).relative_to(reference / "checkpoints" / str(newest)).as_posix()]
    ways = list(FILE_DAMAGES.items())
    for index, file in enumerate(files):
        for how, damage in budget(full=ways, quick=[ways[index % len(ways)]]):
            case(f"newest checkpoint: {file} {how}",
                 lambda run_path, file=file, damage=damage: damage(run_path / "checkpoints" / str(newest) / file),
                 newest_intact=older, passed_over=[newest])
    for how, damage in FILE_DAMAGES.items():  # resumed to the end: the same run as the undamaged one
        case(f"newest checkpoint's largest data file {how}, resumed to the end",
             lambda run_path, damage=damage: damage(largest_data_file(run_path, newest)),
             newest_intact=older, passed_over=[newest], to_the_end=True)
    case("older checkpoint flipped", lambda run_path: flipped(largest_data_file(run_path, older)),
         newest_intact=newest, passed_over=[])
    case("both checkpoints flipped",
         lambda run_path: [flipped(largest_data_file(run_path, step)) for step in (older, newest)],
         newest_intact=None, passed_over=[])
    case("every checkpoint deleted", lambda run_path: shutil.rmtree(run_path / "checkpoints"),
         newest_intact=None, passed_over=[])
    case("metrics.jsonl cut mid-line", metrics_cut_mid_line, newest_intact=newest, passed_over=[],
         notices=("cut short",))
    case("config.json edited", config_edited, newest_intact=newest, passed_over=[], notices=("config.json differed",))
    case("config.json emptied", lambda run_path: emptied(run_path / "config.json"), newest_intact=newest,
         passed_over=[], notices=("config.json could not be read",))
    case("config.json deleted", lambda run_path: deleted(run_path / "config.json"), newest_intact=newest,
         passed_over=[], notices=("config.json was missing",))
    case("summary.json deleted", lambda run_path: deleted(run_path / "summary.json"), newest_intact=newest,
         passed_over=[])
    case("a stray temporary checkpoint folder", stray_temporary_checkpoint, newest_intact=newest, passed_over=[],
         notices=("save never finished",))
    return tally


def report(driver: Driver, tally: Counter) -> None:
    print(f"\nfault campaign, {driver.name}: {sum(tally.values())} cases: resumed {tally['resumed']}, "
          f"refused {tally['refused']}, repaired {tally['repaired']}, silent 0, raw 0")


def finished_reference(driver: Driver, folder: Path) -> Path:
    driver.train(folder)
    assert checkpoint.all_steps(folder / "checkpoints") == [driver.checkpoint_step(10), driver.checkpoint_step(20)]
    return folder


JITTED_DQN = dqn_core.DQNConfig(env_id="CartPole-v1", total_steps=20 * 10, learning_starts=50, buffer_size=200,
                                batch_size=16, hidden_sizes=(16, 16))


def test_the_jitted_dqn_survives_every_damage(tmp_path):
    """The shared driver (labcore.loop) that PPO, PQN, the GFlowNet and IQN's fused mode run on too."""
    driver = loop_driver("jitted DQN", jitted_dqn, JITTED_DQN)
    tally = campaign(driver, finished_reference(driver, tmp_path / "reference"), tmp_path, every_file=True)
    report(driver, tally)
    assert tally["refused"] == 2 and tally["repaired"] == 5 and sum(tally.values()) > budget(full=50, quick=20)


def test_the_dqn_host_loop_survives_every_damage(tmp_path):
    """The host loop's checkpoints hold its replay buffer and its pickled gymnasium envs."""
    driver = host_loop_driver()
    tally = campaign(driver, finished_reference(driver, tmp_path / "reference"), tmp_path, every_file=True)
    report(driver, tally)
    assert tally["refused"] == 2 and tally["repaired"] == 5 and sum(tally.values()) > budget(full=50, quick=20)


def small(name: str) -> Driver:
    """A small run of each other program on the shared driver, 20 updates."""
    if name == "PPO":
        return loop_driver(name, ppo, ppo.Config.cartpole(num_envs=4, num_steps=16, total_steps=4 * 16 * 20,
                                                          hidden_size=16, eval_episodes=1))
    if name == "PQN":
        return loop_driver(name, pqn, pqn.Config.cartpole(num_envs=4, num_steps=16, total_steps=4 * 16 * 20,
                                                          hidden_sizes=(16, 16), num_minibatches=4, eval_episodes=1))
    if name == "GFlowNet":
        return loop_driver(name, gflownet, gflownet.Config(trainer="jax", ndim=2, height=4, hidden_size=16,
                                                           batch_size=8, l1_samples=200, iterations=20))
    return loop_driver(name, iqn, iqn.Config(epochs=20, height=6, width=6, n_agents=2, max_turns=5, hidden_size=8,
                                             n_quantiles=2, n_tau_act=4, buffer_size=32, batch_size=4, n_frames=2))


@pytest.mark.parametrize("name", ["PPO", "PQN", "GFlowNet", "IQN"])
def test_every_program_resumes_past_a_damaged_checkpoint_and_refuses_two(tmp_path, name):
    """The silent-corruption probe on the other programs of the shared driver: the newest
    checkpoint's array bytes flipped, the run resumed to its end from the one before, bit for bit
    the undamaged run; both checkpoints flipped, refused in one line."""
    driver = small(name)
    reference = finished_reference(driver, tmp_path / "reference")
    outcomes = []
    for both in (False, True):
        run_path = copy_of(reference, tmp_path, f"both {both}")
        for step in ((10, 20) if both else (20,)):
            flipped(largest_data_file(run_path, step))
        outcomes.append(resume_and_classify(driver, reference, run_path, newest_intact=None if both else 10,
                                            passed_over=[] if both else [20], to_the_end=not both))
    assert outcomes == ["resumed", "refused"]
