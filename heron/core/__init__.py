"""Pieces every algorithm shares: environments, buffers, returns, networks, logging, checkpoints."""
