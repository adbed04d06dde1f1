"""HyperGrid as a gymnax environment: one trajectory is one episode, the grid is the params.

Built on the pure functions of ``labcore.envs.hypergrid``. It lives in its own module because
importing gymnax starts JAX's backends, and the GFlowNet trainers, which import
``labcore.envs.hypergrid``, must not do that at import time (a launched worker has to join its
cluster, and a notebook can still choose its devices, before any backend starts).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from labcore.envs.hypergrid import HyperGrid, encode, forward_mask, reward, step


@struct.dataclass
class HyperGridState:
    position: jax.Array  # [D] int32, the current point
    time: jax.Array  # [] int32, actions taken this episode


class HyperGridEnv(environment.Environment):
    """HyperGrid as a gymnax environment, with a ``HyperGrid`` as its params.

    ``reset(key, grid)`` starts at the origin. ``step(key, state, action, grid)``: "+1 on d"
    (``step``) gives reward 0; exit (action D) gives R(x) (``reward``) and terminates, and then
    ``step`` resets by itself (gymnax; ``info["final_observation"]`` encodes x). An illegal move
    (coordinate d already H - 1; see ``action_mask``) leaves the state as it is, gives reward 0
    and ``info["invalid_action"]``; an episode is truncated after ``max_actions`` actions, which
    legal play never reaches without exiting. Observation: ``encode(grid, position)``, [D * H]
    float32. The key is not used: the game is deterministic.
    """

    default_params = HyperGrid()
    name = "HyperGrid-v0"
    num_actions = default_params.num_actions  # the default grid's (``action_space(grid).n`` for another one)

    def action_space(self, params: HyperGrid | None = None) -> spaces.Discrete:
        params = self.default_params if params is None else params
        return spaces.Discrete(params.num_actions)

    def observation_space(self, params: HyperGrid) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (params.ndim * params.height,), jnp.float32)

    def reset_env(self, key: jax.Array, params: HyperGrid) -> tuple[jax.Array, HyperGridState]:
        state = HyperGridState(position=jnp.zeros(params.ndim, jnp.int32), time=jnp.int32(0))
        return self.get_obs(state, params), state

    def action_mask(self, state: HyperGridState, params: HyperGrid | None = None) -> jax.Array:
        """[D + 1] bool: ``forward_mask`` of the current point."""
        params = self.default_params if params is None else params
        return forward_mask(params, state.position)

    def step_env(
        self, key: jax.Array, state: HyperGridState, action: jax.Array, params: HyperGrid
    ) -> tuple[jax.Array, HyperGridState, jax.Array, jax.Array, dict[str, Any]]:
        action = jnp.asarray(action, jnp.int32)
        legal = self.action_mask(state, params)[action]
        exiting = action == params.exit_action  # always legal
        position = jnp.where(legal, step(params, state.position, action), state.position)
        gain = jnp.where(exiting, reward(params, state.position), 0.0).astype(jnp.float32)
        new_state = HyperGridState(position=position, time=state.time + 1)
        return self.get_obs(new_state, params), new_state, gain, exiting, {"invalid_action": ~legal}

    def is_terminal(self, state: HyperGridState, params: HyperGrid) -> jax.Array:
        # Only the exit action terminates, and step_env reports that itself.
        return jnp.bool_(False)

    def get_obs(self, state: HyperGridState, params: HyperGrid | None = None, key: jax.Array | None = None) -> jax.Array:
        params = self.default_params if params is None else params
        return encode(params, state.position)
