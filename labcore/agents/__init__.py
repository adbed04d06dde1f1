"""RL agents: each module holds one algorithm's config, pure update functions and training loop."""
