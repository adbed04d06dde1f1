"""`python -m labcore train dqn` / `eval dqn`: flags map onto DQNConfig, errors are one clear line."""

import json

import pytest

from labcore import __main__ as cli
from labcore.agents import dqn


def config_for(*flags):
    return cli._config_from(cli.build_parser().parse_args(["train", "dqn", *flags]))


def test_every_config_field_is_a_flag():
    config = config_for(
        "--env", "Acrobot-v1", "--hidden-sizes", "16", "16", "--max-grad-norm", "none", "--double-dqn",
        "--no-life-loss-terminal", "--learning-rate", "0.001", "--td-loss", "huber",
    )
    assert config == dqn.DQNConfig(env_id="Acrobot-v1", hidden_sizes=(16, 16), max_grad_norm=None, double_dqn=True,
                                   life_loss_terminal=False, learning_rate=1e-3, td_loss="huber")
    assert config_for("--max-grad-norm", "5").max_grad_norm == 5.0
    help_text = cli.build_parser().parse_args(["train", "dqn"])  # parses with no flags at all
    assert cli._config_from(help_text) == dqn.DQNConfig()


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
    ],
)
def test_bad_input_is_one_clear_error(flags, message, capsys):
    assert cli.main(["train", "dqn", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_train_then_eval_a_checkpoint(tmp_path, capsys):
    run = str(tmp_path / "run")
    flags = ["--total-steps", "600", "--learning-starts", "200", "--buffer-size", "500", "--batch-size", "32"]
    assert cli.main(["train", "dqn", *flags, "--run-dir", run, "--no-eval"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["steps"] == 600
    assert cli.main(["eval", "dqn", "--checkpoint", run, "--episodes", "3"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["env"] == "CartPole-v1" and report["episodes"] == 3 and len(report["scores"]) == 3
    assert cli.main(["eval", "dqn", "--checkpoint", str(tmp_path / "missing")]) == 2
