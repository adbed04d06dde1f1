import json
import subprocess
import sys

import jax.numpy as jnp
import pytest

from labcore.tools import doctor


def test_stack_versions_include_the_core_stack():
    versions = doctor.stack_versions()
    for name in ("python", "jax", "jaxlib", "flax", "dm-haiku", "optax", "gymnasium", "labcore"):
        assert versions[name] != "not installed", name


def test_matmul_measurement_is_positive_and_consistent():
    result = doctor.measure_matmul(n=128, repeats=3)
    assert result.seconds > 0
    assert result.gflops == pytest.approx(2 * 128**3 / result.seconds / 1e9)


def test_jit_speedup_measures_the_same_function_both_ways():
    x = jnp.linspace(-2, 2, 1000)
    import jax

    assert jnp.allclose(doctor.elementwise_chain(x), jax.jit(doctor.elementwise_chain)(x), rtol=1e-5)
    result = doctor.measure_jit_speedup(size=10_000, repeats=3)
    assert result.speedup == pytest.approx(result.eager_seconds / result.jit_seconds)


@pytest.mark.parametrize("bad", [0, -5])
def test_measurements_reject_bad_sizes(bad):
    with pytest.raises(ValueError, match="must be >= 1"):
        doctor.measure_matmul(n=bad)
    with pytest.raises(ValueError, match="must be >= 1"):
        doctor.measure_jit_speedup(size=bad)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "labcore", *args], capture_output=True, text=True, timeout=300)


def test_doctor_command_prints_versions_devices_and_benchmark():
    out = run_cli("doctor", "--matmul-n", "256", "--vector-size", "100000")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "== versions" in text and "jax " in text
    assert "== devices" in text and "platform" in text
    assert "GFLOP/s" in text and "jit speed-up" in text
    assert "== persistent compilation cache" in text


def test_doctor_json_is_machine_readable():
    out = run_cli("doctor", "--json", "--matmul-n", "128", "--vector-size", "1000")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["matmul"]["gflops"] > 0
    assert data["devices"]["device_count"] >= 1
    assert data["versions"]["jax"]
    cache = data["compilation_cache"]
    assert cache["off_switch"] == "LABCORE_COMPILATION_CACHE=0"
    assert cache["enabled"] == (cache["folder"] is not None)


def test_doctor_rejects_nonsense_sizes():
    out = run_cli("doctor", "--matmul-n", "0")
    assert out.returncode == 2
    assert "--matmul-n" in out.stderr and "positive" in out.stderr


def test_exercises_command_lists_the_catalogue():
    out = run_cli("exercises")
    assert out.returncode == 0
    assert "stable_softmax" in out.stdout and "global_norm" in out.stdout
