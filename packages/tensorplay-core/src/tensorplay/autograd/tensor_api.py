"""The autograd part of ``Tensor``: ``backward``, hooks, ``retain_grad``."""

from __future__ import annotations

import weakref

from tensorplay._tensor import Tensor
from tensorplay.autograd import engine
from tensorplay.autograd.graph import RemovableHandle, grad_fn_of


def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate the gradient of this tensor into ``.grad`` of the leaves of its graph."""
    engine.backward(self, gradient, retain_graph, create_graph, inputs=inputs)


def register_hook(self, hook) -> RemovableHandle:
    """``hook(grad) -> grad | None`` runs when this tensor's gradient is computed."""
    if not self.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    fn = grad_fn_of(self)
    if fn is None:
        hooks = self.__dict__.setdefault("_hooks", [])
    else:
        hooks = fn._own("_tensor_hooks", dict).setdefault(self._output_nr, [])
    hooks.append(hook)
    return RemovableHandle(hooks, hook)


def retain_grad(self) -> None:
    """Keep ``.grad`` for this non-leaf tensor after backward (a no-op on leaves)."""
    if not self.requires_grad:
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    fn = grad_fn_of(self)
    if fn is not None:
        fn._own("_retained", dict)[self._output_nr] = weakref.ref(self)


def retains_grad(self) -> bool:
    fn = grad_fn_of(self)
    return fn is not None and self._output_nr in fn._retained


def requires_grad_(self, requires_grad: bool = True):
    if self.grad_fn is not None and not requires_grad:
        raise RuntimeError(
            "you can only change requires_grad flags of leaf variables. If you "
            "want to use a computed variable in a subgraph that doesn't require "
            "differentiation use var_no_grad = var.detach()."
        )
    if requires_grad and not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise RuntimeError(
            f"requires_grad_(): only Tensors of floating point and complex dtype "
            f"can require gradients, got {self.dtype}"
        )
    self.requires_grad = requires_grad
    return self


def install() -> None:
    Tensor._output_nr = 0
    Tensor._view_version = None  # see graph.grad_fn_of
    Tensor.backward = backward
    Tensor.register_hook = register_hook
    Tensor.retain_grad = retain_grad
    Tensor.retains_grad = property(retains_grad)
    Tensor.requires_grad_ = requires_grad_
