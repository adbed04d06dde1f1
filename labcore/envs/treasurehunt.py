"""Treasurehunt: the multi-agent gridworld of the IQN port, as pure JAX functions (jit/vmap/scan-able);
the gymnax environment built on them is ``labcore.envs.treasurehunt_env.Treasurehunt``. The world's
description (``TreasurehuntParams``, ``make_params``, ``obs_size``, the entity kinds and ``ACTIONS``) is
defined in ``labcore.envs.treasurehunt_params``, which imports no JAX, and re-exported here.

The world is an H x W grid (10 x 10 by default) with two layers. The border is WALL on both
layers (impassable, value ``wall_value`` = -1). Inside, the bottom layer is SAND and the top
layer holds EMPTY, GEM (value ``gem_value`` = 10) or AGENT (value 0). ``n_agents`` agents (5)
start on distinct random interior cells and there are no gems at the start. The bottom layer
never changes, so only the top layer is stored (``WorldState.top``).

One turn, the same in every world and run mode of the port:

    1. gems spawn: every EMPTY top-layer cell whose uniform draw u satisfies u < spawn_prob
       becomes a GEM (border cells are WALL, so only interior cells can spawn);
    2. every agent observes the world after the spawn (``observe``: one vmap over agents);
    3. every agent picks its action from that observation (the learner's job, not the world's);
    4. agents move one after another in index order 0..n-1 (``move_agents``): the reward is the
       value of the top-layer entity in the target cell (GEM 10, WALL -1, EMPTY 0, AGENT 0); the
       agent moves only if the target is passable (EMPTY or GEM); a collected GEM leaves EMPTY.
       Agent i resolves its move after agents 0..i-1 have moved, so it is blocked by an agent
       that already moved into its target cell and may step into a cell vacated this turn.

The deliberate per-turn observation rule: sorrel (the PyTorch original) observes each agent right
before that agent moves, so agent i sees the moves of agents 0..i-1. Here all agents observe once
per turn, after the spawn and before anyone moves, so that observing and acting are one vmap over
agents (one batched network call instead of n sequential ones). The object-style reference world
(``labcore.torch_ref.treasurehunt``) follows the same rule, so every run mode of the port plays
the identical game; the moves themselves still resolve in index order.

Actions (``ACTIONS``): 0 up (y-1), 1 down (y+1), 2 left (x-1), 3 right (x+1). Positions are
(y, x) = (row, column). Actions must lie in [0, 4); an agent is always on an interior cell, so a
target cell is always on the map.

Observation of one agent: the (2r+1) x (2r+1) window centred on it (r = ``vision_radius`` = 2),
each cell a one-hot over the five kinds [EMPTY, WALL, SAND, GEM, AGENT] with EMPTY encoded as all
zeros (channel 0 is always 0), SUMMED over the two layers:

    border cell             WALL = 2 (wall on both layers)
    interior cell           SAND = 1, plus GEM = 1 or AGENT = 1 when present
    outside the map         WALL = 1
    the observer's cell     SAND = 1, AGENT = 1 (an agent sees itself at the centre)

flattened in (dy, dx, channel) C order: ``obs_size = (2r+1)**2 * 5`` = 125 float32 per agent.

Running one turn inside ``lax.scan`` (the state is a pytree of arrays, params are static)::

    def turn(state, xs):
        uniforms, key = xs                                   # f32[H, W], one key per turn
        state = spawn_gems(state, uniforms, params)
        obs = observe(state, params)                         # f32[n_agents, obs_size]
        actions = policy(obs, key)                           # int32[n_agents]
        state, rewards = move_agents(state, actions, params) # rewards f32[n_agents]
        return state, (obs, actions, rewards)

    state, trajectory = jax.lax.scan(turn, reset(key, params), (uniforms, keys))

Every function works on one world; ``jax.vmap`` over a leading world axis of ``WorldState`` (with
``params`` closed over or passed unbatched) runs many worlds at once.

The same turn, gymnax style (``treasurehunt_env.Treasurehunt``; every agent acts in one ``step``)::

    env = Treasurehunt()
    obs, state = env.reset(key, params)                                      # after the first spawn
    obs, state, rewards, terminated, truncated, info = env.step(key, state, actions, params)
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from labcore.envs.treasurehunt_params import (  # noqa: F401 (the world's description, re-exported: th.TreasurehuntParams)
    ACTIONS,
    AGENT,
    EMPTY,
    GEM,
    N_KINDS,
    SAND,
    WALL,
    TreasurehuntParams,
    make_params,
    obs_size,
)

# TreasurehuntParams lives in a module that imports no JAX (the IQN config holds one); registered
# here, where the functions that take it are, as flax.struct would: a pytree without leaves.
jax.tree_util.register_dataclass(
    TreasurehuntParams, data_fields=[], meta_fields=[field.name for field in dataclasses.fields(TreasurehuntParams)]
)

# (dy, dx) per action, in ACTIONS order.
_MOVES = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]], np.int32)


@struct.dataclass
class WorldState:
    """One world. Every leaf is an array, so states stack along a leading axis for vmap and scan."""

    top: jax.Array  # int32[H, W]: top-layer kind; WALL on the border, EMPTY/GEM/AGENT inside
    agent_pos: jax.Array  # int32[n_agents, 2]: (y, x) of each agent
    turn: jax.Array  # int32[]: turns played since the reset


def _interior_mask(params: TreasurehuntParams) -> np.ndarray:
    """bool[H, W]: True inside the wall border (a host constant, folded into the program)."""
    mask = np.zeros((params.height, params.width), bool)
    mask[1:-1, 1:-1] = True
    return mask


def _bottom_layer(params: TreasurehuntParams) -> np.ndarray:
    """int32[H, W]: the fixed bottom layer, WALL on the border and SAND inside."""
    return np.where(_interior_mask(params), SAND, WALL).astype(np.int32)


def reset_from_positions(agent_pos: jax.Array, params: TreasurehuntParams) -> WorldState:
    """A fresh world (no gems, turn 0) with the agents at ``agent_pos`` int[n_agents, 2] (y, x).

    The positions must be distinct interior cells; that is checked when ``agent_pos`` is a
    concrete array (not under jit/vmap), where a clash would otherwise silently merge agents.
    """
    if not isinstance(agent_pos, jax.core.Tracer):
        host = np.asarray(agent_pos)
        if host.shape != (params.n_agents, 2):
            raise ValueError(f"agent_pos must have shape ({params.n_agents}, 2), got {host.shape}")
        inside = (host[:, 0] >= 1) & (host[:, 0] <= params.height - 2) & (host[:, 1] >= 1) & (host[:, 1] <= params.width - 2)
        if not inside.all():
            raise ValueError(f"agent_pos must be interior cells (1..H-2, 1..W-2), got {host.tolist()}")
        if len({tuple(p) for p in host.tolist()}) != params.n_agents:
            raise ValueError(f"agent_pos must be distinct cells, got {host.tolist()}")
    agent_pos = jnp.asarray(agent_pos, jnp.int32)
    top = jnp.where(_interior_mask(params), EMPTY, WALL).astype(jnp.int32)
    top = top.at[agent_pos[:, 0], agent_pos[:, 1]].set(AGENT)
    return WorldState(top=top, agent_pos=agent_pos, turn=jnp.zeros((), jnp.int32))


def reset(key: jax.Array, params: TreasurehuntParams) -> WorldState:
    """A fresh world with the agents on distinct uniformly random interior cells, no gems, turn 0."""
    inner_h, inner_w = params.height - 2, params.width - 2
    cells = jax.random.choice(key, inner_h * inner_w, (params.n_agents,), replace=False)
    agent_pos = jnp.stack([cells // inner_w + 1, cells % inner_w + 1], axis=-1).astype(jnp.int32)
    return reset_from_positions(agent_pos, params)


def spawn_uniforms(key: jax.Array, params: TreasurehuntParams) -> jax.Array:
    """f32[H, W] uniform draws in [0, 1) for ``spawn_gems`` (one per cell; border draws are unused)."""
    return jax.random.uniform(key, (params.height, params.width), jnp.float32)


def spawn_gems(state: WorldState, uniforms: jax.Array, params: TreasurehuntParams) -> WorldState:
    """Every EMPTY top-layer cell with ``uniforms`` < spawn_prob becomes a GEM. uniforms: f32[H, W].

    The comparison is made in the dtype of ``uniforms`` (float32 from ``spawn_uniforms``), as the
    reference world does with the same array, so injected draws give identical spawns.
    """
    uniforms = jnp.asarray(uniforms)
    # The border is WALL and never EMPTY, so this only ever spawns on interior cells.
    spawn = (state.top == EMPTY) & (uniforms < jnp.asarray(params.spawn_prob, uniforms.dtype))
    return state.replace(top=jnp.where(spawn, GEM, state.top).astype(jnp.int32))


def _summed_one_hot(top: jax.Array, params: TreasurehuntParams) -> jax.Array:
    """f32[H, W, 5]: one-hot of the bottom plus the top layer, EMPTY as all zeros."""
    channels = jnp.arange(N_KINDS)

    def one_hot(layer: jax.Array) -> jax.Array:
        # EMPTY is encoded as all zeros, so channel 0 never lights.
        return ((layer[..., None] == channels) & (channels != EMPTY)).astype(jnp.float32)

    return one_hot(jnp.asarray(_bottom_layer(params))) + one_hot(top)


def observe(state: WorldState, params: TreasurehuntParams) -> jax.Array:
    """f32[n_agents, obs_size]: every agent's window, taken once per turn (module docstring).

    The summed grid is padded by r cells of "outside the map" (WALL = 1) so every window is one
    ``lax.dynamic_slice`` of a fixed size; the padded grid's cell (y, x) + r starts the window of
    an agent at (y, x). One vmap over agents.
    """
    r = params.vision_radius
    side = 2 * r + 1
    grid = _summed_one_hot(state.top, params)  # [H, W, 5]
    outside = jnp.zeros((N_KINDS,), jnp.float32).at[WALL].set(1.0)
    padded = jnp.broadcast_to(outside, (params.height + 2 * r, params.width + 2 * r, N_KINDS))
    padded = jax.lax.dynamic_update_slice(padded, grid, (r, r, 0))

    def window(pos: jax.Array) -> jax.Array:
        patch = jax.lax.dynamic_slice(padded, (pos[0], pos[1], 0), (side, side, N_KINDS))
        return patch.reshape(-1)  # (dy, dx, channel) C order

    return jax.vmap(window)(state.agent_pos)


def move_agents(state: WorldState, actions: jax.Array, params: TreasurehuntParams) -> tuple[WorldState, jax.Array]:
    """Move the agents one after another in index order; turn += 1.

    actions: int[n_agents] in [0, 4) (ACTIONS order). Returns (new state, rewards f32[n_agents]).
    A ``lax.scan`` over agents carries the top layer and the positions, so agent i's move is
    resolved against the world as agents 0..i-1 left it.
    """
    actions = jnp.asarray(actions, jnp.int32)
    moves = jnp.asarray(_MOVES)
    # Reward of stepping onto each top-layer kind; SAND never appears on the top layer.
    values = jnp.array([0.0, params.wall_value, 0.0, params.gem_value, 0.0], jnp.float32)
    passable = jnp.array([True, False, False, True, False])

    def one_agent(carry: tuple[jax.Array, jax.Array], xs: tuple[jax.Array, jax.Array]):
        top, pos = carry
        index, action = xs
        here = pos[index]
        target = here + moves[action]
        kind = top[target[0], target[1]]
        go = passable[kind]
        # Vacate first, then occupy: the target is never ``here`` (every action moves one cell).
        top = top.at[here[0], here[1]].set(jnp.where(go, EMPTY, AGENT))
        top = top.at[target[0], target[1]].set(jnp.where(go, AGENT, kind))
        pos = pos.at[index].set(jnp.where(go, target, here))
        return (top, pos), values[kind]

    indices = jnp.arange(params.n_agents, dtype=jnp.int32)
    (top, agent_pos), rewards = jax.lax.scan(one_agent, (state.top, state.agent_pos), (indices, actions))
    return WorldState(top=top, agent_pos=agent_pos, turn=state.turn + 1), rewards


def gems_on_map(state: WorldState) -> jax.Array:
    """int32[]: gems currently lying on the map (for logging)."""
    return jnp.sum(state.top == GEM, dtype=jnp.int32)
