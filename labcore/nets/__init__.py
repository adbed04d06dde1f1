"""Neural networks: Haiku Q-networks for DQN (q_networks); Flax Linen modules for PPO (actor_critic)
and the IQN port (noisy, iqn)."""
