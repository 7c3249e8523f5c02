"""Reverse- and forward-mode automatic differentiation (``tp.autograd``)."""

from tensorplay import _dispatch
from tensorplay.autograd import _record, _tensor_op, anomaly_mode, forward_ad, graph, tensor_api
from tensorplay.autograd.anomaly_mode import detect_anomaly, set_detect_anomaly
from tensorplay.autograd.engine import backward, grad
from tensorplay.autograd.function import (
    Function,
    FunctionCtx,
    InplaceFunction,
    once_differentiable,
)
from tensorplay.autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)

# Imported eagerly (0.4 ms): loaded lazily, a later `import tensorplay.autograd.gradcheck`
# would rebind `tp.autograd.gradcheck` from the function to the submodule of that name.
from tensorplay.autograd.gradcheck import GradcheckError, gradcheck, gradgradcheck

__all__ = [
    "backward",
    "grad",
    "graph",
    "forward_ad",
    "Function",
    "FunctionCtx",
    "InplaceFunction",
    "once_differentiable",
    "anomaly_mode",
    "detect_anomaly",
    "set_detect_anomaly",
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
_dispatch.register_autograd(_record, _tensor_op.record_call)  # the dispatcher records graphs

# the functional API loads on first use (it costs ~10 ms of import time)
_LAZY = {
    "functional": ("functional", None),
    "jvp": ("functional", "jvp"),
    "jacrev": ("functional", "jacrev"),
    "jacfwd": ("functional", "jacfwd"),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'tensorplay.autograd' has no attribute {name!r}")
    import importlib

    module_name, attr = _LAZY[name]
    module = importlib.import_module(f"tensorplay.autograd.{module_name}")
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value  # also replaces the submodule attribute the import just set
    return value
