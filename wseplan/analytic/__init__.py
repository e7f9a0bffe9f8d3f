"""Analytic models: pure, vectorized functions with no I/O and no printing."""
