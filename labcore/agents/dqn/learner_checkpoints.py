"""The actor-learner DQN's checkpoints (``labcore.agents.dqn.actor_learner``): what its learner saves,
how a resume reads it back, and ``load_checkpoint``, ``params`` and ``evaluate`` for evaluation.

    config, state = load_checkpoint("runs/actor-learner")      # state["train_state"].params: the policy

A checkpoint, numbered by learner update, holds the learner's state, ``{"train_state": TrainState,
"replay": ReplayState (labcore.replay), "key": its PRNG key}``, and metadata in the schema of
``labcore.checkpoint`` (algorithm ``ALGORITHM``) with the run's ``Counters`` beside it. They
live apart from the Ray loop because none of them needs Ray or an actor: a checkpoint loads for
evaluation on a machine without a cluster. Orbax is imported inside the functions, so that every
actor process, which imports the driver, does not load it.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import jax

from labcore import runs
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn.config import ACTOR_LEARNER_NAME as ALGORITHM  # the registry name its checkpoints record

DRIVER = "labcore.agents.dqn.actor_learner"  # the module whose runs write them (the schema's "driver")


class Counters(NamedTuple):
    """What a checkpoint keeps besides arrays (JSON metadata)."""

    received: int
    updates: int
    lost: int
    seconds: float
    credit: float  # updates owed for transitions received, not yet made
    by_node: dict[str, int]
    restarts: list[int]  # per actor rank


def learner_state(train_state: dqn.TrainState, replay: Any, key: jax.Array) -> dict[str, Any]:
    """The learner's state as a checkpoint holds it, and as ``train`` and ``load_checkpoint`` return it."""
    return {"train_state": train_state, "replay": replay, "key": key}


def save(directory: str | os.PathLike, updates: int, state: dqn.TrainState, buffer: Any, key: jax.Array,
         config: dqn.DQNConfig, counters: Counters) -> None:
    """Checkpoint update ``updates``: the train state, the replay buffer and the key (typed), the
    counters in the metadata."""
    from labcore import checkpoint

    checkpoint.save_run(directory, updates, learner_state(state, buffer, key), algorithm=ALGORITHM, driver=DRIVER,
                        config=config, **counters._asdict())


def restore(run: runs.RunDir, state: dqn.TrainState, buffer: Any) -> tuple[dqn.TrainState, Any, jax.Array, Counters]:
    """(train state, replay buffer, key, counters) of the newest intact checkpoint of a run opened to
    resume, shaped like ``state`` and ``buffer``; a checkpoint of another algorithm is refused
    (``labcore.checkpoint.WrongCheckpoint``) before its arrays are read."""
    from labcore import checkpoint

    like = learner_state(state, buffer, jax.random.key(0))  # a typed key restores as one
    restored, metadata = run.restore(checkpoint.expecting(ALGORITHM, run.path, like)).restored
    counters = Counters(**{name: metadata[name] for name in Counters._fields})
    return restored["train_state"], restored["replay"], restored["key"], counters


def load_checkpoint(path: str | os.PathLike, step: int | None = None) -> tuple[dqn.DQNConfig, dict[str, Any]]:
    """(config, state) of a run from its folder or its checkpoints/ folder (default: the newest
    step): the state as saved, ``{"train_state", "replay", "key"}`` (the key typed). A checkpoint of
    another algorithm is refused before anything is built (``labcore.checkpoint.WrongCheckpoint``)."""
    from labcore import checkpoint
    from labcore.agents.dqn.agent import make_dqn_for

    directory, _, config = checkpoint.open_run(path, ALGORITHM, dqn.DQNConfig, step)
    agent = make_dqn_for(config)  # the learner's DQN: the shapes its state was saved in
    like = learner_state(agent.init(jax.random.key(0)), jax.eval_shape(lambda: agent.buffer.init(agent.example)),
                         jax.random.key(0))
    state, _ = checkpoint.restore(directory, like, step)
    return config, state


def params(learner: dict[str, Any]) -> Any:
    """The learner's parameters in a state of ``train`` or ``load_checkpoint`` (``{"train_state", "replay", "key"}``)."""
    return learner["train_state"].params


def evaluate(config: dqn.DQNConfig, params: Any, seed: int = 0) -> dict[str, Any]:
    """The jitted DQN's evaluation on gymnax envs (``labcore.agents.dqn.scan.evaluate``): the actors' network."""
    from labcore.agents.dqn import scan

    return scan.evaluate(config, params, seed)
