"""The gymnasium DQN loop: early errors, determinism, exact resume, learning, the Atari pipeline."""

import dataclasses

import jax
import numpy as np
import pytest

from labcore.agents.dqn import core as dqn
from labcore.agents.dqn import host_loop as dqn_loop

SMALL = dqn.DQNConfig(
    total_steps=3_000, buffer_size=1_000, batch_size=32, learning_starts=500, train_frequency=10,
    target_update_frequency=200, exploration_fraction=0.5, hidden_sizes=(32, 32),
)


def leaves(tree):
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


@pytest.mark.parametrize(
    "config,message",
    [
        (dataclasses.replace(SMALL, env_id="CartPol-v1"), "unknown environment id 'CartPol-v1'"),
        (dataclasses.replace(SMALL, env_id="Pendulum-v1"), "Box action space; DQN needs a Discrete one"),
        (dataclasses.replace(SMALL, network="nature_cnn"), "'nature_cnn' needs stacked frames"),
    ],
)
def test_bad_environment_fails_before_training(config, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        dqn_loop.train(config, run_dir=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())  # nothing was logged: it failed before the first step


def test_same_seed_same_result_and_exact_resume(tmp_path):
    straight = dqn_loop.train(SMALL, run_dir=tmp_path / "straight", log_every=100, progress=False)
    again = dqn_loop.train(SMALL, progress=False)  # log_every's default: 300 updates, a row every 3
    for a, b in zip(leaves(straight.state), leaves(again.state)):
        np.testing.assert_array_equal(a, b)
    assert [row["update"] for row in again.metrics] == list(range(3, 301, 3))
    # Interrupted mid-chunk (1503 is not a multiple of train_frequency), then resumed.
    first = dqn_loop.train(SMALL, run_dir=tmp_path / "resumed", log_every=100, stop_at=1_503, progress=False)
    assert (first.summary["timesteps"], first.summary["updates"]) == (1_503, 150)
    resumed = dqn_loop.train(SMALL, run_dir=tmp_path / "resumed", log_every=100, resume=True, progress=False)
    assert (resumed.summary["timesteps"], resumed.summary["updates"]) == (SMALL.total_steps, 300)
    assert int(resumed.state.update_count) == int(straight.state.update_count) > 200
    for a, b in zip(leaves(straight.state), leaves(resumed.state)):
        np.testing.assert_array_equal(a, b)
    assert resumed.summary["episodes"] == straight.summary["episodes"]
    assert resumed.summary["final_episode_return"] == straight.summary["final_episode_return"]
    # the evaluation ends a finished run only (the interrupted one's parameters are half-trained), the same games
    assert "eval_return_mean" not in first.summary
    assert resumed.summary["eval_return_mean"] == straight.summary["eval_return_mean"]
    # one folder, one run: the row the interrupted run logged at 1,503 (its checkpoint), then the rest
    from labcore.logging import read_metrics

    untimed = lambda rows: [{k: v for k, v in row.items() if k not in ("time", "steps_per_second")} for row in rows]  # noqa: E731
    assert [row["timesteps"] for row in read_metrics(tmp_path / "resumed")] == [1_000, 1_503, 2_000, 3_000]
    assert [row["update"] for row in read_metrics(tmp_path / "resumed")] == [100, 150, 200, 300]
    resumed_rows = untimed(read_metrics(tmp_path / "resumed"))
    assert resumed_rows[:1] + resumed_rows[2:] == untimed(read_metrics(tmp_path / "straight"))
    # A different seed gives different parameters (the comparison above can fail).
    other = dqn_loop.train(dataclasses.replace(SMALL, seed=1), log_every=100, progress=False)
    assert any(not np.array_equal(a, b) for a, b in zip(leaves(straight.state), leaves(other.state)))


def test_resume_refuses_a_different_config(tmp_path):
    dqn_loop.train(SMALL, run_dir=tmp_path, stop_at=600, progress=False)
    with pytest.raises(ValueError, match="different config: \\['learning_rate'\\]"):
        dqn_loop.train(dataclasses.replace(SMALL, learning_rate=1e-3), run_dir=tmp_path, resume=True, progress=False)


def test_an_error_closes_the_envs_it_opened(tmp_path, monkeypatch):
    """A run that raises, mid-run (an env step that fails) or while a resume restores its checkpoint,
    closes the envs it opened before the error reaches the caller."""
    from labcore.agents.dqn import host_checkpoints

    opened, real_open_envs = [], host_checkpoints.open_envs

    def open_envs_failing_at_step(fail_at):
        def open_envs(*args, **kwargs):
            env = real_open_envs(*args, **kwargs)
            real_step, calls = env.step, []

            def step(actions):
                calls.append(actions)
                if len(calls) == fail_at:
                    raise RuntimeError("the env broke")
                return real_step(actions)

            env.step = step
            opened.append(env)
            return env

        return open_envs

    monkeypatch.setattr(host_checkpoints, "open_envs", open_envs_failing_at_step(100))
    with pytest.raises(RuntimeError, match="the env broke"):
        dqn_loop.train(SMALL, run_dir=tmp_path / "mid-run", progress=False)
    assert len(opened) == 1 and opened[0].closed

    monkeypatch.setattr(host_checkpoints, "open_envs", open_envs_failing_at_step(None))
    dqn_loop.train(SMALL, run_dir=tmp_path / "resume", stop_at=600, progress=False)

    def restore(*args, **kwargs):
        raise RuntimeError("the checkpoint is damaged")

    monkeypatch.setattr(host_checkpoints, "restore", restore)
    with pytest.raises(RuntimeError, match="the checkpoint is damaged"):
        dqn_loop.train(SMALL, run_dir=tmp_path / "resume", resume=True, progress=False)
    assert len(opened) == 3 and all(env.closed for env in opened)  # the failed run's, the stopped run's, the resume's


def test_metrics_are_logged_to_jsonl_and_csv(tmp_path):
    from labcore.logging import read_metrics

    result = dqn_loop.train(SMALL, run_dir=tmp_path, log_every=1_000 // SMALL.train_frequency, progress=False)
    rows = read_metrics(tmp_path)
    assert [row["timesteps"] for row in rows] == [1_000, 2_000, 3_000] and rows == result.metrics
    assert [row["update"] for row in rows] == [100, 200, 300]
    assert {"loss", "episode_return", "epsilon", "steps_per_second"} <= set(rows[-1])
    assert (tmp_path / "metrics.csv").read_text().splitlines()[0].startswith("update,timesteps,episodes,episode_return")
    # the summary: the entries every driver writes first (labcore.training_run.run_summary), then the host loop's own
    assert list(result.summary) == ["env", "seeds", "timesteps", "updates", "compile_s", "run_s", "steps_per_second",
                                    "final_episode_return", "episodes", "eval_episodes", "eval_epsilon", "eval_return_mean",
                                    "eval_return_std", "eval_return_min", "eval_return_max"]  # the evaluation's last
    assert result.summary["eval_episodes"] == SMALL.eval_episodes
    assert result.summary["timesteps"] == 3_000 and result.summary["updates"] == 300
    assert (tmp_path / "metrics.png").is_file()


@pytest.mark.end_to_end
def test_cartpole_learns_and_checkpoint_evaluates(tmp_path):
    config = dqn.DQNConfig(total_steps=20_000, learning_starts=2_000, exploration_fraction=0.3, seed=0)
    random_policy = np.mean(dqn_loop.play(config, dqn_loop.train(dataclasses.replace(config, total_steps=10), progress=False, evaluate=False).state.params, epsilon=1.0))
    result = dqn_loop.train(config, run_dir=tmp_path, progress=False)
    loaded_config, state = dqn_loop.load_checkpoint(tmp_path)
    assert loaded_config == config
    for a, b in zip(leaves(result.state), leaves(state)):
        np.testing.assert_array_equal(a, b)
    greedy = np.mean(dqn_loop.play(loaded_config, state.params, episodes=10))
    assert greedy > 3 * random_policy, (greedy, random_policy)


@pytest.mark.end_to_end
def test_breakout_pipeline_learns_checkpoints_and_evaluates(tmp_path):
    config = dqn.DQNConfig.atari_short(total_steps=600, learning_starts=200, buffer_size=1_000, target_update_frequency=100)
    result = dqn_loop.train(config, run_dir=tmp_path, progress=False, evaluate=False)  # an evaluation below
    assert int(result.state.update_count) == (600 - 200) // 4
    assert np.isfinite(result.metrics[-1]["loss"])
    loaded_config, state = dqn_loop.load_checkpoint(tmp_path)
    scores = dqn_loop.play(loaded_config, state.params, episodes=1, max_episode_steps=500)
    assert len(scores) == 1 and scores[0] >= 0


@pytest.mark.end_to_end
def test_breakout_resumes_exactly_on_the_same_games(tmp_path):
    """ALE's vector env is checkpointed as its games' seeds and actions and replayed on resume, so
    an Atari run stopped mid-way (at agent step 403) and resumed ends where the straight one does."""
    config = dqn.DQNConfig.atari_short(total_steps=600, learning_starts=200, buffer_size=1_000, target_update_frequency=100,
                                       repeat_action_probability=0.25)
    options = dict(progress=False, log_every=25, evaluate=False)  # whole Breakout games: not what this checks
    straight = dqn_loop.train(config, run_dir=tmp_path / "straight", **options)
    dqn_loop.train(config, run_dir=tmp_path / "resumed", stop_at=403, **options)
    resumed = dqn_loop.train(config, run_dir=tmp_path / "resumed", resume=True, **options)
    for a, b in zip(leaves(straight.state), leaves(resumed.state)):
        np.testing.assert_array_equal(a, b)
    assert resumed.summary["episodes"] == straight.summary["episodes"]
