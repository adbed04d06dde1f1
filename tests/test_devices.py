import dataclasses
import pathlib
import subprocess
import sys
import textwrap

import jax
import pytest

from labcore import devices


def test_platform_matches_jax_default_backend():
    assert devices.platform() in {"cpu", "gpu", "tpu"}
    backend = jax.default_backend()
    assert devices.platform() == ("gpu" if backend in ("cuda", "rocm") else backend)


def test_compiling_for_a_platform_changes_the_form_programs_take_until_it_ends():
    assert not devices.launch_bound()  # these tests run on the CPU
    with devices.compiling_for("gpu"):
        assert devices.launch_bound() and devices.platform() == "cpu"  # the form changes, not the device
        with devices.compiling_for("tpu"):
            assert not devices.launch_bound()
        assert devices.launch_bound()
    assert not devices.launch_bound()
    with pytest.raises(ValueError, match="target_platform"), devices.compiling_for("cuda"):
        pass


def test_report_lists_every_jax_device():
    report = devices.report()
    assert report.device_count == len(jax.devices()) >= 1
    assert [d.id for d in report.devices] == [d.id for d in jax.devices()]
    assert all(d.kind == jd.device_kind for d, jd in zip(report.devices, jax.devices()))
    assert report.local_device_count == jax.local_device_count()
    assert report.process_count == 1 and report.process_index == 0
    assert report.cpu_count >= 1


def test_report_prints_and_serialises():
    report = devices.report()
    text = str(report)
    assert f"platform        {report.platform}" in text
    assert "host memory" in text
    as_dict = report.as_dict()
    assert as_dict["device_count"] == report.device_count
    assert as_dict["devices"][0]["kind"] == report.devices[0].kind


def test_cpu_devices_have_no_accelerator_memory():
    if devices.platform() != "cpu":
        return
    assert all(d.memory_bytes is None for d in devices.report().devices)


def test_host_memory_is_plausible():
    memory = devices.host_memory_bytes()
    assert memory is not None and 256 * 2**20 < memory < 2**50
    meminfo = pathlib.Path("/proc/meminfo")
    if meminfo.exists():  # Linux: cross-check with the kernel's own figure
        total_kib = int(meminfo.read_text().splitlines()[0].split()[1])
        assert abs(memory - total_kib * 1024) / memory < 0.05


def test_in_colab_follows_google_colab_module(monkeypatch):
    assert not devices.in_colab()
    monkeypatch.setitem(sys.modules, "google.colab", object())
    assert devices.in_colab()
    assert devices.report().in_colab


def test_format_bytes():
    assert devices.format_bytes(None) == "unknown"
    assert devices.format_bytes(512) == "512 B"
    assert devices.format_bytes(1536) == "1.5 KiB"
    assert devices.format_bytes(16 * 2**30) == "16.0 GiB"


def fake_report(platform, memory_gib=None, kind="test"):
    memory = None if memory_gib is None else int(memory_gib * 1024**3)
    device = devices.DeviceInfo(id=0, platform=platform, kind=kind, process_index=0, memory_bytes=memory)
    return devices.DeviceReport(platform=platform, devices=(device,), local_device_count=1, process_index=0,
                                process_count=1, in_colab=False, host_memory_bytes=None, cpu_count=2)


def test_device_class_sorts_gpus_by_memory():
    assert devices.device_class(fake_report("cpu")) == "cpu"
    assert devices.device_class(fake_report("tpu", 16)) == "tpu"
    assert devices.device_class(fake_report("gpu", 15)) == "gpu-t4"
    assert devices.device_class(fake_report("gpu", 6)) == "gpu-small"
    assert devices.device_class(fake_report("gpu", 80)) == "gpu"


def test_auto_tune_follows_the_colab_settings_for_ppo_and_only_shrinks():
    from labcore.agents.ppo.core import PPOConfig

    seed_config = PPOConfig()  # the default: 256 envs x 128 steps x 256 units
    t4, changes = devices.auto_tune(seed_config, fake_report("gpu", 15))
    assert (t4.num_envs, t4.num_steps, t4.hidden_size) == (64, 128, 256)
    assert changes == ["num_envs: 256 -> 64 (gpu-t4)"]
    small, _ = devices.auto_tune(seed_config, fake_report("gpu", 6))
    assert (small.num_envs, small.num_steps, small.hidden_size) == (32, 64, 128)
    cpu, _ = devices.auto_tune(seed_config, fake_report("cpu"))
    assert (cpu.num_envs, cpu.hidden_size) == (64, 128)
    for big in (fake_report("gpu", 80), fake_report("tpu", 16)):
        assert devices.auto_tune(seed_config, big) == (seed_config, [])
    cartpole = PPOConfig.cartpole()  # already small everywhere: left alone
    assert devices.auto_tune(cartpole, fake_report("gpu", 6)) == (cartpole, [])
    # the minibatch count follows a batch it no longer divides: 32 x 64 = 2048 is not a multiple of 3
    odd = PPOConfig(num_envs=96, num_steps=128, num_minibatches=3)
    tuned, changes = devices.auto_tune(odd, fake_report("gpu", 6))
    assert tuned.num_minibatches == 2 and "num_minibatches: 3 -> 2 (gpu-small)" in changes


def test_synchronous_cpu_dispatch_takes_effect_only_before_jax_runs():
    # A fresh interpreter: the setting is read when JAX creates its CPU backend.
    script = textwrap.dedent("""
        import warnings
        from labcore import devices
        from labcore.agents.dqn import host_loop as dqn_loop  # importing labcore's agents must not start a backend
        assert devices.synchronous_cpu_dispatch() is True
        import jax, jax.numpy as jnp
        assert jax.config.values["jax_cpu_enable_async_dispatch"] is False
        assert float(jnp.ones(3).sum()) == 3.0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert devices.synchronous_cpu_dispatch() is False
        assert any("restart" in str(w.message) for w in caught), caught
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


# One fake machine per device class, as auto_tune sees them.
FAKE_REPORTS = {
    "cpu": fake_report("cpu"),
    "gpu-small": fake_report("gpu", 6),
    "gpu-t4": fake_report("gpu", 15, "Tesla T4"),
    "gpu": fake_report("gpu", 80, "NVIDIA A100-SXM4-80GB"),
    "tpu": fake_report("tpu", 16, "TPU v5 lite"),
}


def _configs():
    """(default, large, small) configs of every algorithm: large exceeds every device class's sizes."""
    from labcore.agents.dqn.core import DQNConfig
    from labcore.agents.gflownet.core import GFlowNetConfig
    from labcore.agents.iqn.core import IQNConfig
    from labcore.agents.iqn.run_config import IQNRunConfig
    from labcore.agents.ppo.core import PPOConfig
    from labcore.agents.pqn.core import PQNConfig

    return {
        "DQNConfig": (DQNConfig(), DQNConfig.nature_atari(buffer_size=2_000_000, batch_size=1024, num_envs=1,
                                                           hidden_sizes=(1024, 1024)),
                      DQNConfig(buffer_size=1_000, batch_size=32, hidden_sizes=(64, 64))),
        "PPOConfig": (PPOConfig(), PPOConfig(num_envs=1024, num_steps=256, hidden_size=1024, num_minibatches=8,
                                             total_steps=1024 * 256),
                      PPOConfig.cartpole()),
        "PQNConfig": (PQNConfig(), PQNConfig(num_envs=4096, num_steps=256, hidden_sizes=(1024, 1024), num_minibatches=16,
                                             total_steps=4096 * 256),
                      PQNConfig.cartpole(num_envs=16, num_steps=32, hidden_sizes=(64, 64))),
        "IQNConfig": (IQNConfig(), IQNConfig(hidden_size=1024, n_tau_act=1024, batch_size=2048, buffer_size=8192),
                      IQNConfig(hidden_size=32, n_tau_act=8, batch_size=16, buffer_size=128)),
        "IQNRunConfig": (IQNRunConfig(), IQNRunConfig(num_worlds=1024, hidden_size=1024, batch_size=2048, buffer_size=8192),
                         IQNRunConfig(num_worlds=2, hidden_size=32, batch_size=16, buffer_size=128)),
        "GFlowNetConfig": (GFlowNetConfig(), GFlowNetConfig(batch_size=20_000, hidden_size=1024),
                           GFlowNetConfig(batch_size=8, hidden_size=32)),
    }


def _field_names(config) -> list[str]:
    """A config's fields; a composed config (IQNRunConfig) lists its flat ones (the world's and the agent's by name)."""
    cls = type(config)
    return [f.name for f in (cls.flat_fields() if hasattr(cls, "flat_fields") else dataclasses.fields(cls))]


def _sizes(config):
    return {field: getattr(config, field) for field in devices.device_sizes(config).fields()}


def _at_most(new, old):
    if isinstance(old, tuple):
        return len(new) == len(old) and all(a <= b for a, b in zip(new, old))
    return new <= old


@pytest.mark.parametrize("kind", devices.DEVICE_CLASSES)
@pytest.mark.parametrize("name", ["DQNConfig", "PPOConfig", "PQNConfig", "IQNConfig", "IQNRunConfig", "GFlowNetConfig"])
def test_auto_tune_fits_every_algorithm_and_only_shrinks(name, kind):
    report = FAKE_REPORTS[kind]
    assert devices.device_class(report) == kind
    default, large, small = _configs()[name]
    table = type(default).DEVICE_SIZES
    assert table.fields() <= set(_field_names(default)), "the table names a field the config lacks"
    for config in (default, large, small):
        tuned, changes = devices.auto_tune(config, report)
        assert type(tuned) is type(config)
        dataclasses.replace(tuned)  # still passes the config's own validation
        before, after = _sizes(config), _sizes(tuned)
        assert all(_at_most(after[f], before[f]) for f in before), (before, after)
        changed = [f for f in before if after[f] != before[f]]
        assert len(changes) == len(changed) and all(f"({kind})" in line for line in changes)
        # every field outside the table is untouched
        others = [name for name in _field_names(config) if name not in before]
        assert all(getattr(tuned, f) == getattr(config, f) for f in others)
        # tuning twice changes nothing more
        assert devices.auto_tune(tuned, report) == (tuned, [])
    # a config already below every ceiling is left alone, on every device
    assert devices.auto_tune(small, report) == (small, [])
    # the large one is shrunk wherever the table has a ceiling for this device
    tuned, changes = devices.auto_tune(large, report)
    assert bool(changes) == bool(table.limits[kind])


def test_auto_tune_keeps_ppo_minibatches_dividing_the_batch():
    from labcore.agents.ppo.core import PPOConfig

    for kind, report in FAKE_REPORTS.items():
        tuned, _ = devices.auto_tune(PPOConfig(num_envs=1000, num_steps=120, num_minibatches=6,
                                               total_steps=1000 * 120), report)
        assert (tuned.num_envs * tuned.num_steps) % tuned.num_minibatches == 0
        assert tuned.num_minibatches <= 6


def test_auto_tune_caps_every_layer_of_a_width_tuple():
    from labcore.agents.dqn.core import DQNConfig

    tuned, changes = devices.auto_tune(DQNConfig(hidden_sizes=(512, 64, 300)), FAKE_REPORTS["cpu"])
    assert tuned.hidden_sizes == (256, 64, 256)
    assert changes == ["hidden_sizes: (512, 64, 300) -> (256, 64, 256) (cpu)"]


def test_auto_tune_names_a_config_without_a_table():
    @dataclasses.dataclass(frozen=True)
    class SACConfig:
        batch_size: int = 256

    with pytest.raises(TypeError, match="SACConfig declares no DEVICE_SIZES"):
        devices.auto_tune(SACConfig(), FAKE_REPORTS["cpu"])


def test_device_sizes_must_name_every_device_class():
    with pytest.raises(ValueError, match="missing \\['tpu'\\]"):
        devices.DeviceSizes(limits={"cpu": {}, "gpu-small": {}, "gpu-t4": {}, "gpu": {}})


def test_default_matmul_precision_per_platform():
    # What each platform does under JAX's default setting, whatever state earlier tests left behind.
    with jax.default_matmul_precision(None):
        _check_default_precision_per_platform()
    with jax.default_matmul_precision("highest"):
        for report in FAKE_REPORTS.values():
            assert devices.default_matmul_precision(report) == "float32"
    with jax.default_matmul_precision("high"):
        assert devices.default_matmul_precision(FAKE_REPORTS["tpu"]) == "bfloat16_3x"
    assert devices.default_matmul_precision() in {"float32", "tf32", "bfloat16"}  # this machine


def _check_default_precision_per_platform():
    assert jax.config.jax_default_matmul_precision is None
    assert devices.default_matmul_precision(FAKE_REPORTS["cpu"]) == "float32"
    assert devices.default_matmul_precision(FAKE_REPORTS["tpu"]) == "bfloat16"
    assert devices.default_matmul_precision(FAKE_REPORTS["gpu"]) == "tf32"  # an A100 (Ampere)
    assert devices.default_matmul_precision(FAKE_REPORTS["gpu-t4"]) == "float32"  # Turing: no TF32
    assert devices.default_matmul_precision(fake_report("gpu", 80, "NVIDIA H100 80GB HBM3")) == "tf32"
    assert devices.default_matmul_precision(fake_report("gpu", 16, "Tesla V100-SXM2-16GB")) == "float32"
    assert devices.default_matmul_precision(fake_report("gpu", 24, "NVIDIA L4")) == "tf32"


def test_matmul_error_against_float64():
    highest = devices.matmul_error("highest", n=128)
    assert 0 < highest < 1e-3  # float32 rounding only
    default = devices.matmul_error(n=128)
    if devices.default_matmul_precision() == "float32":
        assert default == pytest.approx(highest, rel=0.5)
    else:  # bfloat16 or TF32 inputs: orders of magnitude larger
        assert default > 10 * highest
