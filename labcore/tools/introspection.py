"""Looking inside jitted functions: jaxprs, compiled size, FLOP estimates and recompilations.

    print(jaxpr_text(loss_fn, params, batch))          # what tracing recorded
    cost = compiled_cost(update, state, batch)         # {'flops': ..., 'bytes accessed': ..., 'hlo_lines': ...}
    counted = CompileCounter(fn)                        # a jitted fn that counts its traces
    counted(x); counted(x); counted.compiles            # -> 1
    bodies = scan_bodies(jax.make_jaxpr(train)(key), length=128)   # the jaxprs of 128-step scans
    count_primitives(bodies[0], "dot_general")         # matmuls per step, nested jaxprs included
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jax
from jax.extend import core as jax_core


def jaxpr_text(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """The jaxpr ``fn`` traces to for these arguments, as text."""
    return str(jax.make_jaxpr(fn)(*args, **kwargs))


def _sub_jaxprs(eqn: Any) -> Iterator[Any]:
    """The jaxprs nested in one equation's parameters (a scan's body, a cond's branches, a pjit's callee)."""
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, jax_core.ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, jax_core.Jaxpr):
                yield item


def _equations(jaxpr: Any) -> Iterator[Any]:
    """Every equation of ``jaxpr`` (a Jaxpr or ClosedJaxpr), nested jaxprs included, outer first."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        yield eqn
        for inner in _sub_jaxprs(eqn):
            yield from _equations(inner)


def count_primitives(jaxpr: Any, name: str) -> int:
    """How many ``name`` equations (e.g. "dot_general", "cond") ``jaxpr`` holds, nested jaxprs included.

    Counts what is traced, once per appearance: a loop body's equations count once, not once per
    iteration, and both branches of a cond count.
    """
    return sum(eqn.primitive.name == name for eqn in _equations(jaxpr))


def scan_bodies(jaxpr: Any, length: int | None = None) -> list[Any]:
    """The bodies (Jaxprs) of the ``lax.scan``s in ``jaxpr``, nested ones included, outer first;
    only those of ``length`` iterations when given (a rollout of num_steps steps, say)."""
    return [eqn.params["jaxpr"].jaxpr for eqn in _equations(jaxpr)
            if eqn.primitive.name == "scan" and (length is None or eqn.params["length"] == length)]


def compiled_cost(fn: Callable[..., Any], *args: Any, static_argnums: tuple[int, ...] = ()) -> dict[str, float]:
    """XLA's estimate for the compiled ``fn(*args)``: flops, bytes accessed, and HLO size.

    flops: floating-point operations of one call (XLA's count: a multiply-add is 2);
    'bytes accessed': memory traffic estimate; hlo_lines / hlo_chars: size of the optimised HLO
    text, a rough measure of how much program the trace produced.
    """
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn, static_argnums=static_argnums)
    compiled = jitted.lower(*args).compile()
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list):  # older jax returned one dict per computation
        analysis = analysis[0] if analysis else {}
    analysis = dict(analysis or {})
    hlo = compiled.as_text() or ""
    return {
        "flops": float(analysis.get("flops", 0.0)),
        "bytes accessed": float(analysis.get("bytes accessed", 0.0)),
        "hlo_lines": float(hlo.count("\n")),
        "hlo_chars": float(len(hlo)),
    }


class CompileCounter:
    """``jax.jit(fn)`` that counts how often it was traced (each trace is followed by a compile).

    A new input shape or dtype, or a new value of a static argument, means a new trace; the
    count makes accidental recompilation in a training loop visible.
    """

    def __init__(self, fn: Callable[..., Any], **jit_kwargs: Any):
        self.compiles = 0

        def traced(*args: Any, **kwargs: Any) -> Any:
            self.compiles += 1  # runs at trace time only: a Python side effect jit does not replay
            return fn(*args, **kwargs)

        self._jitted = jax.jit(traced, **jit_kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._jitted(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        return self._jitted.lower(*args, **kwargs)
