"""The Vault game: layout, every action, every mask rule, episode ends, vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from labcore.envs import vault
from labcore.envs.vault import Vault, VaultParams

ENV = Vault()
PARAMS = ENV.default_params
MOVE_N, MOVE_E, MOVE_S, MOVE_W, COLLECT = 0, 1, 2, 3, 4
OPEN = {"N": 5, "E": 6, "S": 7, "W": 8}
BLAST = {"N": 9, "E": 10, "S": 11, "W": 12}


def board(**cells):
    """A hand-made state: empty 6x6 board, player at (2, 1), exit at (5, 5), then ``cells``."""
    empty = jnp.zeros((6, 6), bool)
    state = vault.VaultState(
        wall=empty, door=empty, key=empty, gem=empty,
        exit=jnp.array([5, 5], jnp.int32), position=jnp.array([2, 1], jnp.int32),
        keys_held=jnp.int32(0), energy=jnp.int32(PARAMS.start_energy), cooldown=jnp.int32(0),
        gems_collected=jnp.int32(0), time=jnp.int32(0),
    )  # fmt: skip
    for name, value in cells.items():
        if name in ("wall", "door", "key", "gem"):
            value = empty.at[tuple(np.array(value).T)].set(True)
        state = state.replace(**{name: jnp.asarray(value)})
    return state


def step(state, action, params=PARAMS):
    return ENV.step_env(jax.random.key(0), state, jnp.int32(action), params)


def mask_names(state):
    return {vault.ACTION_NAMES[i] for i, ok in enumerate(np.asarray(ENV.action_mask(state, PARAMS))) if ok}


def test_reset_layout_is_valid_for_many_seeds():
    obs, states = jax.vmap(ENV.reset, in_axes=(0, None))(jax.random.split(jax.random.key(0), 500), PARAMS)
    wall, door, key, gem = (np.asarray(getattr(states, n)) for n in ("wall", "door", "key", "gem"))
    assert np.all(door[:, :, 3].sum(1) == 1) and np.all(door.sum((1, 2)) == 1)  # one door, in the divider
    assert np.all(wall[:, :, 3] | door[:, :, 3])  # the divider is closed apart from the door
    assert np.all(key.sum((1, 2)) == 1) and np.all(gem.sum((1, 2)) == PARAMS.num_gems)
    assert np.all(wall.sum((1, 2)) == 5 + PARAMS.num_clutter_walls)
    pos, exit_ = np.asarray(states.position), np.asarray(states.exit)
    assert np.all(pos[:, 1] < 3) and np.all(exit_[:, 1] > 3)
    rows = np.arange(500)
    for grid in (wall, door, gem, key):  # nothing sits under the player or on the exit
        assert not grid[rows, pos[:, 0], pos[:, 1]].any() and not grid[rows, exit_[:, 0], exit_[:, 1]].any()
    assert not (wall & gem).any() and not (wall & key).any() and not (gem & key).any()
    assert obs.grid.shape == (500, 6, 6, 6) and obs.player.shape == (500, 5)
    assert len({tuple(p) for p in pos}) > 10  # layouts really vary


def test_moves_and_their_mask_rules():
    state = board(position=[0, 0], wall=[[1, 0]], door=[[0, 1]])
    assert mask_names(state) == {"blast S"}  # edges north and west, a wall south, a locked door east
    assert mask_names(state.replace(energy=jnp.int32(0))) == set()
    state = board(position=[2, 2])
    assert mask_names(state) == {"move N", "move E", "move S", "move W"}
    for action, expected in ((MOVE_N, [1, 2]), (MOVE_E, [2, 3]), (MOVE_S, [3, 2]), (MOVE_W, [2, 1])):
        _, new, reward, terminated, info = step(state, action)
        np.testing.assert_array_equal(new.position, expected)
        assert float(reward) == pytest.approx(-PARAMS.step_penalty) and not terminated and not info["invalid_action"]
        assert int(new.time) == 1


def test_collect_key_and_gem():
    state = board(key=[[2, 1]], gem=[[2, 2]])
    assert "collect" in mask_names(state)
    _, state, reward, _, _ = step(state, COLLECT)
    assert int(state.keys_held) == 1 and not state.key.any()
    assert float(reward) == pytest.approx(PARAMS.key_reward - PARAMS.step_penalty)
    assert "collect" not in mask_names(state)  # nothing left underfoot
    _, state, _, _, _ = step(state, MOVE_E)
    _, state, reward, _, _ = step(state, COLLECT)
    assert int(state.gems_collected) == 1 and not state.gem.any()
    assert float(reward) == pytest.approx(PARAMS.gem_reward - PARAMS.step_penalty)
    assert float(ENV.get_obs(state, PARAMS).player[3]) == pytest.approx(1 / PARAMS.num_gems)


@pytest.mark.parametrize("direction,cell", [("N", [1, 1]), ("E", [2, 2]), ("S", [3, 1]), ("W", [2, 0])])
def test_open_needs_a_key_and_uses_it(direction, cell):
    state = board(door=[cell])
    assert f"open {direction}" not in mask_names(state)  # no key held
    state = state.replace(keys_held=jnp.int32(1))
    assert mask_names(state) - {f"move {d}" for d in "NESW"} == {f"open {direction}"}
    _, state, reward, _, _ = step(state, OPEN[direction])
    assert not state.door.any() and int(state.keys_held) == 0
    assert float(reward) == pytest.approx(PARAMS.door_reward - PARAMS.step_penalty)
    assert f"move {direction}" in mask_names(state)  # the way is open


@pytest.mark.parametrize("direction,cell", [("N", [1, 1]), ("E", [2, 2]), ("S", [3, 1]), ("W", [2, 0])])
def test_blast_costs_energy_and_starts_a_cooldown(direction, cell):
    state = board(wall=[cell])
    assert f"blast {direction}" in mask_names(state)
    _, state, _, _, _ = step(state, BLAST[direction])
    assert not state.wall.any()
    assert int(state.energy) == PARAMS.start_energy - PARAMS.blast_cost and int(state.cooldown) == PARAMS.blast_cooldown
    state = state.replace(wall=state.wall.at[tuple(cell)].set(True))
    for remaining in range(PARAMS.blast_cooldown, 0, -1):  # cooling down: no blast
        assert int(state.cooldown) == remaining and f"blast {direction}" not in mask_names(state)
        _, state, _, _, _ = step(state, COLLECT)  # an illegal no-op, just to pass time
    assert f"blast {direction}" in mask_names(state)
    _, state, _, _, _ = step(state, BLAST[direction])
    assert int(state.energy) == 0
    state = state.replace(wall=state.wall.at[tuple(cell)].set(True), cooldown=jnp.int32(0))
    assert f"blast {direction}" not in mask_names(state)  # out of energy


def test_illegal_actions_do_nothing_and_are_penalised():
    state = board(position=[0, 0])
    for action in (MOVE_N, COLLECT, OPEN["E"], BLAST["S"]):
        _, new, reward, terminated, info = step(state, action)
        assert bool(info["invalid_action"]) and not terminated
        assert float(reward) == pytest.approx(-PARAMS.step_penalty - PARAMS.invalid_action_penalty)
        for a, b in zip(jax.tree_util.tree_leaves(state.replace(time=new.time)), jax.tree_util.tree_leaves(new)):
            np.testing.assert_array_equal(a, b)


def test_reaching_the_exit_terminates_and_truncation_comes_at_the_step_limit():
    state = board(position=[5, 4])
    _, _, reward, terminated, info = step(state, MOVE_E)
    assert bool(terminated) and bool(info["finished"])
    assert float(reward) == pytest.approx(PARAMS.finish_reward - PARAMS.step_penalty)
    short = PARAMS.replace(max_steps_in_episode=3)
    obs, state = ENV.reset(jax.random.key(1), short)
    ends = []
    for t in range(3):
        mask = np.asarray(ENV.action_mask(state, short))
        legal_move = int(np.flatnonzero(mask[:4])[0]) if mask[:4].any() else COLLECT
        exit_cell = np.asarray(state.exit)
        obs, state, _, terminated, truncated, _ = ENV.step(jax.random.key(t), state, legal_move, short)
        ends.append((bool(terminated), bool(truncated)))
    assert ends[-1] == (False, True) and ends[0] == (False, False)
    assert int(state.time) == 0  # auto-reset after the truncation


def test_vmap_over_1000_envs_equals_one_at_a_time():
    n = 1000
    keys = jax.random.split(jax.random.key(5), n)
    actions = jax.random.randint(jax.random.key(6), (n,), 0, vault.NUM_ACTIONS)
    _, states = jax.vmap(ENV.reset, in_axes=(0, None))(keys, PARAMS)
    batched = jax.jit(jax.vmap(ENV.step, in_axes=(0, 0, 0, None)))(keys, states, actions, PARAMS)
    masks = jax.vmap(ENV.action_mask, in_axes=(0, None))(states, PARAMS)
    single_step = jax.jit(ENV.step)
    for i in range(0, n, 97):
        state_i = jax.tree_util.tree_map(lambda leaf: leaf[i], states)
        one = single_step(keys[i], state_i, actions[i], PARAMS)
        for a, b in zip(jax.tree_util.tree_leaves(one), jax.tree_util.tree_leaves(batched)):
            np.testing.assert_array_equal(a, b[i])
        np.testing.assert_array_equal(ENV.action_mask(state_i, PARAMS), masks[i])


def test_render_draws_the_board():
    _, state = ENV.reset(jax.random.key(0), PARAMS)
    image = ENV.render(state, PARAMS, cell_pixels=10)
    assert image.shape == (60, 60, 3) and image.dtype == np.uint8
    r, c = (int(v) * 10 + 5 for v in np.asarray(state.position))
    assert tuple(image[r, c]) == Vault.COLOURS["player"]
    r, c = (int(v) * 10 + 5 for v in np.asarray(state.exit))
    assert tuple(image[r, c]) == Vault.COLOURS["exit"]


def test_params_with_tracers_work_under_jit():
    custom = VaultParams(max_steps_in_episode=50, blast_cost=2)
    obs, state = jax.jit(ENV.reset)(jax.random.key(0), custom)
    assert float(obs.player[1]) == pytest.approx(1.0)
