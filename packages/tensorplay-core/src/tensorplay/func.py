"""``tensorplay.func``: function transforms (PyTorch's ``torch.func``)."""

from __future__ import annotations

from tensorplay._vmap import vmap

__all__ = ["vmap"]
