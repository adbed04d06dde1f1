"""iqn: see labcore.agents for the modules of this package."""
