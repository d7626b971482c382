"""Learning: neural building blocks as models and one training loop for any model with parameters."""

from twinfer.learn._neural import MLP, apply_mlp, init_mlp

__all__ = ["MLP", "apply_mlp", "init_mlp"]
