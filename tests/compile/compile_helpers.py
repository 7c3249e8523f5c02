"""Test helpers: a stand-in library op that captures the way tensorplay.library ops do, and
stand-ins for installed apache-tvm releases."""

from __future__ import annotations

import importlib.abc
import types

import tensorplay as tp
from tensorplay import capture


class FakeLibraryOp:
    """Calls ``capture_call`` when a capture is live and an argument is symbolic, like a
    ``custom_op``; otherwise runs its body (``x * scale``), also on meta tensors."""

    def __init__(self, name: str = "demo::scaled", *, scale: float = 3.0, **flags: bool) -> None:
        self.name = name
        self.scale = scale
        self.calls = 0
        for flag, value in flags.items():
            setattr(self, flag, value)

    def __call__(self, x: tp.Tensor) -> tp.Tensor:
        if capture.capturing() and capture.contains_proxy((x,)):
            return capture.capture_call(self, (x,), {})
        self.calls += x.device.type != "meta"
        return tp.mul(x, self.scale)


def plugin_backend(gm, example_inputs):  # noqa: ANN001, ANN201 - loaded through an entry point
    """A backend published through the ``tensorplay.compiler_backends`` entry-point group."""
    return gm


def fake_tvm_release(version: str) -> types.ModuleType:
    """An installed apache-tvm as the detection sees it: the API the backend uses, this version
    (put it in ``sys.modules["tvm"]``)."""
    fake = types.ModuleType("tvm")
    fake.__file__ = "/site-packages/tvm/__init__.py"
    fake.__version__ = version
    fake.te = types.SimpleNamespace(create_prim_func=None)
    for name in ("tirx", "s_tir", "compile", "IRModule", "target"):
        setattr(fake, name, object())
    return fake


class BrokenTvmImport(importlib.abc.MetaPathFinder):
    """Put first on ``sys.meta_path``: ``import tvm`` fails as apache-tvm 0.25.0.post1 does
    next to apache-tvm-ffi 0.1.15 (its native library misses a symbol)."""

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201
        if name == "tvm":
            raise OSError("libtvm_runtime.so: undefined symbol: _ZN3tvm3ffi4json9Stringify")
        return None
