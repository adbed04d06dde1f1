"""Neural networks: Haiku Q-networks for DQN and PQN (q_networks); Flax NNX modules for PPO
(actor_critic) and the IQN port (noisy, iqn), used inside jitted programs through ``functional``."""
