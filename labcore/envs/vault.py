"""Vault: a small tactical grid game where action masking matters. Pure JAX, gymnax API.

The board is 6x6. A wall runs down column 3 and splits it in two, with one locked door in it.
The player starts on the left, where the key lies; the exit is on the right. Three gems are
scattered over free cells, and a few extra wall blocks clutter both sides. Every reset draws a
new layout.

Actions (13, of three kinds):

    0-3   move north / east / south / west        one cell; not into a wall, a locked door or
                                                   off the board
    4     collect                                  pick up the key or gem on the player's cell
    5-8   open door north / east / south / west    unlock the adjacent door; needs a key held
                                                   (the key is used up)
    9-12  blast north / east / south / west        destroy an adjacent wall block (not the
                                                   board edge); costs ``blast_cost`` energy
                                                   and starts a cooldown of ``blast_cooldown``
                                                   steps

``action_mask(state, params)`` says which actions are legal now; the mask changes with the
state: walls and edges (moves), what lies underfoot (collect), keys held (open), energy and
cooldown (blast). The dividing wall can be blasted too, so a player can skip the key and pay
energy instead.

Rewards: ``gem_reward`` per gem collected, ``key_reward`` for the key, ``door_reward`` for
opening the door, ``finish_reward`` for stepping onto the exit (which ends the episode,
terminated), ``-step_penalty`` every step. An illegal action (possible only without masking)
does nothing and costs ``invalid_action_penalty``. Episodes are truncated after
``max_steps_in_episode`` steps.

Observation (structured, ``VaultObservation``):

    grid    [6, 6, 6] float32, one channel per feature: wall, locked door, key, gem, exit, player
    player  [5] float32: keys held, energy / start_energy, cooldown / blast_cooldown,
            gems collected / num_gems, time / max_steps_in_episode

``FlattenObservation`` (labcore.envs.wrappers) turns it into one [221] vector.
``render(state, params)`` draws an RGB image.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

SIZE = 6
DIVIDER_COLUMN = 3
NUM_ACTIONS = 13
ACTION_NAMES = (
    "move N", "move E", "move S", "move W",
    "collect",
    "open N", "open E", "open S", "open W",
    "blast N", "blast E", "blast S", "blast W",
)  # fmt: skip
# (row, column) offsets for north, east, south, west
DIRECTIONS = jnp.array([[-1, 0], [0, 1], [1, 0], [0, -1]], jnp.int32)
GRID_CHANNELS = ("wall", "door", "key", "gem", "exit", "player")
PLAYER_FEATURES = ("keys", "energy", "cooldown", "gems", "time")


@struct.dataclass
class VaultState:
    """The whole game state; every leaf an array, so the state vmaps and scans."""

    wall: jax.Array  # [6, 6] bool
    door: jax.Array  # [6, 6] bool, locked doors
    key: jax.Array  # [6, 6] bool, keys lying on the board
    gem: jax.Array  # [6, 6] bool
    exit: jax.Array  # [2] int32 (row, column)
    position: jax.Array  # [2] int32 (row, column)
    keys_held: jax.Array  # [] int32
    energy: jax.Array  # [] int32
    cooldown: jax.Array  # [] int32, steps until the next blast is allowed
    gems_collected: jax.Array  # [] int32
    time: jax.Array  # [] int32


@struct.dataclass
class VaultParams:
    max_steps_in_episode: int = 100
    # Layout sizes are static (part of the compiled program's shape logic), the rest are values.
    num_gems: int = struct.field(pytree_node=False, default=3)
    num_clutter_walls: int = struct.field(pytree_node=False, default=4)
    start_energy: int = 6
    blast_cost: int = 3
    blast_cooldown: int = 3
    gem_reward: float = 1.0
    key_reward: float = 0.5
    door_reward: float = 0.5
    finish_reward: float = 5.0
    step_penalty: float = 0.01
    invalid_action_penalty: float = 0.1


class VaultObservation(NamedTuple):
    grid: jax.Array  # [6, 6, 6] float32
    player: jax.Array  # [5] float32


def _in_board(cell: jax.Array) -> jax.Array:
    return jnp.all((cell >= 0) & (cell < SIZE), axis=-1)


def _at(board: jax.Array, cell: jax.Array) -> jax.Array:
    """board[cell], with cells off the board reading False."""
    clipped = jnp.clip(cell, 0, SIZE - 1)
    return board[clipped[..., 0], clipped[..., 1]] & _in_board(cell)


class Vault(environment.Environment):
    """The Vault game (see the module docstring). ``step`` and ``reset`` come from gymnax."""

    @property
    def default_params(self) -> VaultParams:
        return VaultParams()

    @property
    def name(self) -> str:
        return "Vault-v0"

    @property
    def num_actions(self) -> int:
        return NUM_ACTIONS

    def action_space(self, params: VaultParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(NUM_ACTIONS)

    def observation_space(self, params: VaultParams) -> spaces.Dict:
        return spaces.Dict(
            {
                "grid": spaces.Box(0.0, 1.0, (SIZE, SIZE, len(GRID_CHANNELS)), jnp.float32),
                "player": spaces.Box(0.0, jnp.inf, (len(PLAYER_FEATURES),), jnp.float32),
            }
        )

    # -- layout -------------------------------------------------------------------------------

    def reset_env(self, key: jax.Array, params: VaultParams) -> tuple[VaultObservation, VaultState]:
        door_key, order_key = jax.random.split(key)
        rows = jnp.arange(SIZE)[:, None]
        columns = jnp.arange(SIZE)[None, :]
        divider = columns == DIVIDER_COLUMN
        door_row = jax.random.randint(door_key, (), 0, SIZE)
        door = divider & (rows == door_row)
        # Everything else is placed on distinct free cells in a random order: player and key on
        # the left, exit on the right, then gems, then clutter walls anywhere left.
        free = ~divider
        left = free & (columns < DIVIDER_COLUMN)
        right = free & (columns > DIVIDER_COLUMN)
        scores = jax.random.uniform(order_key, (5, SIZE, SIZE))

        def pick(mask: jax.Array, score: jax.Array) -> jax.Array:
            flat = jnp.argmax(jnp.where(mask, score, -1.0).ravel())
            return jnp.stack([flat // SIZE, flat % SIZE]).astype(jnp.int32)

        def one_hot(cell: jax.Array) -> jax.Array:
            return (rows == cell[0]) & (columns == cell[1])

        position = pick(left, scores[0])
        key_cell = pick(left & ~one_hot(position), scores[1])
        exit_cell = pick(right, scores[2])
        taken = one_hot(position) | one_hot(key_cell) | one_hot(exit_cell)
        # The n highest-scoring free cells: gems, then clutter on the next ones.
        gem = self._top_cells(free & ~taken, scores[3], params.num_gems)
        clutter = self._top_cells(free & ~taken & ~gem, scores[4], params.num_clutter_walls)
        state = VaultState(
            wall=(divider & ~door) | clutter,
            door=door,
            key=one_hot(key_cell),
            gem=gem,
            exit=exit_cell,
            position=position,
            keys_held=jnp.int32(0),
            energy=jnp.int32(params.start_energy),
            cooldown=jnp.int32(0),
            gems_collected=jnp.int32(0),
            time=jnp.int32(0),
        )
        return self.get_obs(state, params), state

    @staticmethod
    def _top_cells(mask: jax.Array, score: jax.Array, count: int) -> jax.Array:
        """[6, 6] bool: the ``count`` cells of ``mask`` with the highest scores."""
        flat = jnp.where(mask, score, -1.0).ravel()
        threshold = jnp.sort(flat)[-count] if count > 0 else jnp.inf
        return ((flat >= threshold) & (flat >= 0.0)).reshape(SIZE, SIZE)

    # -- rules --------------------------------------------------------------------------------

    def action_mask(self, state: VaultState, params: VaultParams | None = None) -> jax.Array:
        """[13] bool: which actions are legal in ``state``."""
        params = self.default_params if params is None else params
        neighbours = state.position[None, :] + DIRECTIONS  # [4, 2]
        on_board = _in_board(neighbours)
        wall_next = _at(state.wall, neighbours)
        door_next = _at(state.door, neighbours)
        can_move = on_board & ~wall_next & ~door_next
        here = (state.position[0], state.position[1])
        can_collect = state.key[here] | state.gem[here]
        can_open = door_next & (state.keys_held > 0)
        blast_ready = (state.energy >= params.blast_cost) & (state.cooldown == 0)
        can_blast = wall_next & blast_ready
        return jnp.concatenate([can_move, can_collect[None], can_open, can_blast])

    def step_env(
        self, key: jax.Array, state: VaultState, action: jax.Array, params: VaultParams
    ) -> tuple[VaultObservation, VaultState, jax.Array, jax.Array, dict[str, Any]]:
        action = jnp.asarray(action, jnp.int32)
        legal = self.action_mask(state, params)[action]
        kind = jnp.select([action < 4, action == 4, action < 9], [0, 1, 2], 3)  # move, collect, open, blast
        direction = DIRECTIONS[jnp.where(action < 4, action, (action - 5) % 4)]
        target = state.position + direction
        target_cell = tuple(jnp.clip(target, 0, SIZE - 1))
        here = (state.position[0], state.position[1])

        moved = legal & (kind == 0)
        collected = legal & (kind == 1)
        opened = legal & (kind == 2)
        blasted = legal & (kind == 3)
        picked_key = collected & state.key[here]
        picked_gem = collected & state.gem[here]

        position = jnp.where(moved, target, state.position)
        finished = moved & jnp.all(target == state.exit)
        new_state = state.replace(
            wall=state.wall.at[target_cell].set(state.wall[target_cell] & ~blasted),
            door=state.door.at[target_cell].set(state.door[target_cell] & ~opened),
            key=state.key.at[here].set(state.key[here] & ~picked_key),
            gem=state.gem.at[here].set(state.gem[here] & ~picked_gem),
            position=position,
            keys_held=state.keys_held + picked_key.astype(jnp.int32) - opened.astype(jnp.int32),
            energy=state.energy - jnp.where(blasted, params.blast_cost, 0),
            cooldown=jnp.where(blasted, params.blast_cooldown, jnp.maximum(state.cooldown - 1, 0)),
            gems_collected=state.gems_collected + picked_gem.astype(jnp.int32),
            time=state.time + 1,
        )
        reward = (
            params.gem_reward * picked_gem
            + params.key_reward * picked_key
            + params.door_reward * opened
            + params.finish_reward * finished
            - params.step_penalty
            - params.invalid_action_penalty * ~legal
        ).astype(jnp.float32)
        info = {"invalid_action": ~legal, "finished": finished}
        return self.get_obs(new_state, params), new_state, reward, finished, info

    def is_terminal(self, state: VaultState, params: VaultParams) -> jax.Array:
        # Only stepping onto the exit terminates, and step_env reports that itself.
        return jnp.bool_(False)

    def get_obs(self, state: VaultState, params: VaultParams | None = None, key: jax.Array | None = None) -> VaultObservation:
        params = self.default_params if params is None else params
        rows = jnp.arange(SIZE)[:, None]
        columns = jnp.arange(SIZE)[None, :]
        exit_board = (rows == state.exit[0]) & (columns == state.exit[1])
        player_board = (rows == state.position[0]) & (columns == state.position[1])
        grid = jnp.stack([state.wall, state.door, state.key, state.gem, exit_board, player_board], axis=-1)
        player = jnp.stack(
            [
                state.keys_held.astype(jnp.float32),
                state.energy / jnp.maximum(params.start_energy, 1),
                state.cooldown / jnp.maximum(params.blast_cooldown, 1),
                state.gems_collected / max(params.num_gems, 1),
                state.time / params.max_steps_in_episode,
            ]
        ).astype(jnp.float32)
        return VaultObservation(grid=grid.astype(jnp.float32), player=player)

    # -- pictures -----------------------------------------------------------------------------

    COLOURS = {
        "floor": (235, 235, 228),
        "wall": (70, 70, 80),
        "door": (150, 90, 40),
        "key": (230, 190, 30),
        "gem": (60, 170, 220),
        "exit": (60, 180, 90),
        "player": (210, 50, 60),
    }

    def render(self, state: VaultState, params: VaultParams | None = None, cell_pixels: int = 24) -> np.ndarray:
        """[6 * cell_pixels, 6 * cell_pixels, 3] uint8 picture of the board (host-side, numpy)."""
        board = np.zeros((SIZE, SIZE, 3), np.uint8)
        board[:] = self.COLOURS["floor"]
        for name in ("wall", "door", "key", "gem"):
            board[np.asarray(getattr(state, name))] = self.COLOURS[name]
        board[tuple(np.asarray(state.exit))] = self.COLOURS["exit"]
        image = np.kron(board, np.ones((cell_pixels, cell_pixels, 1), np.uint8))
        # the player as a smaller square, so an item underneath stays visible at the edges
        r, c = (int(v) * cell_pixels for v in np.asarray(state.position))
        margin = cell_pixels // 4
        image[r + margin : r + cell_pixels - margin, c + margin : c + cell_pixels - margin] = self.COLOURS["player"]
        image[::cell_pixels, :] = image[:, ::cell_pixels] = 200  # grid lines
        return image
