"""Neural networks: Haiku Q-networks for DQN (Flax modules join as later notebooks need them)."""
