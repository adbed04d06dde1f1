import pathlib
import sys

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
