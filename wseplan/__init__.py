"""wseplan: capacity, time and cost planning for Cerebras wafer-scale systems and GPU clusters."""

__version__ = "0.1.0"
