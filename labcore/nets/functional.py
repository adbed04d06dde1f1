"""An NNX module as two pure functions of a plain parameter dict, for use inside jitted programs.

NNX modules hold their parameters, as ``torch.nn.Module``s do. labcore's training programs are
pure functions of pytrees (one ``jax.jit`` around a whole ``lax.scan``), so they use a module
through NNX's functional split: the graph definition (the module's structure, static) is taken once,
and the parameters travel through the program as a plain nested dict of arrays:

    network = Functional(lambda rngs: ActorCritic(obs_size, num_actions, rngs=rngs))
    params = network.init(key)             # {'actor_0': {'kernel': [D, H], 'bias': [H]}, ...}
    logits, value = network.apply(params, obs)

``apply`` merges the graph definition with ``params`` into a module and calls it; under ``jit``
that happens once, while tracing, so the compiled program is the module's arithmetic alone. The
dict has the module's attribute names, the same leaves as ``nnx.state(module, nnx.Param)``: optax,
orbax, ``jax.tree`` functions and ``vmap`` over seeds take it as they took Linen's or Haiku's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from flax import nnx

Params = dict[str, Any]


class Functional:
    """``build(rngs) -> nnx.Module`` as ``init(key) -> params`` and ``apply(params, *args, method=...)``."""

    def __init__(self, build: Callable[[nnx.Rngs], nnx.Module]):
        self.build = build
        # The structure only: eval_shape builds the module without computing any initial value.
        abstract = nnx.eval_shape(lambda: build(nnx.Rngs(params=0)))
        self.graphdef, self.abstract_state = nnx.split(abstract)
        others = nnx.to_pure_dict(nnx.state(abstract, nnx.Not(nnx.Param)))
        if others:  # an RNG stream or batch statistics would be state the parameter dict does not carry
            raise ValueError(f"Functional takes modules whose only state is nnx.Param; this one also has {others}")

    def init(self, key: jax.Array) -> Params:
        """Fresh parameters: the module's own initialisers, drawn from ``key``, as a plain dict."""
        return nnx.to_pure_dict(nnx.state(self.build(nnx.Rngs(params=key)), nnx.Param))

    def bind(self, params: Params) -> nnx.Module:
        """The module with ``params`` as its parameters (a new module; ``params`` is not copied)."""
        state = jax.tree.map(lambda leaf: leaf, self.abstract_state)  # a fresh State to fill in
        nnx.replace_by_pure_dict(state, params)
        return nnx.merge(self.graphdef, state)

    def apply(self, params: Params, *args: Any, method: str = "__call__", **kwargs: Any) -> Any:
        """``module.method(*args, **kwargs)`` of the module holding ``params``."""
        return getattr(self.bind(params), method)(*args, **kwargs)
