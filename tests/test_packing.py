"""labcore.packing: a scan's per-step outputs written as one row, bit for bit the plain scan."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from labcore import devices, packing


def step(carry, _):
    """A step returning a leaf of every packable kind, NaN payloads and -0.0 included."""
    key, t = carry
    key, sub = jax.random.split(key)
    bits = jax.random.bits(sub, (3, 2), jnp.uint32)
    out = {
        # random bits (denormals, infinities), a NaN with a payload and a negative NaN
        "float32": jax.lax.bitcast_convert_type(bits.at[0].set(jnp.uint32([0x7FC01234, 0xFFA00001])), jnp.float32),
        "int32": jax.lax.bitcast_convert_type(bits[0], jnp.int32),
        "uint32": bits[1],
        "bool": (bits[2] & 1) == 1,
        "int8": jax.lax.bitcast_convert_type((bits[0] & 0xFF).astype(jnp.uint8), jnp.int8),
        "uint16": (bits[1] >> 16).astype(jnp.uint16),
        "bfloat16": jax.lax.bitcast_convert_type((bits[2] >> 16).astype(jnp.uint16), jnp.bfloat16),
        "float16": jax.lax.bitcast_convert_type((bits[0] >> 16).astype(jnp.uint16), jnp.float16),
        "scalar": jnp.float32(-0.0) * t,
        "nested": (t, None),
    }
    return (key, t + 1), out


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def test_packed_outputs_are_the_scans_bit_for_bit():
    carry = (jax.random.key(0), jnp.int32(0))
    expected = jax.jit(lambda c: jax.lax.scan(step, c, None, length=7))(carry)
    packed = jax.jit(lambda c: packing.scan_packed(step, c, 7))(carry)
    assert jax.tree_util.tree_structure(packed) == jax.tree_util.tree_structure(expected)
    for a, b in zip(jax.tree_util.tree_leaves(expected[1]), jax.tree_util.tree_leaves(packed[1])):
        same_bits(a, b)
    assert np.isnan(np.asarray(packed[1]["float32"])).any()  # the check covered NaN bits
    same_bits(jax.random.key_data(expected[0][0]), jax.random.key_data(packed[0][0]))


def test_one_write_per_step():
    """The packed step's outputs are one array: one stacked buffer for the scan to write."""
    carry = (jax.random.key(0), jnp.int32(0))
    program = jax.make_jaxpr(lambda c: packing.scan_packed(step, c, 5))(carry)
    (scan,) = [eqn for eqn in program.jaxpr.eqns if eqn.primitive.name == "scan"]
    assert len(scan.outvars) - scan.params["num_carry"] == 1


def test_wider_leaves_are_refused_by_name():
    with pytest.raises(TypeError, match="complex64"):
        packing.scan_packed(lambda c, _: (c, jnp.zeros(2, jnp.complex64)), jnp.int32(0), 3)


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu form", "gpu form"])
def test_scan_packs_on_a_gpu_only(monkeypatch, gpu):
    monkeypatch.setattr(devices, "launch_bound", lambda: gpu)
    carry = (jax.random.key(0), jnp.int32(0))
    program = jax.make_jaxpr(lambda c: packing.scan(step, c, 5))(carry)
    (scan,) = [eqn for eqn in program.jaxpr.eqns if eqn.primitive.name == "scan"]
    leaves = len(jax.tree_util.tree_leaves(jax.eval_shape(lambda c: step(c, None)[1], carry)))
    assert len(scan.outvars) - scan.params["num_carry"] == (1 if gpu else leaves)
