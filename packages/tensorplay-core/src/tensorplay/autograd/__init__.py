"""Reverse- and forward-mode automatic differentiation (``tp.autograd``)."""

from tensorplay import _dispatch
from tensorplay.autograd import _record, forward_ad, functional, graph, tensor_api
from tensorplay.autograd.engine import backward, grad
from tensorplay.autograd.function import Function, FunctionCtx, once_differentiable
from tensorplay.autograd.functional import jacfwd, jacrev, jvp
from tensorplay.autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from tensorplay.autograd.gradcheck import GradcheckError, gradcheck, gradgradcheck

__all__ = [
    "backward",
    "grad",
    "graph",
    "forward_ad",
    "Function",
    "FunctionCtx",
    "once_differentiable",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
    "inference_mode",
    "is_inference_mode_enabled",
    "functional",
    "jvp",
    "jacrev",
    "jacfwd",
    "gradcheck",
    "gradgradcheck",
    "GradcheckError",
]

tensor_api.install()
_dispatch.autograd_hooks = _record  # from now on the dispatcher records graphs
