"""Personalized federated learning algorithms of the reproduced papers (vectorized over clients)."""
