"""Neural networks: Haiku Q-networks for DQN and PQN (q_networks); Flax NNX modules for PPO
(actor_critic) and the IQN port (noisy, iqn), used inside jitted programs through ``functional``.

``NETWORKS`` names the Q-network kinds of ``q_networks.make_q_network``. It lives here, where
importing it imports no Haiku or JAX, so that the DQN and PQN configs can check a kind on
construction without them."""

NETWORKS = ("nature_cnn", "mlp", "minatar_cnn")
