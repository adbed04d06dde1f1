"""Inspection helpers: jaxpr text, compiled cost, recompilation counting."""

import jax.numpy as jnp

from labcore.tools import introspection


def test_jaxpr_text_shows_the_traced_operations():
    text = introspection.jaxpr_text(lambda x: jnp.sin(x) * 2.0, jnp.ones(3))
    assert "sin" in text and "mul" in text and "f32[3]" in text


def test_compiled_cost_counts_matmul_flops():
    n = 64
    cost = introspection.compiled_cost(lambda a, b: a @ b, jnp.ones((n, n)), jnp.ones((n, n)))
    assert cost["flops"] == 2 * n**3  # one multiply and one add per inner-product term
    assert cost["hlo_lines"] > 0 and cost["bytes accessed"] >= 3 * n * n * 4


def test_compile_counter_counts_new_shapes_not_new_values():
    counted = introspection.CompileCounter(lambda x: x * 2)
    counted(jnp.ones(3))
    counted(jnp.zeros(3))
    assert counted.compiles == 1
    counted(jnp.ones(4))
    assert counted.compiles == 2
    static = introspection.CompileCounter(lambda x, n: x * n, static_argnums=1)
    static(jnp.ones(2), 2)
    static(jnp.ones(2), 3)
    assert static.compiles == 2
