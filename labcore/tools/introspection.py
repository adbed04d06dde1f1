"""Looking inside jitted functions: jaxprs, compiled size, FLOP estimates and recompilations.

    print(jaxpr_text(loss_fn, params, batch))          # what tracing recorded
    cost = compiled_cost(update, state, batch)         # {'flops': ..., 'bytes accessed': ..., 'hlo_lines': ...}
    counted = CompileCounter(fn)                        # a jitted fn that counts its traces
    counted(x); counted(x); counted.compiles            # -> 1
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax


def jaxpr_text(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """The jaxpr ``fn`` traces to for these arguments, as text."""
    return str(jax.make_jaxpr(fn)(*args, **kwargs))


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
