"""Atari through ALE's vector env (labcore.envs.ale_vector, labcore.envs.ale_jax): the same games as gymnasium's
preprocessing, the two ways of stepping alike, seeded games, an exact restore, whole-game scores."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from labcore.envs import ale_jax, ale_vector
from labcore.envs.ale_jax import AtariJaxEnv
from labcore.envs.ale_vector import AtariSettings

XLA, WHY_NOT = ale_jax.xla_stepping_available()
STEPPINGS = ["callback"] + (["xla"] if XLA else [])


def scan_steps(env, state, obs, actions):
    """Step ``env`` through actions [T, E] in one jitted scan: (obs, state, stacked (obs, VectorStep))."""

    def body(carry, action):
        obs, state = carry
        obs, state, step = env.step(None, state, action)
        return (obs, state), (obs, step)

    (obs, state), (observations, steps) = jax.jit(lambda c, a: jax.lax.scan(body, c, a))((obs, state), actions)
    return obs, state, observations, steps


def random_actions(seed, steps, num_envs, num_actions):
    return jnp.asarray(np.random.default_rng(seed).integers(0, num_actions, (steps, num_envs)), jnp.int32)


def gymnasium_reference(num_envs, max_episode_steps):
    """gymnasium's own pipeline, as ALE documents the vector env's equivalence: AtariPreprocessing
    (frame skip 4 with the max of the last two frames, grayscale, 84x84) under a stack of 4 frames
    padded with zeros after a reset, no sticky actions, no no-ops, same-step resets."""
    ale_vector.game_of("ALE/Breakout-v5")  # registers ALE's ids with gymnasium

    def make():
        env = gym.make("ALE/Breakout-v5", frameskip=1, repeat_action_probability=0.0,
                       max_num_frames_per_episode=4 * max_episode_steps)
        env = gym.wrappers.AtariPreprocessing(env, noop_max=0, frame_skip=4, screen_size=84, grayscale_obs=True)
        return gym.wrappers.FrameStackObservation(env, 4, padding_type="zero")

    return gym.vector.SyncVectorEnv([make for _ in range(num_envs)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def close_frames(ours, theirs):
    """ALE's own equivalence test (tests/python/test_atari_vector_env.py, obs_equivalence): at most 25
    pixels of a stack may differ, by at most 2 grey levels (its C++ resize against OpenCV's Python one)."""
    for one, other in zip(np.asarray(ours), theirs):  # stack by stack
        diff = np.asarray(one, np.int32) - np.asarray(other, np.int32)
        if np.count_nonzero(diff) > 25 or np.abs(diff).max(initial=0) > 2:
            return False
    return True


@pytest.mark.parametrize("stepping", STEPPINGS)
def test_same_games_as_gymnasium_preprocessing(stepping):
    """Four Breakout games for 400 steps of the same random actions, resets included (games of at most
    120 steps): the same observations, points, game ends, time limits and lost lives as gymnasium's
    AtariPreprocessing + FrameStackObservation. A lost life is terminal here (life_loss_terminal)
    and only where gymnasium's lives counter drops; the game goes on in both."""
    settings = AtariSettings("ALE/Breakout-v5", num_envs=4, repeat_action_probability=0.0, life_loss_terminal=True,
                             noop_max=0, fire_reset=False, max_episode_steps=120)
    env = AtariJaxEnv(settings, stepping)
    obs, state = env.reset(jax.random.key(0))
    reference = gymnasium_reference(4, 120)
    theirs, info = reference.reset(seed=0)
    lives = info["lives"]
    assert close_frames(obs, theirs)
    actions = random_actions(1, 400, 4, env.num_actions)
    _, _, observations, steps = scan_steps(env, state, obs, actions)
    counts = {"lost lives": 0, "game ends": 0, "time limits": 0, "points": 0.0}
    for t in range(actions.shape[0]):
        theirs, reward, over, truncated, info = reference.step(np.asarray(actions[t]))
        ended = over | truncated
        lost = (info["lives"] < lives) & ~ended
        lives = info["lives"]
        assert close_frames(observations[t], theirs), t  # after a reset: the next game's first stack
        np.testing.assert_array_equal(steps.score[t], reward, err_msg=f"step {t}")
        np.testing.assert_array_equal(steps.episode_done[t], ended, err_msg=f"step {t}")
        np.testing.assert_array_equal(steps.truncated[t], truncated, err_msg=f"step {t}")
        np.testing.assert_array_equal(steps.terminated[t], over | lost, err_msg=f"step {t}")
        where = np.flatnonzero(ended)
        if where.size:
            assert close_frames(np.asarray(steps.final_obs[t])[where], [info["final_obs"][i] for i in where]), t
        counts["lost lives"] += int(lost.sum())
        counts["game ends"] += int(over.sum())
        counts["time limits"] += int(truncated.sum())
        counts["points"] += float(reward.sum())
    reference.close()
    # the comparison covered what it claims to: lost lives, both kinds of game end, and points
    assert counts["lost lives"] >= 4 and counts["time limits"] >= 4 and counts["points"] > 0, counts


@pytest.mark.skipif(not XLA, reason=f"ALE's XLA stepping does not run here ({WHY_NOT})")
def test_xla_and_callback_stepping_play_the_same_games():
    """With sticky actions and no-op starts (ALE's own draws, seeded per game): the two ways of
    stepping give the same observations and steps, so a run is the same on every JAX."""
    settings = AtariSettings("ALE/Breakout-v5", num_envs=3, max_episode_steps=150, life_loss_terminal=True)
    actions = random_actions(2, 500, 3, 4)
    runs = []
    for stepping in ("xla", "callback"):
        env = AtariJaxEnv(settings, stepping)
        obs, state = env.reset(jax.random.key(7))
        runs.append(scan_steps(env, state, obs, actions)[1:])
    (state_a, obs_a, steps_a), (state_b, obs_b, steps_b) = runs
    np.testing.assert_array_equal(obs_a, obs_b)
    for leaf_a, leaf_b in zip(jax.tree.leaves(steps_a), jax.tree.leaves(steps_b)):
        np.testing.assert_array_equal(leaf_a, leaf_b)
    np.testing.assert_array_equal(state_a.game_seed, state_b.game_seed)
    assert int(np.asarray(steps_a.episode_done).sum()) >= 6  # several games each, each reset by its own seed


def test_auto_stepping_is_xla_exactly_where_this_jax_runs_it():
    """'auto' takes ALE's FFI calls where they register and the callback elsewhere; on jax 0.7.2
    (Colab's, the oldest supported) ALE 0.12's handlers are refused for their FFI API version."""
    env = AtariJaxEnv(AtariSettings(num_envs=1), "auto")
    assert env.stepping == ("xla" if XLA else "callback")
    if jax.__version__.startswith("0.7."):
        assert not XLA and "API version" in WHY_NOT
        with pytest.raises(RuntimeError, match="use stepping='callback'"):
            AtariJaxEnv(AtariSettings(num_envs=1), "xla")
    with pytest.raises(ValueError, match="stepping must be one of"):
        AtariJaxEnv(AtariSettings(num_envs=1), "gpu")


def test_every_game_has_a_seed_of_its_own():
    """Seeds are a pure function of (key, env, game): distinct across envs and games, equal for the same."""
    key = jax.random.key(3)
    first = np.asarray(ale_jax.game_seeds(key, jnp.zeros(64, jnp.int32)))
    second = np.asarray(ale_jax.game_seeds(key, jnp.ones(64, jnp.int32)))
    assert len(set(first) | set(second)) == 128 and (first >= 0).all()
    np.testing.assert_array_equal(first, np.asarray(ale_jax.game_seeds(key, jnp.zeros(64, jnp.int32))))
    assert not np.array_equal(first, np.asarray(ale_jax.game_seeds(jax.random.key(4), jnp.zeros(64, jnp.int32))))


@pytest.mark.parametrize("stepping", STEPPINGS)
def test_restore_replays_the_games_and_they_go_on_alike(stepping):
    """A state from 300 steps (games of different lengths, some reset on the way) restored into a new
    vector env: the next 200 steps equal those of the env that never stopped. A state whose record
    does not lead to its observations is refused, naming the env, instead of training on other games."""
    settings = AtariSettings("ALE/Breakout-v5", num_envs=4, max_episode_steps=140, life_loss_terminal=True)
    env = AtariJaxEnv(settings, stepping)
    obs, state = env.reset(jax.random.key(5))
    obs, state, _, steps = scan_steps(env, state, obs, random_actions(3, 300, 4, env.num_actions))
    assert np.asarray(steps.episode_done).any() and len(set(np.asarray(state.game_steps).tolist())) > 1
    saved = state
    later = random_actions(4, 200, 4, env.num_actions)
    _, _, expected_obs, expected = scan_steps(env, state, obs, later)

    fresh = AtariJaxEnv(settings, stepping)
    restored = fresh.restore(saved, np.asarray(obs))
    assert fresh.restore_steps == int(np.max(saved.game_steps))
    _, _, replayed_obs, replayed = scan_steps(fresh, restored, obs, later)
    np.testing.assert_array_equal(replayed_obs, expected_obs)
    for ours, theirs in zip(jax.tree.leaves(replayed), jax.tree.leaves(expected)):
        np.testing.assert_array_equal(ours, theirs)

    damaged = saved.replace(game_seed=saved.game_seed.at[2].add(1))
    with pytest.raises(RuntimeError, match="env 2's replayed game"):
        AtariJaxEnv(settings, stepping).restore(damaged, np.asarray(obs))


def test_a_state_steps_only_with_its_own_vector_env():
    env = AtariJaxEnv(AtariSettings(num_envs=2), "callback")
    _, state = env.reset(jax.random.key(0))
    with pytest.raises(Exception, match="vector env is gone"):
        jax.block_until_ready(env.step(None, state.replace(handle=jnp.zeros(8, jnp.uint8)), jnp.zeros(2, jnp.int32)))


def test_play_games_scores_whole_games_reproducibly():
    """Whole games (every life; random play in Breakout scores a point or two per game), each env
    playing its share, the same scores for the same seed."""
    settings = AtariSettings("ALE/Breakout-v5", num_envs=3)
    rng = np.random.default_rng(0)
    policy = lambda obs, step: rng.integers(0, 4, len(obs))  # noqa: E731
    scores = ale_vector.play_games(settings, policy, 5, seed=11)
    assert len(scores) == 5 and all(score >= 0 for score in scores) and sum(scores) > 0
    rng = np.random.default_rng(0)
    assert ale_vector.play_games(settings, policy, 5, seed=11) == scores


def test_settings_fail_early():
    with pytest.raises(ValueError, match="unknown Atari id"):
        AtariSettings("ALE/Brekout-v5")
    with pytest.raises(ValueError, match="an ALE id"):
        AtariSettings("CartPole-v1")
    with pytest.raises(ValueError, match="repeat_action_probability"):
        AtariSettings(repeat_action_probability=1.0)
