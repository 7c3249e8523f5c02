"""``nn.Module``, its containers, and the layers built on them."""

from __future__ import annotations

from tensorplay.nn.modules.container import (
    ModuleDict,
    ModuleList,
    ParameterDict,
    ParameterList,
    Sequential,
)
from tensorplay.nn.modules.module import Module, RemovableHandle

__all__ = [
    "Module",
    "RemovableHandle",
    "Sequential",
    "ModuleList",
    "ModuleDict",
    "ParameterList",
    "ParameterDict",
]
