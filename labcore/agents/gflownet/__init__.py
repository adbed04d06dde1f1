"""gflownet: GFlowNets on HyperGrid.

* ``core``: ``GFlowNetConfig``, the TB / DB / FL / SubTB / FM losses, the JAX policy and the
  ``lax.scan`` sampler;
* ``trainers``: the four trainers behind ``GFlowNetConfig.trainer`` (torch, hybrid, jax_policy,
  jax) and ``run``, the driver that writes a results folder.
"""
