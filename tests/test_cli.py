"""`python -m labcore train|eval ALGORITHM`: flags map onto the config classes, errors are one clear line
(exit 2: the command is wrong; 1: running it failed), a run folder holds TensorBoard event files
unless --no-tensorboard."""

import dataclasses
import json

import pytest

from labcore import __main__ as cli
from labcore.agents import registry
from labcore.agents.dqn import core as dqn
from labcore.logging import event_files
from test_tensorboard import assert_mirrors_jsonl


def config_for(*flags, algorithm="dqn-host"):
    return cli._config_from(cli.build_parser().parse_args(["train", algorithm, *flags]), registry.get(algorithm))


def test_every_config_field_is_a_flag():
    config = config_for(
        "--env", "Acrobot-v1", "--hidden-sizes", "16", "16", "--max-grad-norm", "none", "--double-dqn",
        "--no-life-loss-terminal", "--learning-rate", "0.001", "--td-loss", "huber",
    )
    assert config == dqn.DQNConfig(env_id="Acrobot-v1", hidden_sizes=(16, 16), max_grad_norm=None, double_dqn=True,
                                   life_loss_terminal=False, learning_rate=1e-3, td_loss="huber")
    assert config_for("--max-grad-norm", "5").max_grad_norm == 5.0
    assert config_for() == dqn.DQNConfig()  # parses with no flags at all


def test_presets_take_overrides():
    config = config_for("--preset", "atari_short", "--total-steps", "100000")
    assert config == dqn.DQNConfig.atari_short(total_steps=100_000)
    assert config_for("--preset", "nature_atari").target_update_frequency == 10_000


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--env", "Pendulum-v1"], "Box action space"),
        (["--env", "NoSuchGame-v0"], "unknown environment id"),
        (["--learning-rate", "-1"], "DQNConfig.learning_rate must be > 0"),
        (["--batch-size", "20000"], "DQNConfig.batch_size must be <= buffer_size"),
        (["--seeds", "2"], "seeds: dqn-host runs one seed per call"),
    ],
)
def test_bad_input_is_one_clear_error(flags, message, capsys):
    assert cli.main(["train", "dqn-host", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_train_then_eval_a_checkpoint(tmp_path, capsys):
    run = str(tmp_path / "run")
    flags = ["--total-steps", "600", "--learning-starts", "200", "--buffer-size", "500", "--batch-size", "32", "--log-every", "20"]
    assert cli.main(["train", "dqn-host", *flags, "--run-dir", run, "--no-eval"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["timesteps"] == 600
    for name in ("config.json", "metrics.jsonl", "metrics.csv", "metrics.png", "summary.json"):
        assert (tmp_path / "run" / name).is_file(), name
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["timesteps"] == 600
    assert_mirrors_jsonl(run, "timesteps", ("loss", "epsilon"))  # TensorBoard by default
    assert cli.main(["train", "dqn-host", *flags, "--run-dir", run, "--no-eval"]) == 1  # the folder is taken
    assert "holds an earlier run" in capsys.readouterr().err
    assert cli.main(["eval", "dqn-host", "--checkpoint", run, "--episodes", "3"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (report["algorithm"], report["env"], report["eval_episodes"]) == ("dqn-host", "CartPole-v1", 3)
    assert report["eval_return_min"] <= report["eval_return_mean"] <= report["eval_return_max"]
    assert cli.main(["eval", "dqn-host", "--checkpoint", str(tmp_path / "missing")]) == 1


def ppo_config_for(*flags):
    return config_for(*flags, algorithm="ppo")


def test_every_ppo_config_field_is_a_flag():
    from labcore.agents.ppo.core import PPOConfig

    parser = cli.build_parser()
    ppo_parser = parser._subparsers._group_actions[0].choices["train"]._subparsers._group_actions[0].choices["ppo"]
    flags = {option for action in ppo_parser._actions for option in action.option_strings}
    for field in dataclasses.fields(PPOConfig):
        assert "--" + ("env" if field.name == "env_id" else field.name.replace("_", "-")) in flags, field.name
    config = ppo_config_for("--env", "CartPole-v1", "--num-envs", "8", "--num-steps", "32", "--total-steps", "2048",
                            "--no-mask-actions", "--no-anneal-lr", "--ent-coef", "0.05", "--activation", "relu",
                            "--hidden-size", "32", "--num-layers", "3", "--seed", "7")
    assert config == PPOConfig(env_id="CartPole-v1", num_envs=8, num_steps=32, total_steps=2048, mask_actions=False,
                               anneal_lr=False, ent_coef=0.05, activation="relu", hidden_size=32, num_layers=3, seed=7)
    assert ppo_config_for() == PPOConfig()
    assert ppo_config_for("--preset", "cartpole", "--num-envs", "16") == PPOConfig.cartpole(num_envs=16)


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--env", "NoSuchGame-v0", "--num-envs", "4", "--total-steps", "512"], "PPOConfig.env_id: unknown gymnax environment id"),
        (["--num-minibatches", "3", "--num-envs", "4"], "PPOConfig.num_minibatches must be a divisor"),
        (["--gamma", "1.5"], "PPOConfig.gamma must be in [0, 1]"),
        (["--activation", "gelu"], "PPOConfig.activation must be one of"),
    ],
)
def test_bad_ppo_input_is_one_clear_error(flags, message, capsys, tmp_path):
    assert cli.main(["train", "ppo", *flags, "--run-dir", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()  # failed before writing (or compiling) anything


def test_train_ppo_writes_a_results_folder_then_evaluates(tmp_path, capsys):
    run = tmp_path / "run"
    flags = ["--preset", "cartpole", "--total-steps", "20480", "--log-every", "5", "--checkpoint-every", "20"]
    assert cli.main(["train", "ppo", *flags, "--run-dir", str(run), "--no-progress", "--eval-episodes", "8"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["timesteps"] == 20480 and summary["max_invalid_action_rate"] == 0.0
    assert summary["greedy_return_mean"] > summary["random_return_mean"]  # 40 updates already beat random play
    for name in ("config.json", "metrics.jsonl", "metrics.csv", "metrics.png", "summary.json"):
        assert (run / name).is_file(), name
    assert sorted(int(p.name) for p in (run / "checkpoints").iterdir()) == [20, 40]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["update"] for row in rows] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert cli.main(["eval", "ppo", "--checkpoint", str(run), "--episodes", "4"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["step"] == 40 and report["eval_episodes"] == 4 and report["greedy_return_mean"] > 0
    assert cli.main(["train", "ppo", *flags, "--run-dir", str(tmp_path / "fresh"), "--resume", "--no-progress"]) == 1
    assert "no checkpoint" in capsys.readouterr().err


def test_train_with_seeds_trains_them_in_one_vmap_into_one_run_folder(tmp_path, capsys):
    run = tmp_path / "run"
    flags = ["--preset", "cartpole", "--num-envs", "8", "--num-steps", "16", "--total-steps", "512", "--log-every", "2",
             "--hidden-sizes", "16", "16", "--eval-episodes", "2", "--seed", "3"]
    assert cli.main(["train", "pqn", *flags, "--seeds", "2", "--run-dir", str(run), "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["seeds"] == 2 and summary["updates"] == 4 and len(summary["per_seed"]) == 2
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["update"] for row in rows] == [2, 4]
    assert json.loads((run / "config.json").read_text())["seed"] == 3


def test_train_gflownet_both_trainers_and_bad_flags(tmp_path, capsys):
    flags = ["train", "gflownet", "--loss", "db", "--ndim", "2", "--height", "4", "--iterations", "30", "--hidden-size", "16",
             "--log-every", "10"]
    for trainer, tensorboard in (("torch", "--tensorboard"), ("hybrid", "--no-tensorboard")):
        run = tmp_path / trainer
        assert cli.main([*flags, "--trainer", trainer, "--run-dir", str(run), tensorboard]) == 0
        summary = json.loads(capsys.readouterr().out.splitlines()[-1])
        assert summary["trainer"] == trainer and summary["updates"] == 30 and 0.0 <= summary["final_l1"] <= 2.0
        assert 0.0 <= summary["eval_l1"] <= 2.0 and summary["eval_samples"] == 20_000
        assert len((run / "metrics.jsonl").read_text().splitlines()) == 3 and (run / "summary.json").is_file()
        assert json.loads((run / "config.json").read_text())["trainer"] == trainer and (run / "metrics.png").is_file()
    assert event_files(tmp_path / "hybrid") == []
    first_run = assert_mirrors_jsonl(tmp_path / "torch", "update", ("loss", "l1"))
    assert cli.main([*flags, "--trainer", "torch", "--run-dir", str(tmp_path / "torch")]) == 1
    assert "holds an earlier run" in capsys.readouterr().err
    assert cli.main([*flags, "--trainer", "torch", "--run-dir", str(tmp_path / "torch"), "--overwrite", "--seed", "1"]) == 0
    capsys.readouterr()
    assert len((tmp_path / "torch" / "metrics.jsonl").read_text().splitlines()) == 3  # replaced, not appended
    assert len(event_files(tmp_path / "torch")) == 1  # the event files too
    assert assert_mirrors_jsonl(tmp_path / "torch", "update", ("loss", "l1")) != first_run
    assert cli.main(["train", "gflownet", "--loss", "kl"]) == 2
    assert "GFlowNetConfig.loss must be one of" in capsys.readouterr().err
    # checkpoints, resume and seeds need the all-JAX trainer; a host trainer refuses them, naming trainer
    assert cli.main([*flags, "--trainer", "hybrid", "--run-dir", str(tmp_path / "h2"), "--checkpoint-every", "10"]) == 2
    assert "trainer: checkpoint_every needs the checkpointed all-JAX trainer (trainer='jax')" in capsys.readouterr().err
    assert not (tmp_path / "h2").exists()  # refused before the folder is made
    # the all-JAX trainer on the shared loop: checkpoints, and resume (here, of a finished run: nothing to do)
    jax_run = [*flags, "--trainer", "jax", "--run-dir", str(tmp_path / "jax"), "--checkpoint-every", "20", "--no-eval"]
    assert cli.main(jax_run) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["trainer"] == "jax" and summary["updates"] == 30 and summary["trajectories"] == 30 * 16
    assert sorted(int(p.name) for p in (tmp_path / "jax" / "checkpoints").iterdir() if p.name.isdigit()) == [20, 30]
    assert assert_mirrors_jsonl(tmp_path / "jax", "update", ("loss", "l1"))["l1"][-1][0] == 30
    assert cli.main([*jax_run, "--resume"]) == 0


def iqn_config_for(*flags):
    return config_for(*flags, algorithm="iqn")


def test_every_iqn_config_field_is_a_flag():
    from labcore.agents.iqn.run_config import IQNRunConfig

    parser = cli.build_parser()
    subcommands = parser._subparsers._group_actions[0].choices
    for command in ("train", "eval"):
        iqn_parser = subcommands[command]._subparsers._group_actions[0].choices["iqn"]
        flags = {option for action in iqn_parser._actions for option in action.option_strings}
        for field in IQNRunConfig.flat_fields():  # the run's fields, the world's and the agents'
            # eval takes the world and network fields (overrides of the checkpoint's), not the training-only ones
            if command == "train" or field.name not in registry.get("iqn").training_only:
                assert "--" + field.name.replace("_", "-") in flags, (command, field.name)
    config = iqn_config_for("--mode", "jax_parallel", "--epochs", "7", "--seed", "3", "--height", "8", "--n-agents", "2",
                            "--spawn-prob", "0.1", "--hidden-size", "64", "--learning-rate", "0.001", "--fixed",
                            "--epsilon-end", "0.05")
    assert config == IQNRunConfig(mode="jax_parallel", epochs=7, seed=3, height=8, n_agents=2, spawn_prob=0.1,
                                  hidden_size=64, learning_rate=1e-3, fixed=True, epsilon_end=0.05)
    assert iqn_config_for() == IQNRunConfig()
    assert iqn_config_for("--mode", "jax_fused", "--num-worlds", "8", "--epochs-per-call", "10").num_worlds == 8


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--mode", "tpu"], "IQNRunConfig.mode must be one of"),
        (["--mode", "pytorch", "--num-worlds", "2"], "IQNRunConfig.num_worlds must be 1 in mode 'pytorch'"),
        (["--hidden-size", "0"], "IQNRunConfig.hidden_size must be an integer >= 1"),
        (["--n-agents", "65"], "IQNRunConfig.n_agents must be in [1, 64]"),
    ],
)
def test_bad_iqn_input_is_one_clear_error(flags, message, capsys, tmp_path):
    assert cli.main(["train", "iqn", *flags, "--run-dir", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_train_iqn_then_eval_the_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    tiny = ["--height", "6", "--width", "6", "--n-agents", "2", "--max-turns", "5", "--hidden-size", "8", "--n-quantiles", "2",
            "--n-tau-act", "4", "--buffer-size", "32", "--batch-size", "4", "--n-frames", "2"]
    # The pytorch mode: no compile, so the test stays quick; every mode writes the same checkpoint layout.
    assert cli.main(["train", "iqn", "--mode", "pytorch", "--epochs", "4", *tiny, "--run-dir", str(run), "--no-progress",
                     "--log-every", "1", "--no-eval"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["mode"] == "pytorch" and summary["epochs"] == summary["updates"] == 4 and summary["n_agents"] == 2
    assert [json.loads(line)["update"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]
    # only the fused mode (on labcore.loop) checkpoints during the run and resumes
    assert cli.main(["train", "iqn", "--mode", "pytorch", *tiny, "--run-dir", str(tmp_path / "other"),
                     "--checkpoint-every", "2"]) == 2
    assert "mode: checkpoint_every needs the checkpointed fused mode (mode='jax_fused')" in capsys.readouterr().err
    for name in ("config.json", "metrics.jsonl", "metrics.csv", "metrics.png", "summary.json"):
        assert (run / name).is_file(), name
    assert cli.main(["train", "iqn", "--mode", "pytorch", "--epochs", "4", *tiny, "--run-dir", str(run), "--no-progress"]) == 1
    assert "holds an earlier run" in capsys.readouterr().err
    assert cli.main(["eval", "iqn", "--checkpoint", str(run), "--epochs", "3"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (report["algorithm"], report["step"], report["eval_epochs"]) == ("iqn", 4, 3)
    assert report["eval_mean_gems"] >= 0 and report["random_mean_gems"] >= 0
    # A network flag that does not fit the saved parameters names the leaf and both shapes.
    assert cli.main(["eval", "iqn", "--checkpoint", str(run), "--hidden-size", "16"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: params leaf 'advantage/kernel' has shape (2, 8, 4), but the config expects (2, 16, 4)")
    assert cli.main(["eval", "iqn", "--checkpoint", str(tmp_path / "missing")]) == 1
    assert "no checkpoint" in capsys.readouterr().err


def test_version_and_the_name_help_uses_follow_how_labcore_was_invoked(capsys):
    import subprocess
    import sys

    from labcore import __version__

    done = subprocess.run([sys.executable, "-m", "labcore", "--version"], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, f"labcore {__version__}")
    assert cli.invoked_as("/home/me/.venv/bin/labcore") == "labcore"  # the console script
    assert cli.invoked_as("/site-packages/labcore/__main__.py") == "python -m labcore"
    usage = subprocess.run([sys.executable, "-m", "labcore", "trian"], capture_output=True, text=True, timeout=120)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: python -m labcore ")


def test_launch_sets_no_time_limit_unless_asked():
    # A training run under `launch` takes as long as it takes; a failed worker stops every worker.
    assert cli.build_parser().parse_args(["launch", "--", "cluster-check"]).timeout is None
    assert cli.build_parser().parse_args(["launch", "--timeout", "90", "--", "cluster-check"]).timeout == 90.0
