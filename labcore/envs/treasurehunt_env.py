"""Treasurehunt as a gymnax environment: every agent acts in one ``step``.

Built on the pure functions of ``labcore.envs.treasurehunt``. It lives in its own module because
importing gymnax starts JAX's backends, and the IQN experiment, which imports
``labcore.envs.treasurehunt``, must not do that at import time.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from gymnax.environments import environment, spaces

from labcore.envs.treasurehunt import (
    ACTIONS,
    TreasurehuntParams,
    WorldState,
    gems_on_map,
    move_agents,
    obs_size,
    observe,
    reset,
    spawn_gems,
    spawn_uniforms,
)


class Treasurehunt(environment.Environment):
    """The world as a gymnax environment, with ``TreasurehuntParams`` as its params: every agent
    acts in one ``step``, as in the turn loop of the module docstring.

    ``reset(key, params)``: ``reset`` with the first half of ``split(key)``, then the first turn's
    ``spawn_gems`` with ``spawn_uniforms`` of the second half. ``step(key, state, actions, params)``
    ends the turn and starts the next one: ``move_agents``, then ``spawn_gems`` with
    ``spawn_uniforms`` of the step's key (gymnax's ``step`` passes the first half of
    ``split(key)``; ``step_env`` uses its key as given). Either way the returned observation,
    ``observe`` of the state after the spawn, is the one the agents act on next: the same
    observations, rewards and states as the free functions in that order.

    actions int[n_agents] (each in ``action_space``: every action is always legal, a wall costs
    ``wall_value``, so there is no ``action_mask``); observation f32[n_agents, obs_size]; rewards
    f32[n_agents]. Never terminated; truncated after ``max_turns`` turns, when ``step`` resets by
    itself. ``info["gems_collected"]``: gems picked up this step.
    """

    default_params = TreasurehuntParams()
    name = "Treasurehunt-v0"
    num_actions = len(ACTIONS)  # each agent's

    def action_space(self, params: TreasurehuntParams | None = None) -> spaces.Discrete:
        """Each agent's actions (``step`` takes one per agent)."""
        return spaces.Discrete(len(ACTIONS))

    def observation_space(self, params: TreasurehuntParams) -> spaces.Box:
        return spaces.Box(0.0, 2.0, (params.n_agents, obs_size(params)), jnp.float32)

    def reset_env(self, key: jax.Array, params: TreasurehuntParams) -> tuple[jax.Array, WorldState]:
        world_key, spawn_key = jax.random.split(key)
        state = spawn_gems(reset(world_key, params), spawn_uniforms(spawn_key, params), params)
        return observe(state, params), state

    def step_env(
        self, key: jax.Array, state: WorldState, action: jax.Array, params: TreasurehuntParams
    ) -> tuple[jax.Array, WorldState, jax.Array, jax.Array, dict[str, Any]]:
        moved, rewards = move_agents(state, action, params)
        collected = gems_on_map(state) - gems_on_map(moved)
        state = spawn_gems(moved, spawn_uniforms(key, params), params)
        return observe(state, params), state, rewards, jnp.bool_(False), {"gems_collected": collected}

    def is_truncated(self, state: WorldState, params: TreasurehuntParams) -> jax.Array:
        return state.turn >= params.max_turns

    def is_terminal(self, state: WorldState, params: TreasurehuntParams) -> jax.Array:
        return jnp.bool_(False)
