"""One checkpoint metadata schema for every driver (labcore.checkpoint): what each driver writes,
every loader and every resume refusing another algorithm's folder in one line that names what it
holds, and checkpoints written before the schema loading and resuming as they always did."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

import labcore
from labcore import checkpoint, run_restore, runs
from labcore.__main__ import main as cli
from labcore.agents import registry
from labcore.agents.dqn import host_loop, learner_checkpoints, multi_process
from labcore.agents.dqn import scan as dqn_scan
from labcore.agents.dqn.agent import make_dqn_for
from labcore.agents.iqn import run as iqn_run
from labcore.agents.ppo import run as ppo_run
from labcore.agents.pqn import run as pqn_run
from labcore.checkpoint import WrongCheckpoint

def tiny_config(kind: str):
    """A config that trains in seconds (the config's ``smallest`` preset); ``kind`` is a registry name, or "iqn-host"
    (IQN's host mode)."""
    if kind == "iqn-host":
        return registry.get("iqn").config_class.smallest(mode="jax_sequential")
    return registry.get(kind).config_class.smallest()


def save_as_the_learner_does(config, directory: Path, updates: int = 30) -> None:
    """A checkpoint of the actor-learner, written by its learner's own ``save`` (no Ray: the learner's
    state as it is at a checkpoint, fresh)."""
    agent = make_dqn_for(config)
    counters = learner_checkpoints.Counters(received=800, updates=updates, lost=0, seconds=1.5, credit=0.25,
                                            by_node={"node": 800}, restarts=[0])
    learner_checkpoints.save(directory, updates, agent.init(jax.random.key(1)),
                             agent.buffer.init(agent.example), jax.random.key(2), config, counters)


def train_smallest(kind: str, config, path: Path) -> None:
    """A tiny run of ``kind`` into ``path``: its driver, through its record, with the record's smallest run's
    checkpoints. The actor-learner's learner writes its checkpoint without Ray (its Ray run is tested below);
    IQN's host mode runs to its end in one call, one checkpoint."""
    if kind == "dqn-actor-learner":
        save_as_the_learner_does(config, path / "checkpoints")
    elif kind == "iqn-host":
        registry.get("iqn").train(config, path, progress=False, evaluate=False)
    else:
        checkpoint_every = registry.get(kind).smallest_run["checkpoint_every"]
        registry.get(kind).train(config, path, checkpoint_every=checkpoint_every, progress=False, evaluate=False)


KINDS = (*registry.NAMES, "iqn-host")
ALGORITHM = {kind: "iqn" if kind == "iqn-host" else kind for kind in KINDS}
DRIVER = {"dqn-host": "labcore.agents.dqn.host_loop", "dqn-actor-learner": "labcore.agents.dqn.actor_learner",
          "iqn-host": "labcore.agents.iqn.run"}  # the others write through labcore.loop
# Each loader, by the algorithm it loads (IQN has two: the contract's, and the parameters' with a config check).
LOADERS = {name: registry.get(name).load_checkpoint for name in registry.NAMES} | {
    "iqn-params": lambda path, step=None: iqn_run.load_params(path, step=step)}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """folder(kind) -> (config, run folder) of a tiny run of that kind, trained once per module."""
    made: dict[str, tuple] = {}

    def make(kind: str) -> tuple:
        if kind not in made:
            config, path = tiny_config(kind), tmp_path_factory.mktemp(kind)
            train_smallest(kind, config, path)
            made[kind] = config, path
        return made[kind]

    return make


def newest(path: Path) -> int:
    return max(checkpoint.all_steps(runs.checkpoint_dir(path)))


def assert_refused_in_one_line(refused: pytest.ExceptionInfo, held: str, wanted: str, path: Path) -> None:
    message = str(refused.value)
    assert "\n" not in message, message
    assert message.startswith(f"{path} holds a") and f" {held} run (" in message, message
    assert f"not a {wanted} one" in message or f"not an {wanted} one" in message, message
    assert message.endswith(f"evaluate it with python -m labcore eval {held} --checkpoint {path}"), message


def test_the_schema_keys_are_the_schemas_own():
    with pytest.raises(ValueError, match=r"\['config', 'labcore_version'\] are the schema's own keys"):
        checkpoint.run_metadata("ppo", "labcore.loop", {}, 0, config={}, labcore_version="0.1.0")


def test_the_message_names_what_the_folder_holds_and_the_command_that_evaluates_it():
    held = {"algorithm": "dqn-scan", "driver": "labcore.loop", "step": 150, "labcore_version": "0.6.0"}
    with pytest.raises(WrongCheckpoint) as refused:
        checkpoint.expect(held, "pqn", "runs/x")
    assert str(refused.value) == ("runs/x holds a dqn-scan run (labcore.loop, step 150, labcore 0.6.0), not a pqn one: "
                                  "evaluate it with python -m labcore eval dqn-scan --checkpoint runs/x")
    assert isinstance(refused.value, ValueError)
    with pytest.raises(WrongCheckpoint, match="not an iqn one: .* --checkpoint 'runs/a b'$"):
        checkpoint.expect(held, "iqn", "runs/a b")  # the command can be pasted as it is
    for unchecked in ({"config": {}}, {"algorithm": None}, {"algorithm": "pqn"}):  # before the schema, outside it, its own
        assert checkpoint.expect(unchecked, "pqn", "runs/x") is unchecked
    assert checkpoint.expect(held, "", "runs/x") is held  # a caller outside the registry checks nothing


@pytest.mark.parametrize("kind", KINDS)
def test_every_driver_writes_the_schema(kind, folder):
    config, path = folder(kind)
    step = newest(path)
    metadata = checkpoint.restore_metadata(runs.checkpoint_dir(path))
    assert {key: metadata[key] for key in checkpoint.SCHEMA_KEYS} == {
        "algorithm": ALGORITHM[kind],
        "driver": DRIVER.get(kind, "labcore.loop"),
        "labcore_version": labcore.__version__,
        "config": json.loads(json.dumps(config.as_dict() if kind == "iqn-host" else runs.config_dict(config))),
        "step": step,
    }
    # each driver's own keys, which its restore reads, are still there
    own = {"dqn-host": ("episode_returns", "has_replay", "has_envs", "envs_bytes", "elapsed_s", "last_metrics"),
           "dqn-actor-learner": learner_checkpoints.Counters._fields, "iqn-host": ("epochs",),
           "dqn-data-parallel": ("update_step", "seeds", "devices", "replicas_per_device")}.get(kind, ("update_step", "seeds"))
    assert set(own) <= set(metadata), sorted(metadata)
    if "update_step" in own:
        assert metadata["update_step"] == step
    if kind == "dqn-host":
        assert step == config.total_steps  # numbered by agent step, the host loop's unit
    if kind == "iqn-host":
        assert step == metadata["epochs"] == config.epochs


@pytest.mark.several_processes
def test_the_actor_learner_writes_the_schema_from_a_real_run_on_ray(tmp_path):
    from labcore.agents.dqn import actor_learner

    config = tiny_config("dqn-actor-learner")
    actor_learner.train(config, num_actors=1, envs_per_actor=4, rollout_steps=8, run_dir=tmp_path, checkpoint_every=30,
                        timeout_s=180, progress=False)
    metadata = checkpoint.restore_metadata(tmp_path / "checkpoints")
    assert (metadata["algorithm"], metadata["driver"], metadata["step"]) == (
        "dqn-actor-learner", "labcore.agents.dqn.actor_learner", metadata["updates"])
    loaded_config, state = actor_learner.load_checkpoint(tmp_path)
    assert loaded_config == config and set(state) == {"train_state", "replay", "key"}
    assert int(state["train_state"].update_count) == metadata["updates"]


def test_the_actor_learners_load_checkpoint_gives_the_state_it_saved(folder):
    config, path = folder("dqn-actor-learner")
    loaded_config, state = learner_checkpoints.load_checkpoint(path)
    assert loaded_config == config and set(state) == {"train_state", "replay", "key"}
    assert jax.dtypes.issubdtype(state["key"].dtype, jax.dtypes.prng_key)  # a typed key, as the learner holds it
    np.testing.assert_array_equal(jax.random.key_data(state["key"]), jax.random.key_data(jax.random.key(2)))
    agent = make_dqn_for(config)
    for saved, fresh in zip(jax.tree_util.tree_leaves(state["train_state"]),
                            jax.tree_util.tree_leaves(agent.init(jax.random.key(1)))):
        np.testing.assert_array_equal(np.asarray(saved), np.asarray(fresh))
    assert state["replay"].storage.obs.shape == (config.buffer_size, 4)


# Each loader against a folder of another algorithm: the DQN drivers against each other (one config
# class, so nothing but the algorithm tells their folders apart), and across families.
REFUSALS = [
    ("pqn", "dqn-scan"), ("ppo", "pqn"), ("dqn-scan", "dqn-data-parallel"), ("dqn-scan", "ppo"),
    ("dqn-host", "dqn-scan"), ("dqn-data-parallel", "dqn-scan"), ("dqn-actor-learner", "dqn-host"),
    ("gflownet", "iqn"), ("iqn", "dqn-actor-learner"), ("iqn-params", "gflownet"), ("dqn-host", "iqn-host"),
]


@pytest.mark.parametrize("loader, kind", REFUSALS)
def test_every_loader_refuses_another_algorithms_folder_in_one_line(loader, kind, folder):
    _, path = folder(kind)
    with pytest.raises(WrongCheckpoint) as refused:
        LOADERS[loader](path)
    assert_refused_in_one_line(refused, ALGORITHM[kind], "iqn" if loader == "iqn-params" else loader, path)


@pytest.mark.parametrize("loader", ["iqn", "iqn-params"])
def test_iqns_modes_are_one_algorithm_and_either_loader_reads_either_folder(loader, folder):
    for kind in ("iqn", "iqn-host"):
        config, path = folder(kind)
        loaded_config, state = LOADERS[loader](path)
        assert loaded_config == config and state is not None


def test_the_command_line_refuses_another_algorithms_folder_in_one_line(folder, capsys):
    _, path = folder("dqn-scan")
    assert cli(["eval", "pqn", "--checkpoint", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {path} holds a dqn-scan run (labcore.loop, step "), err
    assert err.rstrip("\n").endswith(f"python -m labcore eval dqn-scan --checkpoint {path}"), err


def old_loop_metadata(config, step: int) -> dict:
    """A checkpoint's metadata as labcore.loop wrote it before the schema."""
    return {"config": runs.config_dict(config), "update_step": step, "seeds": None}


def test_checkpoints_written_before_the_schema_load_and_resume_as_before(folder, tmp_path):
    # labcore.loop: a PPO run interrupted at update 2, its checkpoint rewritten without the schema
    config, path = folder("ppo")
    _, final = ppo_run.load_checkpoint(path)
    _, at_two = ppo_run.load_checkpoint(path, step=2)
    old = tmp_path / "ppo"
    old.mkdir()
    shutil.copy(path / "config.json", old / "config.json")
    checkpoint.save(old / "checkpoints", 2, at_two, old_loop_metadata(config, 2))
    assert "algorithm" not in checkpoint.restore_metadata(old / "checkpoints")
    loaded_config, loaded = ppo_run.load_checkpoint(old)
    assert loaded_config == config and int(loaded.update_step) == 2
    resumed = ppo_run.train(config, old, checkpoint_every=2, resume=True, progress=False, evaluate=False)
    for a, b in zip(jax.tree_util.tree_leaves(resumed.state.params), jax.tree_util.tree_leaves(final.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # the same run, resumed exactly
    assert checkpoint.restore_metadata(old / "checkpoints")["algorithm"] == "ppo"  # its new checkpoints: the schema

    # the host DQN: every key it wrote then, no schema
    config, path = folder("dqn-host")
    metadata = checkpoint.restore_metadata(runs.checkpoint_dir(path))
    like = host_loop.checkpoint_template(config)(metadata)
    state, _ = checkpoint.restore(runs.checkpoint_dir(path), like)
    before = {key: metadata[key] for key in ("step", "config", "episode_returns", "last_metrics", "elapsed_s",
                                             "has_replay", "has_envs", "envs_bytes")}
    checkpoint.save(tmp_path / "host" / "checkpoints", metadata["step"], state, before)
    loaded_config, train_state = host_loop.load_checkpoint(tmp_path / "host")
    assert loaded_config == config and int(train_state.update_count) > 0

    # IQN's host mode: {"config", "epochs"} and the parameters
    config, path = folder("iqn-host")
    _, params = iqn_run.load_checkpoint(path)
    checkpoint.save(tmp_path / "iqn" / "checkpoints", config.epochs, {"params": params},
                    {"config": config.as_dict(), "epochs": config.epochs})
    for load in (iqn_run.load_checkpoint, lambda p: iqn_run.load_params(p)):
        loaded_config, loaded = load(tmp_path / "iqn")
        assert loaded_config == config
        assert all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(loaded), jax.tree_util.tree_leaves(params)))


def assert_untouched(path: Path, steps: list[int]) -> None:
    """A refused resume moved nothing aside and removed nothing."""
    assert checkpoint.all_steps(path / "checkpoints") == steps
    assert not (path / run_restore.DAMAGED_NAME).exists()


# pqn into a PPO folder: every config field differs; the jitted DQN and the data-parallel one share
# their config and differ in the layout they record ({"devices": 1}); IQN's fused mode into a
# GFlowNet folder. Each is refused by algorithm, before the config or the layout is compared.
@pytest.mark.parametrize("kind, held", [("pqn", "ppo"), ("dqn-scan", "dqn-data-parallel"),
                                        ("dqn-data-parallel", "dqn-scan"), ("iqn", "gflownet")])
def test_a_resume_into_another_algorithms_folder_is_refused_before_its_config_is_compared(kind, held, folder):
    _, path = folder(held)
    steps = checkpoint.all_steps(path / "checkpoints")
    drivers = {"pqn": pqn_run.train, "dqn-scan": dqn_scan.train, "dqn-data-parallel": multi_process.train,
               "iqn": iqn_run.train}
    with pytest.raises(WrongCheckpoint) as refused:
        drivers[kind](tiny_config(kind), path, checkpoint_every=2, resume=True, progress=False, evaluate=False)
    assert_refused_in_one_line(refused, held, kind, path)
    assert_untouched(path, steps)


def test_the_command_line_refuses_a_resume_into_another_algorithms_folder_in_one_line(folder, capsys):
    _, path = folder("ppo")
    assert cli(["train", "pqn", "--resume", "--run-dir", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {path} holds a ppo run (labcore.loop, step 4, "), err


def test_the_host_drivers_refuse_a_resume_into_another_algorithms_folder_before_reading_its_arrays(folder):
    from labcore import run_lock

    config, path = folder("dqn-scan")  # the host loop's config is the same DQNConfig
    steps = checkpoint.all_steps(path / "checkpoints")
    try:
        with pytest.raises(WrongCheckpoint) as refused:
            host_loop.train(config, run_dir=path, checkpoint_every=60, resume=True, progress=False)
        assert_refused_in_one_line(refused, "dqn-scan", "dqn-host", path)
        assert_untouched(path, steps)
        # with another config, the config comparison (first, for a host driver) names the algorithm too
        with pytest.raises(ValueError, match=r"\(algorithm dqn-scan\) was written with a different config: \['seed'\]"):
            host_loop.train(dataclasses.replace(config, seed=1), run_dir=path, resume=True, progress=False)

        # the actor-learner's learner, resuming from another algorithm's folder as its loop does
        config, path = folder("dqn-host")
        steps = checkpoint.all_steps(path / "checkpoints")
        run = runs.RunDir.open(path, config, step_key="update", resume=True)
        agent = make_dqn_for(config)
        with pytest.raises(WrongCheckpoint) as refused:
            learner_checkpoints.restore(run, agent.init(jax.random.key(0)), agent.buffer.init(agent.example))
        assert_refused_in_one_line(refused, "dqn-host", "dqn-actor-learner", path)
        assert_untouched(path, steps)
    finally:  # this process held the folders it opened to resume
        for held in ("dqn-scan", "dqn-host"):
            run_lock.release_folder(folder(held)[1])
