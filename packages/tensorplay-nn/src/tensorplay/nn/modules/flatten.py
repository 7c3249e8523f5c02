"""``Flatten`` (torch's ``nn.Flatten``)."""

from __future__ import annotations

from tensorplay import Tensor
from tensorplay.nn.modules.module import Module

__all__ = ["Flatten"]


class Flatten(Module):
    """Flatten dims ``start_dim`` .. ``end_dim`` (default: all but the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input: Tensor) -> Tensor:
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
