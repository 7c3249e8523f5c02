"""Test helpers: a stand-in library op that captures the way tensorplay.library ops do."""

from __future__ import annotations

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
