import importlib.util
import json
import subprocess
import sys

import jax.numpy as jnp
import pytest

from conftest import REPO_ROOT
from labcore.tools.benchmarking import Timing, markdown_table, time_call, write_results


def test_time_call_warms_up_then_times_each_repeat():
    calls = []

    def fn(x):
        calls.append(1)
        return x * 2

    timing = time_call(fn, jnp.ones(3), warmup=2, repeats=4)
    assert len(calls) == 6
    assert len(timing.times_s) == 4 and all(t >= 0 for t in timing.times_s)
    assert timing.min_s <= timing.median_s


def test_time_call_rejects_no_repeats():
    with pytest.raises(ValueError, match="repeats"):
        time_call(lambda: None, repeats=0)


def test_timing_statistics():
    timing = Timing((3.0, 1.0, 2.0))
    assert timing.median_s == 2.0 and timing.min_s == 1.0


def test_markdown_table_formats_rows():
    table = markdown_table([{"name": "a", "steps/s": 123456.7, "ratio": 1.234}, {"name": "b", "steps/s": 12.0}])
    assert markdown_table([{"n": 1000000, "flag": True}]).splitlines()[2] == "| 1,000,000 | True |"
    lines = table.splitlines()
    assert lines[0] == "| name | steps/s | ratio |"
    assert lines[1] == "|---|---|---|"
    assert lines[2] == "| a | 123,457 | 1.23 |"
    assert lines[3] == "| b | 12 |  |"
    with pytest.raises(ValueError):
        markdown_table([])


def test_write_results_writes_json_with_machine_and_prints_table(tmp_path, capsys):
    path = write_results("demo", [{"x": 1, "y": 2.5}], out_dir=tmp_path, extra={"note": "hi"})
    data = json.loads(path.read_text())
    assert data["benchmark"] == "demo" and data["rows"] == [{"x": 1, "y": 2.5}] and data["note"] == "hi"
    assert data["machine"]["platform"] in {"cpu", "gpu", "tpu"} and data["machine"]["jax"]
    assert "| x | y |" in capsys.readouterr().out


def test_jit_speedup_benchmark_runs_end_to_end(tmp_path):
    script = REPO_ROOT / "benchmarks" / "jit_speedup.py"
    out = subprocess.run(
        [sys.executable, str(script), "--sizes", "100", "1000", "--repeats", "2", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads((tmp_path / "jit_speedup.json").read_text())["rows"]
    assert [r["vector length"] for r in rows] == [100, 1000]
    assert all(r["speed-up (x)"] > 0 for r in rows)
    assert "| vector length |" in out.stdout


@pytest.mark.end_to_end
def test_gflownet_speed_benchmark_reports_every_trainer(tmp_path):
    script = REPO_ROOT / "benchmarks" / "gflownet_speed.py"
    out = subprocess.run(
        # Each trainer's rate is (warmup + N iterations) minus (warmup iterations), timed apart: with
        # N = 4 that difference was once negative on a loaded machine; 30 keeps it well above the noise.
        [sys.executable, str(script), "--iterations", "30", "--warmup", "2", "--jax-iterations", "5", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=REPO_ROOT,
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads((tmp_path / "gflownet_speed.json").read_text())["rows"]
    assert [r["trainer"] for r in rows] == ["torch", "hybrid", "jax_policy", "jax"]
    assert all(r["iterations/s"] > 0 for r in rows)
    assert rows[0]["gradient alone (ms)"] > 0 and rows[1]["speed-up alone"] > 0
    assert "| trainer |" in out.stdout


@pytest.mark.end_to_end
def test_device_updates_benchmark_times_ppo_in_both_dtypes_and_dqn(tmp_path):
    script = REPO_ROOT / "benchmarks" / "device_updates.py"
    out = subprocess.run(
        [sys.executable, str(script), "--repeats", "2", "--skip-large", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "device_updates.json").read_text())
    assert [(r["update"].split()[0], r["compute"]) for r in data["rows"]] == [
        ("PPO", "float32"), ("PPO", "bfloat16"), ("DQN", "float32")]
    assert all(r["median ms"] > 0 and r["temp MiB"] > 0 for r in data["rows"])
    assert data["rows"][0]["time vs float32"] == 1 and data["machine"]["device_kind"]


@pytest.mark.end_to_end
def test_ppo_speed_benchmark_times_each_feature_side_by_side_under_each_cpu_scheduler(tmp_path):
    script = REPO_ROOT / "benchmarks" / "ppo_speed.py"
    out = subprocess.run(
        [sys.executable, str(script), "--envs", "4", "--timesteps", "2048", "--min-updates", "1", "--rounds", "2",
         "--features", "--vault-timesteps", "0", "--seeds", "2", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=REPO_ROOT,
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads((tmp_path / "ppo_speed.json").read_text())["rows"]
    pairs = ["CartPole 4x128, stripped to PureJaxRL's computation", "CartPole 4x128, stripped, plus the action mask",
             "CartPole 4x128, stripped, plus the truncation bootstrap", "CartPole 4x128, stripped, plus the metrics callback",
             "CartPole 4x128, default (mask, truncation bootstrap, metrics)"]
    assert [r["run"] for r in rows] == pairs + pairs + ["CartPole 4x128, vmap 2 seeds"]
    assert [r["CPU scheduler"] for r in rows] == ["XLA's default"] * 5 + ["concurrency-optimised off"] * 6
    for stripped, *others in (rows[:5], rows[5:10]):
        assert stripped["x stripped"] == 1.0 and "x stripped, range" not in stripped
        for other in others:  # each a median of its own rounds' ratios, inside their range
            low, high = map(float, other["x stripped, range"].split("-"))
            assert low - 5e-4 <= other["x stripped"] <= high + 5e-4 and other["steps/s"] > 0  # the range is rounded
    assert rows[-1]["wall per seed (s)"] > 0
    assert "| run | CPU scheduler |" in out.stdout


def test_ppo_speed_sets_the_cpu_scheduler_of_each_child_process(monkeypatch):
    spec = importlib.util.spec_from_file_location("ppo_speed", REPO_ROOT / "benchmarks" / "ppo_speed.py")
    ppo_speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ppo_speed)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_cpu_enable_concurrency_optimized_scheduler=false")
    assert ppo_speed.child_env("default")["XLA_FLAGS"] == "--xla_force_host_platform_device_count=8"
    monkeypatch.setenv("XLA_FLAGS", "")
    assert ppo_speed.child_env("off")["XLA_FLAGS"] == "--xla_cpu_enable_concurrency_optimized_scheduler=false"
