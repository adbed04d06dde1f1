"""The multi-agent IQN treasurehunt experiment in four run modes behind one switch.

    config = IQNRunConfig(mode="jax_fused", epochs=200)
    result = run(config, run_dir="runs/iqn")                 # per-epoch metrics, params, summary
    config, params = load_checkpoint("runs/iqn")             # the agents' parameters, checked
    report = evaluate(config, params, epochs=10)             # greedy play (epsilon 0)

The experiment is the one of sorrel's ``treasurehunt`` example (``shared/reference/iqn_port.md``):
``n_agents`` independent iRainbow learners in one world, and for every epoch

    reset the world; every agent start_epoch (add_empty; hard target sync when epoch % sync_freq == 0,
    epoch 0 included); max_turns turns; one train step per agent whose buffer allows it; log;
    every agent's epsilon decays.

One turn, identical in every mode (the port's rule, see ``labcore.envs.treasurehunt``): gems spawn;
every agent observes the world once (after the spawn, before anyone moves); every agent picks an
action from its stacked frames; the agents move one after another in index order; every agent
stores (obs, action, reward, done=0). Sorrel observes each agent right before it moves; observing
all agents once per turn is what lets acting be one vmap over agents, and the object-style world
is driven the same way, so all four modes play the identical game.

The modes (``IQNRunConfig.mode``), from the original's structure to one compiled program:

* ``pytorch``: the object-style Python world (``labcore.torch_ref.treasurehunt``) and one PyTorch
  ``IRainbowAgent`` per agent, everything one after another, as the original does.
* ``jax_sequential``: the Python world and one JAX ``AgentState`` per agent; each agent's jitted
  ``act`` / ``remember`` / ``learn`` (``labcore.agents.iqn.core``) is called one by one.
* ``jax_parallel``: the agents stacked on a leading axis; per turn ONE jitted call (the JAX world's
  turn, vmapped acting, vmapped buffer writes), at the epoch's end one vmapped ``learn``.
* ``jax_fused``: a whole epoch (reset, the turns as a ``lax.scan``, buffer writes, the train steps,
  epsilon decay) is one jitted function, acting vmapped over agents, the whole epoch vmapped over
  ``n_worlds`` independent worlds (each with its own agents); ``epochs_per_call`` epochs per call
  (a scan over epochs) remove the per-epoch dispatch. The state is donated, so the replay buffers
  are updated in place. The train steps run one agent after another (``lax.map``) inside the
  program: on the CPU, XLA runs the batched matmuls of a vmapped backward pass well below the
  rate of the same matmuls one agent at a time (``fused_epoch``).

The JAX modes compile their programs with ``CPU_COMPILER_OPTIONS`` on the CPU (see there).

Randomness. ``pytorch`` uses its own generators (the world's numpy generator seeded with ``seed``,
agent i's torch/numpy/python generators seeded from ``(seed, i)``). The three JAX modes share one
key schedule, so that they make the same draws and can be compared value for value:

    world w:   world_key = fold_in(key(seed), w);  init_key, run_key = split(world_key)
               agents = init_agents(init_key, ...)                     (agent i: split(init_key, n)[i])
    epoch e:   reset_key, turns_key, learn_key = split(fold_in(run_key, e), 3)
    turn t:    spawn_key, act_key = split(split(turns_key, max_turns)[t])
               spawn draws: spawn_uniforms(spawn_key); agent i acts with split(act_key, n)[i]
    training:  agent i learns with split(learn_key, n)[i]

``jax_sequential`` feeds the Python world the same reset positions and spawn draws (computed from
these keys), so ``jax_sequential``, ``jax_parallel`` and ``jax_fused`` (world 0) agree: exactly on
gems and rewards while no argmax tie is broken differently, and to float rounding on losses and
parameters (a vmapped matmul may sum in another order than a single one; tests/test_iqn_modes.py
holds them to 1e-5). A fused run of n worlds equals n
single-world runs with world keys ``fold_in(key(seed), w)`` (``world_keys``).

Metrics: one row per epoch with the same columns in every mode (``METRIC_COLUMNS``): ``epoch``;
``gems`` (gems collected in the epoch, summed over agents; the mean over worlds when n_worlds > 1)
and ``gems_per_world`` (a list, one value per world); ``mean_reward`` (an agent's summed reward in
the epoch, averaged over agents and worlds); ``loss`` (mean over the agents that trained this epoch;
None before the buffers allow training); ``epsilon`` (the value used during the epoch, before its
decay); ``epoch_seconds`` (wall time; for ``epochs_per_call`` > 1 the call's time divided evenly).

A run directory holds ``config.json``, ``metrics.jsonl`` / ``metrics.csv`` (``labcore.logging``),
``metrics.png``, ``summary.json`` and ``checkpoints/`` (orbax): the agents' local parameters at the
end in the Flax layout of ``labcore.nets.iqn.IQN`` with a leading agent axis ([n_agents, ...];
[n_worlds, n_agents, ...] when n_worlds > 1). The pytorch mode converts its networks with the
bridge ``iqn_params_to_flax``, so every mode's checkpoint has the same layout and any of them can
be evaluated by the JAX code.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from labcore import checkpoint, devices
from labcore.agents.iqn import core as iqn
from labcore.envs import treasurehunt as th

MODES = ("pytorch", "jax_sequential", "jax_parallel", "jax_fused")
METRIC_COLUMNS = ("epoch", "gems", "gems_per_world", "mean_reward", "loss", "epsilon", "epoch_seconds")
PLOTTED = ("gems", "mean_reward", "loss", "epsilon")
RUN_FILES = ("config.json", "metrics.jsonl", "metrics.csv", "metrics.png", "summary.json", "checkpoints")
# IQNConfig fields the world decides (the observation width and the four moves): not run-config fields.
_DERIVED_AGENT_FIELDS = ("obs_size", "n_actions")
_WORLD_FIELDS = ("height", "width", "n_agents", "gem_value", "wall_value", "spawn_prob", "vision_radius", "max_turns")


# ----------------------------------------------------------------------------------------------
# The run configuration


@dataclasses.dataclass(frozen=True)
class IQNRunConfig:
    """One experiment: the run mode, the world and the agents. Validated on construction
    (ValueError naming the field). Defaults: sorrel's treasurehunt example (10 x 10, 5 agents,
    50 turns, the iRainbow hyper-parameters of ``shared/reference/iqn_port.md``), 1000 epochs.

    The agent fields are those of ``labcore.agents.iqn.core.IQNConfig`` except ``obs_size`` and
    ``n_actions``, which the world fixes (``agent_config`` builds the IQNConfig).
    """

    mode: str = "jax_fused"
    epochs: int = 1000
    seed: int = 0
    n_worlds: int = 1  # independent worlds, each with its own agents (jax_fused only)
    epochs_per_call: int = 1  # epochs per compiled call (jax_fused only)
    # the world
    height: int = 10
    width: int = 10
    n_agents: int = 5
    gem_value: float = 10.0
    wall_value: float = -1.0
    spawn_prob: float = 0.02
    vision_radius: int = 2
    max_turns: int = 50
    # the agents (IQNConfig)
    n_frames: int = 5
    layer_size: int = 250
    n_quantiles: int = 12
    n_tau_act: int = 256
    n_step: int = 3
    gamma: float = 0.99
    lr: float = 2.5e-4
    tau: float = 1e-3
    sync_freq: int = 200
    memory: int = 1024
    batch_size: int = 256
    grad_clip: float = 1.0
    epsilon_start: float = 1.0
    epsilon_decay: float = 1e-3
    epsilon_min: float = 0.0
    fixed: bool = False

    # What devices.auto_tune shrinks this config to: the agents' ceilings of IQNConfig.DEVICE_SIZES,
    # plus the number of worlds run in one vmap (jax_fused). A world is 5 agents, each with its
    # network, target, Adam moments and buffer: estimated at about 75 MB with a train step's
    # activations (not measured on a GPU or TPU). On a CPU more worlds only queue on the same few
    # cores (4 keep two cores busy); 32 worlds (~2.4 GB) fit a GPU of 8 GiB, 64 a T4, 128 a TPU
    # v5e chip's 16 GiB; large GPUs keep the config.
    DEVICE_SIZES = devices.DeviceSizes(
        limits={kind: {**iqn.IQNConfig.DEVICE_SIZES.limits[kind], **worlds} for kind, worlds in {
            "cpu": {"n_worlds": 4}, "gpu-small": {"n_worlds": 32}, "gpu-t4": {"n_worlds": 64}, "gpu": {},
            "tpu": {"n_worlds": 128}}.items()}
    )

    def __post_init__(self) -> None:
        def fail(field: str, allowed: str) -> None:
            raise ValueError(f"IQNRunConfig.{field} must be {allowed}, got {getattr(self, field)!r}")

        if self.mode not in MODES:
            fail("mode", f"one of {MODES}")
        for field in ("epochs", "n_worlds", "epochs_per_call"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                fail(field, "an integer >= 1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            fail("seed", "an integer >= 0")
        # Only the fused mode runs several worlds or several epochs per call; elsewhere the flag would
        # silently do nothing, so it is an error.
        if self.n_worlds > 1 and self.mode != "jax_fused":
            fail("n_worlds", f"1 in mode {self.mode!r} (several worlds run only in mode 'jax_fused')")
        if self.epochs_per_call > 1 and self.mode != "jax_fused":
            fail("epochs_per_call", f"1 in mode {self.mode!r} (only mode 'jax_fused' runs several epochs per call)")
        if self.fixed and self.mode == "pytorch":
            fail("fixed", "False in mode 'pytorch' (the PyTorch reference implements the faithful variant only)")
        # The sub-configs validate their own fields; their messages are renamed to this class so the
        # error names the field (and the command-line flag) the user set.
        try:
            self.world_params
            self.agent_config
        except ValueError as error:
            message = str(error).replace("TreasurehuntParams.", "IQNRunConfig.").replace("IQNConfig.", "IQNRunConfig.")
            raise ValueError(message) from None

    @property
    def world_params(self) -> th.TreasurehuntParams:
        """The JAX world's (static, hashable) parameters."""
        return th.make_params(**{field: getattr(self, field) for field in _WORLD_FIELDS})

    @property
    def agent_config(self) -> iqn.IQNConfig:
        """Every agent's IQNConfig; obs_size = (2 vision_radius + 1)^2 * 5 and 4 actions."""
        fields = {field.name: getattr(self, field.name) for field in dataclasses.fields(iqn.IQNConfig)
                  if field.name not in _DERIVED_AGENT_FIELDS}
        return iqn.IQNConfig(obs_size=th.obs_size(self.world_params), n_actions=len(th.ACTIONS), **fields)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class IQNRunResult(NamedTuple):
    config: IQNRunConfig
    metrics: list[dict[str, Any]]  # one row per epoch, METRIC_COLUMNS
    params: Any  # the agents' local params, Flax layout, [n_agents, ...] ([n_worlds, n_agents, ...] if n_worlds > 1)
    summary: dict[str, Any]


# ----------------------------------------------------------------------------------------------
# Keys (shared by the three JAX modes)


class EpochKeys(NamedTuple):
    """Every draw of one epoch of one world: reset [] key; spawn [T] keys; act [T, n_agents] keys;
    learn [n_agents] keys (T = max_turns)."""

    reset: jax.Array
    spawn: jax.Array
    act: jax.Array
    learn: jax.Array


def world_keys(seed: int, n_worlds: int) -> jax.Array:
    """[n_worlds] keys, world w's = fold_in(key(seed), w): independent of n_worlds, so world w of
    a many-world run is the single-world run with that key."""
    root = jax.random.key(seed)
    return jax.vmap(lambda w: jax.random.fold_in(root, w))(jnp.arange(n_worlds, dtype=jnp.uint32))


def epoch_keys(run_key: jax.Array, epoch: jax.Array | int, n_agents: int, max_turns: int) -> EpochKeys:
    """The key schedule of the module docstring for epoch ``epoch`` of the world with ``run_key``."""
    reset_key, turns_key, learn_key = jax.random.split(jax.random.fold_in(run_key, epoch), 3)
    turn_keys = jax.vmap(jax.random.split)(jax.random.split(turns_key, max_turns))  # [T, 2]
    act = jax.vmap(lambda k: jax.random.split(k, n_agents))(turn_keys[:, 1])  # [T, n]
    return EpochKeys(reset=reset_key, spawn=turn_keys[:, 0], act=act, learn=jax.random.split(learn_key, n_agents))


@struct.dataclass
class WorldRun:
    """One world's learners and where its key schedule stands (leaves gain a leading world axis
    in the fused mode). agents: AgentState with leaves [n_agents, ...]; run_key: key []; epoch: i32[]."""

    agents: iqn.AgentState
    run_key: jax.Array
    epoch: jax.Array


@functools.partial(jax.jit, static_argnames=("agent_config", "n_agents"))
def init_world_runs(keys: jax.Array, agent_config: iqn.IQNConfig, n_agents: int) -> WorldRun:
    """Fresh agents for each world key (keys [W]): leaves [W, ...]. World w's agents are
    ``init_agents(init_key, ...)`` with ``init_key, run_key = split(keys[w])``; epoch 0.

    One compiled program (building the agents op by op would dispatch hundreds of small ops).
    """
    def one(world_key: jax.Array) -> WorldRun:
        init_key, run_key = jax.random.split(world_key)
        agents = iqn.init_agents(init_key, agent_config, n_agents)
        return WorldRun(agents=agents, run_key=run_key, epoch=jnp.int32(0))

    return jax.vmap(one)(keys)


@jax.jit
def first_world(runs: WorldRun) -> WorldRun:
    """World 0 of stacked runs (the single world of the jax_sequential and jax_parallel modes)."""
    return jax.tree_util.tree_map(lambda leaf: leaf[0], runs)


def own_buffers(tree: Any) -> Any:
    """A copy of every array leaf, so that no two leaves share a device buffer.

    Taken before a state is donated: XLA refuses to "donate the same buffer twice", which is what
    a state holding one array in two places (``evaluate`` starts the target as the params; a
    caller's hand-built state may do the same) would ask of it.
    """
    return jax.tree_util.tree_map(lambda leaf: leaf.copy(), tree)


# XLA:CPU (jaxlib 0.10) hands the backward pass's multiply-and-sum over the quantile axis (the
# gradient of head1's output, [B, N, L] -> [B, L]) to its YNNPACK library as a fusion that runs
# many times slower than XLA's own loop (measured: 8.5 ms of a 27 ms train step at the default
# sizes); limiting YNNPACK to plain dots avoids it (~30 ms per epoch of 5 agents). The option is
# experimental: a jaxlib that does not know it compiles without it.
CPU_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}


def compile_lowered(lowered: jax.stages.Lowered) -> jax.stages.Compiled:
    """Compile with ``CPU_COMPILER_OPTIONS`` on the CPU (without, elsewhere or where unknown)."""
    if jax.default_backend() == "cpu":
        try:
            return lowered.compile(compiler_options=CPU_COMPILER_OPTIONS)
        except (RuntimeError, ValueError):  # jax.errors.JaxRuntimeError: "No such compile option" / "not a valid enum"
            pass
    return lowered.compile()


# ----------------------------------------------------------------------------------------------
# Pure building blocks of the JAX modes (one world; vmapped over agents inside)


def _start_epoch(agents: iqn.AgentState, epoch: jax.Array, agent_config: iqn.IQNConfig) -> iqn.AgentState:
    return jax.vmap(functools.partial(iqn.start_epoch, config=agent_config), in_axes=(0, None))(agents, epoch)


def _end_epoch(agents: iqn.AgentState, agent_config: iqn.IQNConfig) -> iqn.AgentState:
    return jax.vmap(functools.partial(iqn.end_epoch, config=agent_config))(agents)


def play_turn(world: th.WorldState, agents: iqn.AgentState, spawn_key: jax.Array, act_keys: jax.Array,
              agent_config: iqn.IQNConfig, world_params: th.TreasurehuntParams
              ) -> tuple[th.WorldState, iqn.AgentState, jax.Array, jax.Array]:
    """One turn of one world: spawn, observe all, act all (one vmap), move in order, remember all.

    agents: leaves [n, ...]; act_keys: [n] keys. Returns (world, agents, rewards f32[n], gems
    collected i32[]). Gems collected = gems on the map after the spawn minus after the moves (moves
    only ever remove gems), which does not depend on the reward values.

    Acting and remembering are ``iqn.act`` and ``iqn.remember`` (``buffer_add``) in another order
    of the same writes: the observation goes into its ring row first, the stacked state is then
    read from the ring (rows idx - n_frames + 1 .. idx, the same values as ``stacked_state``), and
    the action, reward and done follow. Reading the ring before writing it made XLA copy every
    agent's whole ring twice per turn (2 x 2.5 MB at the default sizes); this order updates it in
    place. tests/test_iqn_modes.py checks the result against the port's functions called one by one.
    """
    c = agent_config
    world = th.spawn_gems(world, th.spawn_uniforms(spawn_key, world_params), world_params)
    gems_before = th.gems_on_map(world)
    obs = th.observe(world, world_params)  # [n, obs_size]
    buf = agents.buffer
    states = jax.vmap(lambda ring, row, i: ring.at[i].set(row))(buf.states, obs, buf.idx)
    rows = (buf.idx[:, None] - (c.n_frames - 1) + jnp.arange(c.n_frames)) % c.memory  # [n, n_frames], oldest first
    stacked = jax.vmap(lambda ring, r: ring[r].reshape(c.in_features))(states, rows)  # [n, n_frames * obs_size]
    actions = jax.vmap(functools.partial(iqn.select_action, config=c))(agents.params, stacked, agents.epsilon, act_keys)
    world, rewards = th.move_agents(world, actions, world_params)

    def store(values: jax.Array, value: jax.Array) -> jax.Array:
        return jax.vmap(lambda ring, i, v: ring.at[i].set(v))(values, buf.idx, value.astype(values.dtype))

    # done = 0 on every step, as the original stores it.
    buf = iqn.FrameBuffer(states=states, actions=store(buf.actions, actions), rewards=store(buf.rewards, rewards),
                          dones=store(buf.dones, jnp.zeros_like(rewards)), idx=(buf.idx + 1) % c.memory,
                          size=jnp.minimum(buf.size + 1, c.memory))
    return world, agents.replace(buffer=buf), rewards, gems_before - th.gems_on_map(world)


class EpochStats(NamedTuple):
    """One epoch of one world: gems i32[]; rewards f32[n] (each agent's sum); losses f32[n] (NaN
    where the agent did not train); epsilon f32[n] (used during the epoch)."""

    gems: jax.Array
    rewards: jax.Array
    losses: jax.Array
    epsilon: jax.Array


def fused_epoch(runs: WorldRun, agent_config: iqn.IQNConfig, world_params: th.TreasurehuntParams,
                train: bool = True) -> tuple[WorldRun, EpochStats]:
    """A whole epoch of W worlds as one traceable function: runs leaves [W, ...], agents [W, n, ...].

    The world steps, acting and buffer writes are vmapped over worlds (and over agents inside
    ``play_turn``), the turns are a ``lax.scan``. The train steps run one agent after another: a
    ``lax.map`` over the W * n (world, agent) pairs, whose stacked leaves [W, n, ...] reshape to
    [W * n, ...] for free. Vmapping them instead makes XLA:CPU run the backward pass's matmuls as
    batched matmuls, well below the rate of the same matmuls one agent at a time (measured at the
    default sizes: 5 agents vmapped 0.18-0.20 s, mapped 0.13 s per epoch; 8 worlds vmapped over
    worlds 5.3 s per epoch, twice 8 single-world epochs). The numbers agree up to float rounding.

    train=False plays without learning and without epsilon decay (evaluation). Returns (runs,
    stats) with stats leaves [W, ...].
    """
    n, turns = world_params.n_agents, world_params.max_turns
    keys = jax.vmap(lambda key, epoch: epoch_keys(key, epoch, n, turns))(runs.run_key, runs.epoch)
    agents = jax.vmap(functools.partial(_start_epoch, agent_config=agent_config))(runs.agents, runs.epoch)
    worlds = jax.vmap(lambda key: th.reset(key, world_params))(keys.reset)
    # Only the buffers change during the turns: carrying them alone keeps the parameters and the
    # optimiser state out of the loop (loop-invariant operands, nothing copied per turn).
    frozen = agents

    def world_turn(world: th.WorldState, agents: iqn.AgentState, spawn_key: jax.Array, act_keys: jax.Array):
        return play_turn(world, agents, spawn_key, act_keys, agent_config, world_params)

    def turn(carry: tuple[th.WorldState, iqn.FrameBuffer], xs: tuple[jax.Array, jax.Array]):
        worlds, buffers = carry
        spawn_keys, act_keys = xs  # [W], [W, n]
        worlds, playing, rewards, gems = jax.vmap(world_turn)(worlds, frozen.replace(buffer=buffers), spawn_keys, act_keys)
        return (worlds, playing.buffer), (rewards, gems)

    # The scan runs over turns: the keys' turn axis goes first ([W, T, ...] -> [T, W, ...]).
    per_turn = (jnp.swapaxes(keys.spawn, 0, 1), jnp.swapaxes(keys.act, 0, 1))
    (_, buffers), (rewards, gems) = jax.lax.scan(turn, (worlds, agents.buffer), per_turn)
    agents = agents.replace(buffer=buffers)
    epsilon = agents.epsilon
    if train:
        n_worlds = runs.epoch.shape[0]
        flat, learn_keys = jax.tree_util.tree_map(lambda leaf: leaf.reshape(n_worlds * n, *leaf.shape[2:]),
                                                  (agents, keys.learn))

        def learn_one(i: jax.Array, carry: tuple[iqn.AgentState, jax.Array]) -> tuple[iqn.AgentState, jax.Array]:
            # Agent i is read from the stacked state and what learn changes (the networks and the
            # optimiser state; never the buffer or epsilon) is written back in place. A lax.map
            # would stack its outputs into fresh arrays and copy them back, and writing the
            # unchanged buffers back would copy them too (~25 MB per epoch at the default sizes).
            flat, losses = carry
            agent, loss = iqn.learn(jax.tree_util.tree_map(lambda leaf: leaf[i], flat), learn_keys[i], agent_config)
            learned = (agent.params, agent.target_params, agent.opt_state)
            params, target_params, opt_state = jax.tree_util.tree_map(
                lambda leaf, new: leaf.at[i].set(new), (flat.params, flat.target_params, flat.opt_state), learned)
            flat = flat.replace(params=params, target_params=target_params, opt_state=opt_state)
            return flat, losses.at[i].set(loss)

        flat, losses = jax.lax.fori_loop(0, n_worlds * n, learn_one, (flat, jnp.zeros((n_worlds * n,), jnp.float32)))
        agents, losses = jax.tree_util.tree_map(lambda leaf: leaf.reshape(n_worlds, n, *leaf.shape[1:]), (flat, losses))
        agents = jax.vmap(functools.partial(_end_epoch, agent_config=agent_config))(agents)
    else:
        losses = jnp.full(epsilon.shape, jnp.nan, jnp.float32)
    stats = EpochStats(gems=jnp.sum(gems, axis=0), rewards=jnp.sum(rewards, axis=0), losses=losses, epsilon=epsilon)
    return WorldRun(agents=agents, run_key=runs.run_key, epoch=runs.epoch + 1), stats


@functools.partial(jax.jit, static_argnames=("agent_config", "world_params", "n_epochs", "train"), donate_argnums=0)
def fused_epochs(runs: WorldRun, n_active: jax.Array | int, agent_config: iqn.IQNConfig,
                 world_params: th.TreasurehuntParams, n_epochs: int, train: bool = True) -> tuple[WorldRun, EpochStats]:
    """Up to ``n_epochs`` epochs of every world in one compiled call: a scan of ``fused_epoch`` over
    ``n_epochs`` slots; ``runs`` (leaves [W, ...]) is donated, so its buffers are updated in place.

    n_active (i32[], at most n_epochs) is a traced argument: the first n_active slots play an epoch,
    the rest leave the state alone (a ``lax.cond``, so a skipped slot costs nothing). One compiled
    program thus serves every chunk of 1 .. n_epochs epochs, and the last, shorter chunk of a run
    does not compile again. Returns (runs, stats) with stats leaves [n_epochs, W, ...]; the slots
    from n_active on hold zeros.
    """
    play = functools.partial(fused_epoch, agent_config=agent_config, world_params=world_params, train=train)

    def one_slot(runs: WorldRun, slot: jax.Array) -> tuple[WorldRun, EpochStats]:
        def skip(runs: WorldRun) -> tuple[WorldRun, EpochStats]:
            zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(play, runs)[1])
            return runs, zeros

        return jax.lax.cond(slot < n_active, play, skip, runs)

    return jax.lax.scan(one_slot, runs, jnp.arange(n_epochs))


# jax_parallel: three jitted calls per epoch (start, one per turn, end), the agents donated to each.


class _TurnTotals(NamedTuple):
    rewards: jax.Array  # f32[n]: each agent's reward so far this epoch
    gems: jax.Array  # i32[]


@functools.partial(jax.jit, static_argnames=("agent_config", "world_params"), donate_argnums=0)
def _parallel_start(agents: iqn.AgentState, run_key: jax.Array, epoch: jax.Array, agent_config: iqn.IQNConfig,
                    world_params: th.TreasurehuntParams):
    keys = epoch_keys(run_key, epoch, world_params.n_agents, world_params.max_turns)
    totals = _TurnTotals(jnp.zeros((world_params.n_agents,), jnp.float32), jnp.int32(0))
    return _start_epoch(agents, epoch, agent_config), th.reset(keys.reset, world_params), keys, totals


@functools.partial(jax.jit, static_argnames=("agent_config", "world_params"), donate_argnums=(0, 1, 3))
def _parallel_turn(world: th.WorldState, agents: iqn.AgentState, keys: EpochKeys, totals: _TurnTotals,
                   agent_config: iqn.IQNConfig, world_params: th.TreasurehuntParams):
    # The world's turn counter picks this turn's keys on the device: no host-side indexing per turn.
    t = world.turn
    world, agents, rewards, gems = play_turn(world, agents, keys.spawn[t], keys.act[t], agent_config, world_params)
    return world, agents, _TurnTotals(totals.rewards + rewards, totals.gems + gems)


@functools.partial(jax.jit, static_argnames=("agent_config",), donate_argnums=0)
def _parallel_end(agents: iqn.AgentState, keys: EpochKeys, agent_config: iqn.IQNConfig):
    epsilon = agents.epsilon
    agents, losses = jax.vmap(functools.partial(iqn.learn, config=agent_config))(agents, keys.learn)
    return _end_epoch(agents, agent_config), losses, epsilon


# jax_sequential: the per-epoch draws for the Python world, and jitted per-agent epoch hooks.


@functools.partial(jax.jit, static_argnames=("world_params",))
def _sequential_draws(run_key: jax.Array, epoch: jax.Array, world_params: th.TreasurehuntParams):
    """(agent positions i32[n, 2], spawn uniforms f32[T, H, W], keys) for the Python world."""
    keys = epoch_keys(run_key, epoch, world_params.n_agents, world_params.max_turns)
    positions = th.reset(keys.reset, world_params).agent_pos
    uniforms = jax.vmap(lambda k: th.spawn_uniforms(k, world_params))(keys.spawn)
    return positions, uniforms, keys


_start_one = jax.jit(iqn.start_epoch, static_argnames=("config",))
_end_one = jax.jit(iqn.end_epoch, static_argnames=("config",))


# ----------------------------------------------------------------------------------------------
# The four runners. Each plays epochs and reports host numbers; ``run`` turns them into rows.


class EpochNumbers(NamedTuple):
    """Host numbers of k finished epochs of W worlds and n agents: gems [k, W]; rewards [k, W, n]
    (each agent's summed reward); losses [k, W, n] (NaN: did not train); epsilon [k] (used during
    the epoch); seconds [k] (wall time per epoch)."""

    gems: np.ndarray
    rewards: np.ndarray
    losses: np.ndarray
    epsilon: np.ndarray
    seconds: np.ndarray


def _one_epoch(gems: int, rewards: np.ndarray, losses: np.ndarray, epsilon: float, seconds: float) -> EpochNumbers:
    """EpochNumbers of one epoch of one world (rewards, losses: [n])."""
    return EpochNumbers(np.array([[gems]], np.int64), np.asarray(rewards, np.float64)[None, None],
                        np.asarray(losses, np.float64)[None, None], np.array([epsilon], np.float64),
                        np.array([seconds], np.float64))


class Runner(Protocol):
    """A mode's loop: ``run_epochs(k)`` plays k more epochs (k <= ``epochs_per_call`` except in the
    fused mode, which compiles for larger chunks) and returns their numbers; ``params()`` the
    agents' stacked local parameters; ``compile_s`` the seconds spent compiling."""

    epochs_per_call: int
    compile_s: float

    def run_epochs(self, k: int) -> EpochNumbers: ...

    def params(self) -> Any: ...


def _one_at_a_time(k: int) -> None:
    if k != 1:
        raise ValueError(f"this mode plays one epoch per call, got a chunk of {k} (epochs_per_call is jax_fused only)")


def pytorch_agent_seed(seed: int, agent: int) -> int:
    """Agent ``agent``'s seed in the pytorch mode: distinct for every (seed, agent) pair."""
    return int(np.random.SeedSequence((seed, agent)).generate_state(1)[0])


def _python_world(config: IQNRunConfig):
    from labcore.torch_ref.treasurehunt import TreasurehuntWorld

    return TreasurehuntWorld(**{field: getattr(config, field) for field in _WORLD_FIELDS}, seed=config.seed)


class PytorchRunner:
    """The original's loop: the Python world and one PyTorch IRainbowAgent per agent, one after another."""

    epochs_per_call = 1

    def __init__(self, config: IQNRunConfig) -> None:
        from labcore.torch_ref.irainbow import IRainbowAgent

        a = config.agent_config
        self.config, self.epoch, self.compile_s = config, 0, 0.0
        self.world = _python_world(config)  # its own generator draws the positions and the gems
        self.agents = [
            IRainbowAgent(a.obs_size, a.n_actions, n_frames=a.n_frames, layer_size=a.layer_size, n_quantiles=a.n_quantiles,
                          n_tau_act=a.n_tau_act, n_step=a.n_step, gamma=a.gamma, lr=a.lr, tau=a.tau, sync_freq=a.sync_freq,
                          memory=a.memory, batch_size=a.batch_size, epsilon=a.epsilon_start, epsilon_decay=a.epsilon_decay,
                          epsilon_min=a.epsilon_min, grad_clip=a.grad_clip, seed=pytorch_agent_seed(config.seed, i))
            for i in range(config.n_agents)
        ]

    def run_epochs(self, k: int) -> EpochNumbers:
        _one_at_a_time(k)
        started = time.perf_counter()
        world, agents = self.world, self.agents
        world.reset()
        for agent in agents:
            agent.start_epoch(self.epoch)
        gems, rewards = 0, np.zeros(len(agents))
        for _ in range(self.config.max_turns):
            world.spawn_gems()
            before = world.gems_on_map()
            observations = [world.observe(i) for i in range(len(agents))]
            actions = [agent.take_action(obs) for agent, obs in zip(agents, observations)]
            step_rewards = [world.move(i, action) for i, action in enumerate(actions)]
            for agent, obs, action, reward in zip(agents, observations, actions, step_rewards):
                agent.buffer.add(obs, action, reward, 0.0)
            rewards += step_rewards
            gems += before - world.gems_on_map()
        epsilon = agents[0].epsilon
        losses = [agent.train_step() for agent in agents]
        for agent in agents:
            agent.end_epoch()
        self.epoch += 1
        losses = np.array([np.nan if loss is None else loss for loss in losses])
        return _one_epoch(gems, rewards, losses, epsilon, time.perf_counter() - started)

    def params(self) -> Any:
        """The local networks in the Flax layout (the bridge), stacked: leaves [n_agents, ...]."""
        from labcore.torch_ref.irainbow import iqn_params_to_flax

        per_agent = [iqn_params_to_flax(agent.local) for agent in self.agents]
        return jax.tree_util.tree_map(lambda *leaves: np.stack(leaves), *per_agent)


class JaxSequentialRunner:
    """The Python world and one JAX AgentState per agent; each agent's jitted act / remember / learn
    (``learn`` compiled ahead of time with ``CPU_COMPILER_OPTIONS``) is called one by one. The
    world's reset positions and spawn draws come from the JAX key schedule (one jitted call per
    epoch), so this mode plays the same game as jax_parallel."""

    epochs_per_call = 1

    def __init__(self, config: IQNRunConfig) -> None:
        self.config, self.epoch = config, 0
        self.agent_config, self.world_params = config.agent_config, config.world_params
        start = first_world(init_world_runs(world_keys(config.seed, 1), self.agent_config, config.n_agents))
        self.run_key = start.run_key
        self.agents = [iqn.unstack_agent(start.agents, i) for i in range(config.n_agents)]
        self.world = _python_world(config)
        self.compile_s = self._warm_up()

    def _warm_up(self) -> float:
        """Compile every jitted function on agent 0 (results discarded): seconds."""
        started = time.perf_counter()
        c, agent = self.agent_config, self.agents[0]
        positions, _, keys = _sequential_draws(self.run_key, np.int32(0), world_params=self.world_params)
        obs = np.zeros(c.obs_size, np.float32)
        # The port's learn, compiled ahead of time with the options the other JAX modes use.
        self._learn = compile_lowered(iqn.learn.lower(agent, keys.learn[0], config=c))
        jax.block_until_ready((
            iqn.act(agent, obs, keys.act[0, 0], config=c), iqn.remember(agent, obs, 0, 0.0, 0.0, config=c),
            _start_one(agent, np.int32(0), config=c), _end_one(agent, config=c), positions))
        return time.perf_counter() - started

    def run_epochs(self, k: int) -> EpochNumbers:
        _one_at_a_time(k)
        started = time.perf_counter()
        c, world, n = self.agent_config, self.world, self.config.n_agents
        positions, uniforms, keys = _sequential_draws(self.run_key, np.int32(self.epoch), world_params=self.world_params)
        positions, uniforms = jax.device_get((positions, uniforms))
        world.reset(positions)
        agents = [_start_one(agent, np.int32(self.epoch), config=c) for agent in self.agents]
        gems, rewards = 0, np.zeros(n)
        for t in range(self.config.max_turns):
            world.spawn_gems(uniforms[t])
            before = world.gems_on_map()
            observations = [world.observe(i) for i in range(n)]
            # Dispatch every agent's act before reading any action back (the reads wait for them).
            pending = [iqn.act(agents[i], observations[i], keys.act[t, i], config=c) for i in range(n)]
            actions = [int(action) for action in pending]
            step_rewards = [world.move(i, action) for i, action in enumerate(actions)]
            agents = [iqn.remember(agent, obs, action, reward, 0.0, config=c)
                      for agent, obs, action, reward in zip(agents, observations, actions, step_rewards)]
            rewards += step_rewards
            gems += before - world.gems_on_map()
        epsilon = float(agents[0].epsilon)
        learned = [self._learn(agent, keys.learn[i]) for i, agent in enumerate(agents)]
        self.agents = [_end_one(agent, config=c) for agent, _ in learned]
        losses = np.array(jax.device_get([loss for _, loss in learned]), np.float64)
        self.epoch += 1
        return _one_epoch(gems, rewards, losses, epsilon, time.perf_counter() - started)

    def params(self) -> Any:
        return iqn.stack_agents(self.agents).params


class JaxParallelRunner:
    """The agents stacked on a leading axis and the JAX world: per epoch one jitted start call, ONE
    jitted call per turn (world turn + vmapped acting + vmapped buffer writes), one jitted end call
    (vmapped learn + epsilon decay). The calls are compiled ahead of time and donate the agents."""

    epochs_per_call = 1

    def __init__(self, config: IQNRunConfig) -> None:
        self.config, self.epoch = config, 0
        c, w = config.agent_config, config.world_params
        start = first_world(init_world_runs(world_keys(config.seed, 1), c, config.n_agents))
        self.agents, self.run_key = own_buffers(start.agents), start.run_key
        started = time.perf_counter()
        epoch = np.int32(0)
        self._start = compile_lowered(
            _parallel_start.lower(self.agents, self.run_key, epoch, agent_config=c, world_params=w))
        _, world, keys, totals = jax.eval_shape(
            functools.partial(_parallel_start, agent_config=c, world_params=w), self.agents, self.run_key, epoch)
        self._turn = compile_lowered(_parallel_turn.lower(world, self.agents, keys, totals, agent_config=c, world_params=w))
        self._end = compile_lowered(_parallel_end.lower(self.agents, keys, agent_config=c))
        self.compile_s = time.perf_counter() - started

    def run_epochs(self, k: int) -> EpochNumbers:
        _one_at_a_time(k)
        started = time.perf_counter()
        agents, world, keys, totals = self._start(self.agents, self.run_key, np.int32(self.epoch))
        for _ in range(self.config.max_turns):
            world, agents, totals = self._turn(world, agents, keys, totals)
        self.agents, losses, epsilon = self._end(agents, keys)
        totals, losses, epsilon = jax.device_get((totals, losses, epsilon))
        self.epoch += 1
        return _one_epoch(int(totals.gems), totals.rewards, losses, float(epsilon[0]), time.perf_counter() - started)

    def params(self) -> Any:
        return self.agents.params


class JaxFusedRunner:
    """Whole epochs of ``n_worlds`` worlds in one compiled call (``fused_epochs``), the state donated."""

    def __init__(self, config: IQNRunConfig, keys: jax.Array | None = None) -> None:
        """keys: [n_worlds] world keys (default ``world_keys(seed, n_worlds)``); tests pass
        ``world_keys(seed, n)[w:w + 1]`` to replay world w of an n-world run on its own."""
        self.config = config
        self.epochs_per_call = config.epochs_per_call
        keys = world_keys(config.seed, config.n_worlds) if keys is None else keys
        if keys.shape != (config.n_worlds,):
            raise ValueError(f"keys must have shape (n_worlds,) = ({config.n_worlds},), got {keys.shape}")
        self.runs = own_buffers(init_world_runs(keys, config.agent_config, config.n_agents))
        self._compiled: dict[int, Any] = {}
        self.compile_s = 0.0
        self.compile(config.epochs_per_call)

    def compile(self, slots: int) -> Any:
        """The compiled call with ``slots`` epoch slots (any chunk of 1 .. slots epochs); compiled
        once per slot count, the seconds added to compile_s."""
        if slots not in self._compiled:
            started = time.perf_counter()
            self._compiled[slots] = compile_lowered(fused_epochs.lower(
                self.runs, np.int32(slots), agent_config=self.config.agent_config, world_params=self.config.world_params,
                n_epochs=slots))
            self.compile_s += time.perf_counter() - started
        return self._compiled[slots]

    def run_epochs(self, k: int) -> EpochNumbers:
        """k epochs in one call of the smallest compiled program with at least k slots (compiling
        one with epochs_per_call slots, outside the timing, if none has that many)."""
        fits = [slots for slots in self._compiled if slots >= k]
        compiled = self._compiled[min(fits)] if fits else self.compile(max(k, self.epochs_per_call))
        started = time.perf_counter()
        self.runs, stats = compiled(self.runs, np.int32(k))
        stats = jax.device_get(stats)  # waits for the call
        seconds = (time.perf_counter() - started) / k
        return EpochNumbers(np.asarray(stats.gems[:k], np.int64), np.asarray(stats.rewards[:k], np.float64),
                            np.asarray(stats.losses[:k], np.float64), np.asarray(stats.epsilon[:k, 0, 0], np.float64),
                            np.full(k, seconds))

    def params(self) -> Any:
        params = self.runs.agents.params
        return jax.tree_util.tree_map(lambda leaf: leaf[0], params) if self.config.n_worlds == 1 else params


RUNNERS = {"pytorch": PytorchRunner, "jax_sequential": JaxSequentialRunner, "jax_parallel": JaxParallelRunner,
           "jax_fused": JaxFusedRunner}


def make_runner(config: IQNRunConfig) -> Runner:
    """The runner of ``config.mode`` (built, and for the JAX modes compiled)."""
    return RUNNERS[config.mode](config)


def metric_rows(first_epoch: int, numbers: EpochNumbers) -> list[dict[str, Any]]:
    """One row per epoch (METRIC_COLUMNS) from a runner's numbers."""
    rows = []
    for j in range(len(numbers.seconds)):
        losses = numbers.losses[j]
        trained = losses[np.isfinite(losses)]
        rows.append({
            "epoch": first_epoch + j,
            "gems": float(np.mean(numbers.gems[j])),
            "gems_per_world": [int(g) for g in numbers.gems[j]],
            "mean_reward": float(np.mean(numbers.rewards[j])),
            "loss": float(np.mean(trained)) if trained.size else None,
            "epsilon": float(numbers.epsilon[j]),
            "epoch_seconds": float(numbers.seconds[j]),
        })
    return rows


# ----------------------------------------------------------------------------------------------
# run: the experiment end to end, with an optional results folder


def run(config: IQNRunConfig, run_dir: str | os.PathLike | None = None, log_every: int = 10, progress: bool = True,
        overwrite: bool = False) -> IQNRunResult:
    """Run ``config.epochs`` epochs in ``config.mode``; with ``run_dir``, write the results folder
    of the module docstring. Every epoch is a row of ``result.metrics``; ``log_every`` is the number
    of epochs between writes to the metrics files and progress-bar updates. A run_dir holding an
    earlier run is refused unless ``overwrite`` (which deletes that run's files, and only those).
    """
    from tqdm import tqdm

    from labcore.logging import MetricsLogger

    if isinstance(log_every, bool) or not isinstance(log_every, int) or log_every < 1:
        raise ValueError(f"log_every must be an integer >= 1, got {log_every!r}")
    run_path = None if run_dir is None else Path(run_dir)
    if run_path is not None:
        previous = [run_path / name for name in RUN_FILES if (run_path / name).exists()]
        if previous and not overwrite:
            raise FileExistsError(
                f"{run_path} holds an earlier run ({previous[0].name}); choose another --run-dir or overwrite it")
        for path in previous:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    runner = make_runner(config)  # builds (and for the JAX modes compiles) before anything is written
    logger = MetricsLogger(run_path)
    if run_path is not None:
        (run_path / "config.json").write_text(json.dumps(config.as_dict(), indent=2) + "\n")
    bar = tqdm(total=config.epochs, unit="epoch", disable=not progress, desc=f"iqn {config.mode}", mininterval=2.0)
    rows: list[dict[str, Any]] = []
    written = 0
    started = time.perf_counter()
    while len(rows) < config.epochs:
        k = min(runner.epochs_per_call, config.epochs - len(rows))
        rows.extend(metric_rows(len(rows), runner.run_epochs(k)))
        if len(rows) - written >= log_every or len(rows) == config.epochs:
            for row in rows[written:]:
                logger.log(row)
            written = len(rows)
            bar.update(written - bar.n)
            bar.set_postfix(gems=f"{rows[-1]['gems']:.1f}", eps=f"{rows[-1]['epsilon']:.3f}", refresh=False)
    run_s = time.perf_counter() - started
    bar.close()
    params = runner.params()
    summary = {**summarize(config, rows, runner.compile_s, run_s), "run_dir": None if run_path is None else str(run_path)}
    if run_path is not None:
        save_checkpoint(run_path / "checkpoints", config, params)
        (run_path / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        plot_run(rows, config).savefig(run_path / "metrics.png", dpi=100)
    return IQNRunResult(config, rows, params, summary)


def summarize(config: IQNRunConfig, rows: list[dict[str, Any]], compile_s: float, run_s: float) -> dict[str, Any]:
    """The numbers of a finished run: timing, and gems per epoch over its first and last tenth."""
    tenth = max(1, len(rows) // 10)
    seconds = [row["epoch_seconds"] for row in rows]
    return {
        "mode": config.mode,
        "epochs": len(rows),
        "n_worlds": config.n_worlds,
        "n_agents": config.n_agents,
        "compile_s": round(compile_s, 3),
        "run_s": round(run_s, 3),
        "epochs_per_second": round(len(rows) / run_s, 3) if run_s > 0 else None,
        "median_epoch_seconds": float(np.median(seconds)),
        "first_gems": float(np.mean([row["gems"] for row in rows[:tenth]])),
        "last_gems": float(np.mean([row["gems"] for row in rows[-tenth:]])),
        "final_epsilon": rows[-1]["epsilon"],
    }


def plot_run(rows: list[dict[str, Any]], config: IQNRunConfig):
    from labcore.logging import plot_metrics

    worlds = f", {config.n_worlds} worlds" if config.n_worlds > 1 else ""
    return plot_metrics(rows, PLOTTED, x_key="epoch",
                        title=f"IQN treasurehunt ({config.mode}, {config.n_agents} agents{worlds})")


# ----------------------------------------------------------------------------------------------
# Checkpoints: the agents' local parameters


def params_shape(config: IQNRunConfig) -> Any:
    """ShapeDtypeStructs of a run's stacked params: [n_agents, ...] ([n_worlds, n_agents, ...] if n_worlds > 1)."""
    def build() -> Any:
        params = iqn.init_agents(jax.random.key(0), config.agent_config, config.n_agents).params
        if config.n_worlds > 1:
            params = jax.tree_util.tree_map(lambda leaf: jnp.broadcast_to(leaf, (config.n_worlds, *leaf.shape)), params)
        return params

    return jax.eval_shape(build)


def check_params(params: Any, config: IQNRunConfig) -> None:
    """ValueError unless ``params`` are a run's stacked params for ``config`` (layer size, obs size,
    agent count, world count); the message names the leaf and both shapes (``iqn.check_params_shape``)."""
    if config.n_worlds > 1:
        for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
            shape = tuple(np.shape(leaf))
            if not shape or shape[0] != config.n_worlds:
                name = "/".join(str(getattr(part, "key", part)) for part in path)
                raise ValueError(f"params leaf {name!r} has shape {shape}, but the config expects a leading axis of "
                                 f"n_worlds = {config.n_worlds}")
        params = jax.tree_util.tree_map(lambda leaf: leaf[0], params)
    iqn.check_params_shape(params, config.agent_config, n_agents=config.n_agents)


def save_checkpoint(directory: str | os.PathLike, config: IQNRunConfig, params: Any) -> Path:
    """Write the stacked params as checkpoint ``config.epochs`` with the config as metadata."""
    check_params(params, config)
    return checkpoint.save(directory, config.epochs, {"params": params},
                           {"config": config.as_dict(), "epochs": config.epochs})


def load_checkpoint(path: str | os.PathLike, config: IQNRunConfig | None = None, step: int | None = None,
                    overrides: Mapping[str, Any] | None = None) -> tuple[IQNRunConfig, Any]:
    """(config, params) from a run directory or its checkpoints/ folder (default: the newest step).

    The arrays are restored in the shapes they were saved with (the checkpoint's own config), then
    checked against the config asked for: ``config``, or the saved config with ``overrides``
    (field -> value, e.g. the command line's flags), or the saved config itself. A different layer
    size, observation size (vision radius, frames) or agent count raises a ValueError naming the
    leaf and both shapes, instead of restoring into, or broadcasting to, the wrong network.
    """
    if config is not None and overrides:
        raise ValueError("load_checkpoint takes a config or overrides, not both")
    directory = Path(path)
    if (directory / "checkpoints").is_dir():
        directory = directory / "checkpoints"
    if not directory.is_dir():
        raise FileNotFoundError(f"no checkpoint in {path}")
    metadata = checkpoint.restore_metadata(directory, step)
    saved = IQNRunConfig(**metadata["config"])
    state, _ = checkpoint.restore(directory, like={"params": params_shape(saved)}, step=step)
    params = state["params"]
    check_params(params, saved)
    target = config or (dataclasses.replace(saved, **overrides) if overrides else saved)
    check_params(params, target)
    return target, params


# ----------------------------------------------------------------------------------------------
# Evaluation: play with given parameters, no learning


def evaluate(config: IQNRunConfig, params: Any, epochs: int = 10, seed: int = 10_000,
             epsilon: float = 0.0) -> dict[str, Any]:
    """Play ``epochs`` epochs with the given stacked params (``check_params`` layout), no learning.

    epsilon 0 is greedy play (the acting forward with ``n_tau_act`` taus on fresh frame buffers);
    epsilon 1 is uniformly random play, the baseline. Runs the fused JAX epoch (every world of a
    many-world checkpoint plays with its own agents) with the key schedule of ``seed``.
    Returns gems per epoch (mean over worlds), gems per world and epoch, and the mean reward.
    """
    check_params(params, config)
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be an integer >= 1, got {epochs!r}")
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    c, w = config.agent_config, config.world_params
    # Fresh arrays (the call donates its state, and the caller keeps its params).
    params = jax.tree_util.tree_map(lambda leaf: jnp.array(leaf, jnp.float32, copy=True), params)
    if config.n_worlds == 1:
        params = jax.tree_util.tree_map(lambda leaf: leaf[None], params)
    shape = (config.n_worlds, config.n_agents)
    buffer = jax.tree_util.tree_map(lambda leaf: jnp.broadcast_to(leaf, (*shape, *leaf.shape)), iqn.buffer_init(c))
    agents = iqn.AgentState(params=params, target_params=own_buffers(params), opt_state=None, buffer=buffer,
                            epsilon=jnp.full(shape, epsilon, jnp.float32))
    run_keys = jax.vmap(lambda key: jax.random.split(key)[1])(world_keys(seed, config.n_worlds))
    runs = WorldRun(agents=agents, run_key=run_keys, epoch=jnp.zeros((config.n_worlds,), jnp.int32))
    _, stats = fused_epochs(runs, epochs, agent_config=c, world_params=w, n_epochs=epochs, train=False)
    gems = np.asarray(stats.gems)  # [epochs, W]
    return {"gems": gems.mean(axis=1).tolist(), "gems_per_world": gems.tolist(),
            "mean_gems": float(gems.mean()), "mean_reward": float(np.asarray(stats.rewards).mean())}


# ----------------------------------------------------------------------------------------------
# Timing the modes: the reference configuration at steady state and its matmul floor
# (``benchmarks/iqn_modes.py`` and notebook 04 measure with these).

N_COS = 64  # the IQN's cosine features (labcore.nets.iqn.IQN.n_cos)


def timing_config(mode: str, n_worlds: int = 1, epochs_per_call: int = 1) -> IQNRunConfig:
    """The reference configuration with epsilon 0, so that every act runs the ``n_tau_act``-tau forward
    in every mode (PyTorch would skip it for a random action; JAX computes it either way)."""
    return IQNRunConfig(mode=mode, n_worlds=n_worlds, epochs_per_call=epochs_per_call, epsilon_start=0.0,
                        epsilon_min=0.0)


def warmup_epochs(config: IQNRunConfig) -> int:
    """Epochs after which every buffer allows a train step: size - n_frames - 1 >= batch_size."""
    return -(-(config.batch_size + config.n_frames + 1) // config.max_turns)  # ceiling division


def forward_flops(rows: int, n_tau: int, config: IQNRunConfig) -> dict[str, int]:
    """Multiply-add FLOPs (2 per MAC) of one IQN forward on ``rows`` states with ``n_tau`` taus each, per layer."""
    a = config.agent_config
    L, F, A = a.layer_size, a.in_features, a.n_actions
    return {"head1": 2 * rows * F * L, "cos_embedding": 2 * rows * n_tau * N_COS * L, "ff_1": 2 * rows * n_tau * L * L,
            "advantage": 2 * rows * n_tau * L * A, "value": 2 * rows * n_tau * L}


def epoch_flops(config: IQNRunConfig) -> dict[str, float]:
    """The matmul FLOPs of one epoch (elementwise work, the noise draws and the world are left out).

    Acting: agents x turns greedy forwards of one state with n_tau_act taus. Training, per agent: three
    forwards of batch x n_quantiles rows (local and target on the next states, local on the states)
    and the backward of the last: every layer's weight gradient (as much as its forward) plus the
    input gradient of ff_1, advantage and value (head1's and cos_embedding's inputs are data).
    """
    act = sum(forward_flops(1, config.n_tau_act, config).values()) * config.n_agents * config.max_turns
    fwd = forward_flops(config.batch_size, config.n_quantiles, config)
    backward = sum(fwd.values()) + fwd["ff_1"] + fwd["advantage"] + fwd["value"]
    train = (3 * sum(fwd.values()) + backward) * config.n_agents
    return {"acting": float(act), "training": float(train), "total": float(act + train)}


def timed_block(runner: Runner, epochs: int, per_call: int) -> float:
    """Seconds for ``epochs`` more epochs, ``per_call`` per runner call (compiles excluded: the
    fused runner compiles a new chunk size before its clock starts, see ``JaxFusedRunner``)."""
    if isinstance(runner, JaxFusedRunner):
        runner.compile(per_call)
    started = time.perf_counter()
    done = 0
    while done < epochs:
        k = min(per_call, epochs - done)
        runner.run_epochs(k)
        done += k
    return time.perf_counter() - started
