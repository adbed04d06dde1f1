import pathlib
import subprocess
import sys
import textwrap

import jax

from labcore import devices


def test_platform_matches_jax_default_backend():
    assert devices.platform() in {"cpu", "gpu", "tpu"}
    backend = jax.default_backend()
    assert devices.platform() == ("gpu" if backend in ("cuda", "rocm") else backend)


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


def fake_report(platform, memory_gib=None):
    memory = None if memory_gib is None else int(memory_gib * 1024**3)
    device = devices.DeviceInfo(id=0, platform=platform, kind="test", process_index=0, memory_bytes=memory)
    return devices.DeviceReport(platform=platform, devices=(device,), local_device_count=1, process_index=0,
                                process_count=1, in_colab=False, host_memory_bytes=None, cpu_count=2)


def test_device_class_sorts_gpus_by_memory():
    assert devices.device_class(fake_report("cpu")) == "cpu"
    assert devices.device_class(fake_report("tpu", 16)) == "tpu"
    assert devices.device_class(fake_report("gpu", 15)) == "gpu-t4"
    assert devices.device_class(fake_report("gpu", 6)) == "gpu-small"
    assert devices.device_class(fake_report("gpu", 80)) == "gpu"


def test_auto_tune_follows_the_seeds_colab_settings_and_only_shrinks():
    from labcore.agents.ppo import PPOConfig

    seed_config = PPOConfig()  # 256 envs x 128 steps x 256 units
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
        from labcore.agents import dqn_loop  # importing labcore's agents must not start a backend
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
