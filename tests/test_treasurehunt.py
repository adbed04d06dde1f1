"""Treasurehunt: every rule of the JAX world, its observation layout, and whole-epoch parity with
the object-style reference world (labcore.torch_ref.treasurehunt) under identical starts, spawn
draws and actions; plus vmap over worlds and jit without retracing; and the gymnax interface
(Treasurehunt): the free functions' game step by step, jit, vmap, play_episodes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from labcore import evaluation
from labcore.envs import treasurehunt as th
from labcore.envs import treasurehunt_env
from labcore.envs import wrappers
from labcore.torch_ref.treasurehunt import TreasurehuntWorld

PARAMS = th.make_params()
UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3
# Jitted once per params (static): eager lax.scan would recompile its closure on every call.
move_agents = jax.jit(th.move_agents, static_argnums=2)
reset = jax.jit(th.reset, static_argnums=1)


def world(agents, gems=(), params=PARAMS) -> th.WorldState:
    """A hand-made JAX world: agents at ``agents`` [(y, x), ...], gems at ``gems``."""
    state = th.reset_from_positions(np.array(agents, np.int32).reshape(-1, 2), params)
    top = state.top
    for y, x in gems:
        top = top.at[y, x].set(th.GEM)
    return state.replace(top=top)


def move(state, actions, params=PARAMS):
    new_state, rewards = move_agents(state, jnp.array(actions, jnp.int32), params)
    return new_state, np.asarray(rewards)


def params_for(n_agents: int, **overrides) -> th.TreasurehuntParams:
    return th.make_params(n_agents=n_agents, **overrides)


# -- params ------------------------------------------------------------------------------------


def test_default_params_and_obs_size():
    assert (PARAMS.height, PARAMS.width, PARAMS.n_agents, PARAMS.vision_radius, PARAMS.max_turns) == (10, 10, 5, 2, 50)
    assert (PARAMS.gem_value, PARAMS.wall_value, PARAMS.spawn_prob) == (10.0, -1.0, 0.02)
    assert th.obs_size(PARAMS) == 125
    assert th.obs_size(th.make_params(vision_radius=3)) == 7 * 7 * 5
    assert th.ACTIONS == ("up", "down", "left", "right")
    assert (th.EMPTY, th.WALL, th.SAND, th.GEM, th.AGENT) == (0, 1, 2, 3, 4)
    # numpy integers are normalised, so equal params hash equal (jit cache keys)
    assert th.make_params(height=np.int64(10)) == PARAMS and hash(th.make_params(height=np.int64(10))) == hash(PARAMS)


@pytest.mark.parametrize(
    "field, value",
    [
        ("height", 2), ("width", 1), ("height", 7.5), ("width", True),
        ("n_agents", 0), ("n_agents", 65),  # 10 x 10 has 64 interior cells
        ("spawn_prob", -0.1), ("spawn_prob", 1.5), ("gem_value", float("nan")), ("wall_value", "x"),
        ("vision_radius", -1), ("max_turns", 0),
    ],
)  # fmt: skip
def test_make_params_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        th.make_params(**{field: value})


def test_make_params_rejects_unknown_fields():
    with pytest.raises(ValueError, match="heigth"):
        th.make_params(heigth=10)


def test_reference_world_rejects_bad_values():
    with pytest.raises(ValueError, match="n_agents"):
        TreasurehuntWorld(n_agents=65)
    with pytest.raises(ValueError, match="spawn_prob"):
        TreasurehuntWorld(spawn_prob=2.0)
    with pytest.raises(ValueError, match="action"):
        TreasurehuntWorld().move(0, 4)


# -- reset -------------------------------------------------------------------------------------


@pytest.mark.parametrize("height, width, n_agents", [(10, 10, 5), (4, 5, 6)])  # the second fills the interior
def test_reset_places_agents_on_distinct_interior_cells(height, width, n_agents):
    params = th.make_params(height=height, width=width, n_agents=n_agents)
    states = jax.vmap(reset, in_axes=(0, None))(jax.random.split(jax.random.key(0), 300), params)
    pos, top = np.asarray(states.agent_pos), np.asarray(states.top)
    assert pos.shape == (300, n_agents, 2) and pos.dtype == np.int32 and top.dtype == np.int32
    assert pos[..., 0].min() >= 1 and pos[..., 0].max() <= height - 2
    assert pos[..., 1].min() >= 1 and pos[..., 1].max() <= width - 2
    for p in pos:
        assert len({tuple(c) for c in p}) == n_agents
    rows = np.arange(300)[:, None]
    assert np.all(top[rows, pos[..., 0], pos[..., 1]] == th.AGENT)
    assert np.all((top == th.AGENT).sum((1, 2)) == n_agents)
    assert not np.any(top == th.GEM)
    border = np.ones((height, width), bool)
    border[1:-1, 1:-1] = False
    assert np.all(top[:, border] == th.WALL) and not np.any(top[:, ~border] == th.WALL)
    assert np.all(np.asarray(states.turn) == 0)
    if n_agents < (height - 2) * (width - 2):
        assert len({tuple(p.ravel()) for p in pos}) > 250  # starts really vary


def test_reset_from_positions_checks_concrete_positions():
    with pytest.raises(ValueError, match="interior"):
        th.reset_from_positions(np.array([[0, 3], [2, 2], [3, 3], [4, 4], [5, 5]]), PARAMS)
    with pytest.raises(ValueError, match="distinct"):
        th.reset_from_positions(np.array([[2, 2], [2, 2], [3, 3], [4, 4], [5, 5]]), PARAMS)
    with pytest.raises(ValueError, match="shape"):
        th.reset_from_positions(np.array([[2, 2], [3, 3]]), PARAMS)


# -- spawn -------------------------------------------------------------------------------------


def test_gems_spawn_only_on_empty_interior_cells_with_u_below_spawn_prob():
    params = params_for(2, spawn_prob=0.25)
    state = world([(2, 2), (5, 6)], gems=[(7, 7)], params=params)
    # u = 0 everywhere: every EMPTY cell spawns, border WALLs, AGENTs and the GEM keep their kind
    full = th.spawn_gems(state, jnp.zeros((10, 10), jnp.float32), params)
    top = np.asarray(full.top)
    expected = np.asarray(state.top).copy()
    expected[expected == th.EMPTY] = th.GEM
    np.testing.assert_array_equal(top, expected)
    assert int(th.gems_on_map(full)) == 64 - 2
    # u == spawn_prob does not spawn (strict <); a patterned draw spawns exactly where u < p
    assert int(th.gems_on_map(th.spawn_gems(state, jnp.full((10, 10), 0.25, jnp.float32), params))) == 1
    u = np.asarray(jax.random.uniform(jax.random.key(3), (10, 10)), np.float32)
    spawned = np.asarray(th.spawn_gems(state, u, params).top)
    initial = np.asarray(state.top)
    np.testing.assert_array_equal(spawned == th.GEM, (initial == th.GEM) | ((initial == th.EMPTY) & (u < 0.25)))
    assert 0 < (spawned == th.GEM).sum() < 62


def test_spawn_uniforms_shape_and_range():
    u = np.asarray(th.spawn_uniforms(jax.random.key(1), PARAMS))
    assert u.shape == (10, 10) and u.dtype == np.float32 and 0.0 <= u.min() and u.max() < 1.0


# -- moves -------------------------------------------------------------------------------------


def test_each_action_moves_one_cell():
    state = world([(4, 4)], params=params_for(1))
    for action, target in [(UP, (3, 4)), (DOWN, (5, 4)), (LEFT, (4, 3)), (RIGHT, (4, 5))]:
        moved, rewards = move(state, [action], params_for(1))
        assert tuple(np.asarray(moved.agent_pos)[0]) == target and rewards[0] == 0.0
        top = np.asarray(moved.top)
        assert top[target] == th.AGENT and top[4, 4] == th.EMPTY and int(moved.turn) == 1


def test_walls_block_with_wall_value():
    params = params_for(1, wall_value=-1.0)
    state = world([(1, 1)], params=params)
    for action in (UP, LEFT):
        moved, rewards = move(state, [action], params)
        assert rewards[0] == -1.0 and tuple(np.asarray(moved.agent_pos)[0]) == (1, 1)
        np.testing.assert_array_equal(np.asarray(moved.top), np.asarray(state.top))


def test_agents_block_with_zero_and_the_blocked_agent_stays():
    params = params_for(2)
    state = world([(3, 3), (3, 4)], params=params)
    moved, rewards = move(state, [RIGHT, UP], params)  # agent 0 runs into agent 1, which then leaves
    np.testing.assert_array_equal(rewards, [0.0, 0.0])
    np.testing.assert_array_equal(np.asarray(moved.agent_pos), [[3, 3], [2, 4]])
    top = np.asarray(moved.top)
    assert top[3, 3] == th.AGENT and top[2, 4] == th.AGENT and top[3, 4] == th.EMPTY


def test_gem_gives_gem_value_and_leaves_empty():
    params = params_for(1)
    state = world([(3, 3)], gems=[(3, 4), (6, 6)], params=params)
    moved, rewards = move(state, [RIGHT], params)
    assert rewards[0] == 10.0 and tuple(np.asarray(moved.agent_pos)[0]) == (3, 4)
    assert int(th.gems_on_map(state)) == 2 and int(th.gems_on_map(moved)) == 1
    back, rewards = move(moved, [LEFT], params)  # the gem is gone: stepping back and forth pays 0
    again, rewards_again = move(back, [RIGHT], params)
    assert rewards[0] == 0.0 and rewards_again[0] == 0.0 and np.asarray(again.top)[3, 3] == th.EMPTY


def test_agents_move_in_index_order():
    params = params_for(2)
    # both head for (3, 4): agent 0 resolves first and takes it, agent 1 is blocked with 0
    moved, rewards = move(world([(3, 3), (3, 5)], params=params), [RIGHT, LEFT], params)
    np.testing.assert_array_equal(np.asarray(moved.agent_pos), [[3, 4], [3, 5]])
    np.testing.assert_array_equal(rewards, [0.0, 0.0])
    # the same race for a gem: the first collects 10, the second is blocked by the first
    moved, rewards = move(world([(3, 3), (3, 5)], gems=[(3, 4)], params=params), [RIGHT, LEFT], params)
    np.testing.assert_array_equal(rewards, [10.0, 0.0])
    np.testing.assert_array_equal(np.asarray(moved.agent_pos), [[3, 4], [3, 5]])
    # a later agent may step into a cell vacated earlier in the same turn ...
    moved, _ = move(world([(3, 4), (3, 3)], params=params), [RIGHT, RIGHT], params)
    np.testing.assert_array_equal(np.asarray(moved.agent_pos), [[3, 5], [3, 4]])
    # ... but an earlier agent is blocked by a later one that has not moved yet
    moved, _ = move(world([(3, 3), (3, 4)], params=params), [RIGHT, RIGHT], params)
    np.testing.assert_array_equal(np.asarray(moved.agent_pos), [[3, 3], [3, 5]])


# -- observation -------------------------------------------------------------------------------


def expected_window(cells: dict[tuple[int, int], list[int]], side: int = 5) -> np.ndarray:
    """A [side, side, 5] window that reads SAND everywhere except ``cells`` {(dy, dx): channel values}."""
    window = np.zeros((side, side, 5), np.float32)
    window[..., th.SAND] = 1.0
    for (dy, dx), values in cells.items():
        window[dy, dx] = values
    return window


def test_observation_values_at_the_border_outside_and_inside():
    params = params_for(2)
    state = world([(1, 1), (1, 3)], gems=[(2, 2)], params=params)
    obs = np.asarray(th.observe(state, params))
    assert obs.shape == (2, 125) and obs.dtype == np.float32
    assert np.all(obs.reshape(2, 5, 5, 5)[..., th.EMPTY] == 0.0)
    outside, border = [0, 1, 0, 0, 0], [0, 2, 0, 0, 0]
    cells = {}
    # agent 0 at (1, 1): window rows/columns cover y, x = -1..3
    for i in range(5):
        cells[(0, i)] = cells[(i, 0)] = outside  # y = -1 or x = -1
    for i in range(1, 5):
        cells[(1, i)] = cells[(i, 1)] = border  # y = 0 or x = 0
    cells[(2, 2)] = [0, 0, 1, 0, 1]  # itself: SAND + AGENT
    cells[(2, 4)] = [0, 0, 1, 0, 1]  # agent 1 at (1, 3)
    cells[(3, 3)] = [0, 0, 1, 1, 0]  # the gem at (2, 2): SAND + GEM
    np.testing.assert_array_equal(obs[0].reshape(5, 5, 5), expected_window(cells))
    # agent 1 at (1, 3): x = 1..5 is all on the map; y = -1 outside, y = 0 border
    cells = {(0, i): outside for i in range(5)} | {(1, i): border for i in range(5)}
    cells[(2, 2)] = [0, 0, 1, 0, 1]  # itself
    cells[(2, 0)] = [0, 0, 1, 0, 1]  # agent 0 at (1, 1)
    cells[(3, 1)] = [0, 0, 1, 1, 0]  # the gem at (2, 2)
    np.testing.assert_array_equal(obs[1].reshape(5, 5, 5), expected_window(cells))


def test_observation_far_corner_and_radius():
    params = params_for(1, vision_radius=1)
    obs = np.asarray(th.observe(world([(8, 8)], params=params), params))
    assert obs.shape == (1, 45)
    window = obs[0].reshape(3, 3, 5)
    expected = np.zeros((3, 3, 5), np.float32)
    expected[:2, :2, th.SAND] = 1.0  # y, x = 7..8 interior
    expected[1, 1, th.AGENT] = 1.0  # itself at the centre
    expected[2, :, th.WALL] = 2.0  # y = 9 border
    expected[:, 2, th.WALL] = 2.0  # x = 9 border
    np.testing.assert_array_equal(window, expected)


# -- parity with the object-style reference world ------------------------------------------------


def epoch_fn(params: th.TreasurehuntParams):
    """jit(agent_pos int[n, 2], uniforms f32[T, H, W], actions int[T, n]) -> per-turn records,
    one turn per lax.scan step in the spec's order: spawn, observe all, move in index order."""

    def turn(state, xs):
        uniforms, actions = xs
        state = th.spawn_gems(state, uniforms, params)
        obs = th.observe(state, params)
        state, rewards = th.move_agents(state, actions, params)
        return state, (obs, rewards, state.agent_pos, th.gems_on_map(state), state.top)

    def epoch(agent_pos, uniforms, actions):
        final, records = jax.lax.scan(turn, th.reset_from_positions(agent_pos, params), (uniforms, actions))
        return final, records

    return jax.jit(epoch)


def biased_actions(rng: np.random.Generator, turns: int, n_agents: int) -> np.ndarray:
    """int[T, n]: mostly one shared direction per epoch (agents queue up behind each other and run
    into walls), each agent also has its own favourite, and some uniform noise."""
    shared = rng.integers(4)
    own = rng.integers(4, size=n_agents)
    pick = rng.random((turns, n_agents))
    noise = rng.integers(4, size=(turns, n_agents))
    return np.where(pick < 0.45, shared, np.where(pick < 0.7, own[None, :], noise)).astype(np.int32)


PARITY_CASES = [
    dict(height=10, width=10, n_agents=5, spawn_prob=0.02),  # the experiment's world
    dict(height=6, width=7, n_agents=6, spawn_prob=0.3),  # crowded, gems common
    dict(height=9, width=8, n_agents=4, spawn_prob=0.1, vision_radius=3, gem_value=5.0, wall_value=-2.0),
]


@pytest.mark.parametrize("case", range(len(PARITY_CASES)))
def test_parity_with_the_object_world_over_whole_epochs(case):
    config = PARITY_CASES[case]
    params = th.make_params(**config)
    ref = TreasurehuntWorld(**config, seed=case)
    rng = np.random.default_rng(100 + case)
    run_epoch = epoch_fn(params)
    turns, n = params.max_turns, params.n_agents
    events = {"wall": 0, "gem": 0, "agent_block": 0}
    for epoch in range(4):
        interior = [(y, x) for y in range(1, params.height - 1) for x in range(1, params.width - 1)]
        starts = np.array([interior[i] for i in rng.choice(len(interior), n, replace=False)], np.int32)
        uniforms = rng.random((turns, params.height, params.width)).astype(np.float32)
        actions = biased_actions(rng, turns, n)
        _, (obs, rewards, positions, gems, tops) = jax.device_get(run_epoch(starts, uniforms, actions))

        ref.reset(starts)
        for t in range(turns):
            ref.spawn_gems(uniforms[t])
            ref_obs = np.stack([ref.observe(i) for i in range(n)])  # all observe before any move
            np.testing.assert_array_equal(obs[t], ref_obs, err_msg=f"obs, epoch {epoch} turn {t}")
            before = ref.agent_positions()
            ref_rewards = np.array([ref.move(i, int(actions[t, i])) for i in range(n)], np.float32)
            np.testing.assert_array_equal(rewards[t], ref_rewards, err_msg=f"rewards, epoch {epoch} turn {t}")
            np.testing.assert_array_equal(positions[t], ref.agent_positions(), err_msg=f"positions, epoch {epoch} turn {t}")
            assert gems[t] == ref.gems_on_map(), f"gems, epoch {epoch} turn {t}"
            ref_top = np.vectorize(lambda entity: entity.kind)(ref.grid[:, :, 1])
            np.testing.assert_array_equal(tops[t], ref_top, err_msg=f"top layer, epoch {epoch} turn {t}")
            stayed = np.all(ref.agent_positions() == before, axis=1)
            events["wall"] += int(np.sum(ref_rewards == params.wall_value))
            events["gem"] += int(np.sum(ref_rewards == params.gem_value))
            events["agent_block"] += int(np.sum(stayed & (ref_rewards == 0.0)))
    # the actions really exercised every rule, so agreement covers them all
    assert min(events.values()) > 0, events


# -- vmap over worlds, jit without retracing ------------------------------------------------------


def test_vmap_over_worlds_equals_each_world_alone():
    params = PARAMS
    n_worlds, turns = 8, 30
    keys = jax.random.split(jax.random.key(7), n_worlds)
    starts = jax.vmap(reset, in_axes=(0, None))(keys, params)
    rng = np.random.default_rng(7)
    uniforms = (rng.random((n_worlds, turns, 10, 10)) * 0.1).astype(np.float32)  # many gems
    actions = rng.integers(4, size=(n_worlds, turns, params.n_agents)).astype(np.int32)
    run_epoch = epoch_fn(params)
    batched = jax.device_get(jax.jit(jax.vmap(run_epoch))(starts.agent_pos, uniforms, actions))
    for w in range(n_worlds):
        alone_start = reset(keys[w], params)
        np.testing.assert_array_equal(np.asarray(alone_start.agent_pos), np.asarray(starts.agent_pos[w]))
        alone = jax.device_get(run_epoch(alone_start.agent_pos, uniforms[w], actions[w]))
        for got, want in zip(jax.tree.leaves(batched), jax.tree.leaves(alone)):
            np.testing.assert_array_equal(got[w], want)
    assert np.all(batched[0].turn == turns)


def test_observe_and_move_jit_without_retracing_across_turns():
    traces = {"observe": 0, "move": 0, "spawn": 0}

    def counted(name, fn):
        def wrapped(*args):
            traces[name] += 1  # runs only while tracing
            return fn(*args)

        return wrapped

    observe = jax.jit(counted("observe", th.observe), static_argnums=1)
    move_agents = jax.jit(counted("move", th.move_agents), static_argnums=2)
    spawn = jax.jit(counted("spawn", th.spawn_gems), static_argnums=2)
    key = jax.random.key(0)
    for epoch in range(2):  # a fresh reset must not retrace either (same dtypes and weak types)
        key, reset_key = jax.random.split(key)
        state = th.reset(reset_key, PARAMS)
        for _ in range(PARAMS.max_turns):
            key, spawn_key, action_key = jax.random.split(key, 3)
            state = spawn(state, th.spawn_uniforms(spawn_key, PARAMS), th.make_params())  # equal params, new object
            obs = observe(state, PARAMS)
            actions = jax.random.randint(action_key, (PARAMS.n_agents,), 0, 4)
            state, rewards = move_agents(state, actions, PARAMS)
    assert obs.shape == (5, 125) and rewards.shape == (5,) and int(state.turn) == PARAMS.max_turns
    assert traces == {"observe": 1, "move": 1, "spawn": 1}


# -- the gymnax interface (Treasurehunt) -----------------------------------------------------------

ENV = treasurehunt_env.Treasurehunt()
ENV_PARAMS = th.make_params(height=7, width=8, n_agents=4, spawn_prob=0.2, max_turns=12)


def free_reset(key, params):
    """What Treasurehunt.reset_env does, in free functions: reset, then the first spawn."""
    world_key, spawn_key = jax.random.split(key)
    return th.spawn_gems(reset(world_key, params), th.spawn_uniforms(spawn_key, params), params)


def assert_same_world(got: th.WorldState, want: th.WorldState, where: str = ""):
    for name in ("top", "agent_pos", "turn"):
        np.testing.assert_array_equal(np.asarray(getattr(got, name)), np.asarray(getattr(want, name)), err_msg=f"{name} {where}")


def test_env_interface_and_spaces():
    params = ENV_PARAMS
    obs, state = ENV.reset(jax.random.key(0), params)
    assert ENV.name == "Treasurehunt-v0" and ENV.num_actions == 4 and ENV.default_params == PARAMS
    assert ENV.action_space(params).n == len(th.ACTIONS) and not hasattr(ENV, "action_mask")  # every action is legal
    space = ENV.observation_space(params)
    assert space.shape == obs.shape == (4, th.obs_size(params)) and bool(space.contains(obs))
    assert params.max_steps_in_episode == params.max_turns == 12 and int(state.turn) == 0


def test_env_plays_the_free_functions_turn_by_turn_and_resets_after_max_turns():
    params = ENV_PARAMS
    turns = 2 * params.max_turns + 3  # across the automatic reset
    reset_key, *step_keys = jax.random.split(jax.random.key(3), turns + 1)
    actions = np.random.default_rng(3).integers(4, size=(turns, params.n_agents)).astype(np.int32)
    obs, state = ENV.reset(reset_key, params)
    world = free_reset(reset_key, params)
    assert_same_world(state, world, "after reset")
    np.testing.assert_array_equal(obs, th.observe(world, params))
    seen = set()
    for t in range(turns):
        obs, state, rewards, terminated, truncated, info = ENV.step(step_keys[t], state, actions[t], params)
        step_key, restart_key = jax.random.split(step_keys[t])
        moved, want_rewards = move_agents(world, jnp.asarray(actions[t]), params)
        np.testing.assert_array_equal(rewards, want_rewards, err_msg=f"rewards, turn {t}")
        assert int(info["gems_collected"]) == int(th.gems_on_map(world) - th.gems_on_map(moved))
        world = th.spawn_gems(moved, th.spawn_uniforms(step_key, params), params)
        np.testing.assert_array_equal(info["final_observation"], th.observe(world, params))
        last = (t + 1) % params.max_turns == 0
        assert not bool(terminated) and bool(truncated) == last, t
        if last:
            world = free_reset(restart_key, params)
        assert_same_world(state, world, f"turn {t}")
        np.testing.assert_array_equal(obs, th.observe(world, params), err_msg=f"obs, turn {t}")
        seen |= set(np.asarray(rewards).tolist())
    assert seen == {0.0, params.wall_value, params.gem_value}  # every kind of reward was checked


def scan_env(params):
    """jit(reset key, step keys [T], actions [T, n]) -> (obs, rewards, truncated, top) per step."""

    def run(reset_key, step_keys, actions):
        def turn(state, xs):
            step_key, turn_actions = xs
            obs, state, rewards, _, truncated, _ = ENV.step(step_key, state, turn_actions, params)
            return state, (obs, rewards, truncated, state.top)

        return jax.lax.scan(turn, ENV.reset(reset_key, params)[1], (step_keys, actions))[1]

    return jax.jit(run)


def test_env_vmaps_over_worlds_under_jit():
    params, n_worlds, turns = ENV_PARAMS, 6, 30
    keys = jax.random.split(jax.random.key(11), n_worlds)
    step_keys = jax.vmap(lambda k: jax.random.split(k, turns))(keys)
    actions = np.random.default_rng(11).integers(4, size=(n_worlds, turns, params.n_agents)).astype(np.int32)
    run = scan_env(params)
    batched = jax.device_get(jax.jit(jax.vmap(run))(keys, step_keys, actions))
    for w in range(n_worlds):
        alone = jax.device_get(run(keys[w], step_keys[w], actions[w]))
        for got, want in zip(batched, alone):
            np.testing.assert_array_equal(got[w], want)
    assert batched[2].sum() == n_worlds * (turns // params.max_turns)  # every world truncated on time


class TeamReward(wrappers.Wrapper):
    """Treasurehunt with one scalar reward per step, the agents' sum (play_episodes sums scalars)."""

    def step(self, key, state, action, params):
        obs, state, rewards, terminated, truncated, info = self._env.step(key, state, action, params)
        return obs, state, rewards.sum(), terminated, truncated, info


def test_play_episodes_plays_whole_epochs_of_team_play():
    params = ENV_PARAMS

    def choose(key, obs, mask):  # obs [n_agents, obs_size], mask [4]: one random legal action per agent
        return jax.random.categorical(key, jnp.where(mask, 0.0, -jnp.inf), shape=(obs.shape[0],))

    returns = jax.jit(lambda key: evaluation.play_episodes(TeamReward(ENV), params, choose, key, 3))(jax.random.key(5))
    for e, episode_key in enumerate(jax.random.split(jax.random.key(5), 3)):  # the same episodes, step by step
        reset_key, play_key = jax.random.split(episode_key)
        obs, state = ENV.reset(reset_key, params)
        total = 0.0
        for step_key in jax.random.split(play_key, params.max_turns):
            choose_key, env_key = jax.random.split(step_key)
            obs, state, rewards, *_ = ENV.step(env_key, state, choose(choose_key, obs, jnp.ones(4, bool)), params)
            total += float(rewards.sum())
        assert float(returns[e]) == pytest.approx(total)
