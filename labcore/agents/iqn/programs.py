"""The compiled JAX programs of the experiment: the key schedule, one turn, the fused epoch.

The three JAX run modes (``labcore.agents.iqn.runners``) and ``labcore.agents.iqn.run.evaluate``
are built from these pure functions of one world (``play_turn``, vmapped over agents inside) and
of W worlds at once (``fused_epoch``, ``fused_epochs``: leaves with a leading world axis).

One turn, identical in every mode (the port's rule, see ``labcore.envs.treasurehunt``): gems spawn;
every agent observes the world once (after the spawn, before anyone moves); every agent picks an
action from its stacked frames; the agents move one after another in index order; every agent
stores (obs, action, reward, done=0). Sorrel observes each agent right before it moves; observing
all agents once per turn is what lets acting be one vmap over agents, and the object-style world
is driven the same way, so all four modes play the identical game.

Randomness. The three JAX modes share one key schedule, so that they make the same draws and can
be compared value for value:

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
holds them to 1e-5). A fused run of n worlds equals n single-world runs with world keys
``fold_in(key(seed), w)`` (``world_keys``). (The ``pytorch`` mode uses its own generators.)

The JAX modes compile their programs with ``CPU_COMPILER_OPTIONS`` on the CPU (see there).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from labcore.agents.iqn import core as iqn
from labcore.agents.iqn import frame_buffer as fb
from labcore.envs import treasurehunt as th


# ----------------------------------------------------------------------------------------------
# Keys (shared by the three JAX modes)


class EpochKeys(NamedTuple):
    """Every draw of one epoch of one world: reset [] key; spawn [T] keys; act [T, n_agents] keys;
    learn [n_agents] keys (T = max_turns)."""

    reset: jax.Array
    spawn: jax.Array
    act: jax.Array
    learn: jax.Array


def world_keys(seed: int, num_worlds: int) -> jax.Array:
    """[num_worlds] keys, world w's = fold_in(key(seed), w): independent of num_worlds, so world w of
    a many-world run is the single-world run with that key."""
    root = jax.random.key(seed)
    return jax.vmap(lambda w: jax.random.fold_in(root, w))(jnp.arange(num_worlds, dtype=jnp.uint32))


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
# much slower than XLA's own loop (measured on a 2-core x86 CPU, model not recorded: 8.5 ms of a
# 27 ms train step at the default sizes); limiting YNNPACK to plain dots avoided it there (about
# 30 ms less per epoch of 5 agents). The option is
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


def start_epoch_all(agents: iqn.AgentState, epoch: jax.Array, agent_config: iqn.IQNConfig) -> iqn.AgentState:
    """``iqn.start_epoch`` of every agent of one world (leaves [n, ...])."""
    return jax.vmap(functools.partial(iqn.start_epoch, config=agent_config), in_axes=(0, None))(agents, epoch)


def end_epoch_all(agents: iqn.AgentState, agent_config: iqn.IQNConfig) -> iqn.AgentState:
    """``iqn.end_epoch`` (epsilon decay) of every agent of one world (leaves [n, ...])."""
    return jax.vmap(functools.partial(iqn.end_epoch, config=agent_config))(agents)


def play_turn(world: th.WorldState, agents: iqn.AgentState, spawn_key: jax.Array, act_keys: jax.Array,
              agent_config: iqn.IQNConfig, world_params: th.TreasurehuntParams
              ) -> tuple[th.WorldState, iqn.AgentState, jax.Array, jax.Array]:
    """One turn of one world: spawn, observe all, act all (one vmap), move in order, remember all.

    agents: leaves [n, ...]; act_keys: [n] keys. Returns (world, agents, rewards f32[n], gems
    collected i32[]). Gems collected = gems on the map after the spawn minus after the moves (moves
    only ever remove gems), which does not depend on the reward values.

    Acting and remembering are ``iqn.act`` and ``iqn.remember`` (the rows ``frame_buffer.buffer_add``
    writes) in another order of the same writes: the observation goes into its ring row first, the
    stacked state is then read from the ring (rows idx - n_frames + 1 .. idx, the same values as
    ``stacked_state``), and the action, reward and done follow. Reading the ring before writing it
    made XLA copy every agent's whole ring twice per turn (2 x 2.5 MB at the default sizes); this
    order updates it in place. tests/test_iqn_modes.py checks the result against the port's functions called one by one.
    """
    c = agent_config
    world = th.spawn_gems(world, th.spawn_uniforms(spawn_key, world_params), world_params)
    gems_before = th.gems_on_map(world)
    obs = th.observe(world, world_params)  # [n, obs_size]
    buf = agents.buffer
    states = jax.vmap(lambda ring, row, i: ring.at[i].set(row))(buf.states, obs, buf.idx)
    rows = (buf.idx[:, None] - (c.n_frames - 1) + jnp.arange(c.n_frames)) % c.buffer_size  # [n, n_frames], oldest first
    stacked = jax.vmap(lambda ring, r: ring[r].reshape(c.in_features))(states, rows)  # [n, n_frames * obs_size]
    actions = jax.vmap(functools.partial(iqn.select_action, config=c))(agents.params, stacked, agents.epsilon, act_keys)
    world, rewards = th.move_agents(world, actions, world_params)

    def store(values: jax.Array, value: jax.Array) -> jax.Array:
        return jax.vmap(lambda ring, i, v: ring.at[i].set(v))(values, buf.idx, value.astype(values.dtype))

    # done = 0 on every step, as the original stores it.
    buf = fb.FrameBuffer(states=states, actions=store(buf.actions, actions), rewards=store(buf.rewards, rewards),
                         dones=store(buf.dones, jnp.zeros_like(rewards)), idx=(buf.idx + 1) % c.buffer_size,
                         size=jnp.minimum(buf.size + 1, c.buffer_size))
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
    [W * n, ...] without a copy. Vmapping them instead makes XLA:CPU run the backward pass's matmuls
    as batched matmuls, which ran slower than the same matmuls one agent at a time (measured on a
    2-core x86 CPU, model not recorded, jaxlib 0.10, at the default sizes: 5 agents vmapped
    0.18-0.20 s, mapped 0.13 s per epoch; 8 worlds with the train steps vmapped over worlds, 5.3 s
    per epoch). The numbers agree up to float rounding.

    train=False plays without learning and without epsilon decay (evaluation). Returns (runs,
    stats) with stats leaves [W, ...].
    """
    n, turns = world_params.n_agents, world_params.max_turns
    keys = jax.vmap(lambda key, epoch: epoch_keys(key, epoch, n, turns))(runs.run_key, runs.epoch)
    agents = jax.vmap(functools.partial(start_epoch_all, agent_config=agent_config))(runs.agents, runs.epoch)
    worlds = jax.vmap(lambda key: th.reset(key, world_params))(keys.reset)
    # Only the buffers change during the turns: carrying them alone keeps the parameters and the
    # optimiser state out of the loop (loop-invariant operands, nothing copied per turn).
    frozen = agents

    def world_turn(world: th.WorldState, agents: iqn.AgentState, spawn_key: jax.Array, act_keys: jax.Array):
        return play_turn(world, agents, spawn_key, act_keys, agent_config, world_params)

    def turn(carry: tuple[th.WorldState, fb.FrameBuffer], xs: tuple[jax.Array, jax.Array]):
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
        num_worlds = runs.epoch.shape[0]
        flat, learn_keys = jax.tree_util.tree_map(lambda leaf: leaf.reshape(num_worlds * n, *leaf.shape[2:]),
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

        flat, losses = jax.lax.fori_loop(0, num_worlds * n, learn_one, (flat, jnp.zeros((num_worlds * n,), jnp.float32)))
        agents, losses = jax.tree_util.tree_map(lambda leaf: leaf.reshape(num_worlds, n, *leaf.shape[1:]), (flat, losses))
        agents = jax.vmap(functools.partial(end_epoch_all, agent_config=agent_config))(agents)
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
