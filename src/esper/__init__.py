"""esper: morphogenetic training — neural networks that grow during training."""

__version__ = "0.1.0"
