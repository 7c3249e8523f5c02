"""tp.compile demo: a chain with a custom op in the middle, fused by the TVM backend.

Run: python examples/demo_compile.py  (the README quickstart calls ``main()``).
Without apache-tvm it says how to install it and runs the same function with the
``"eager"`` backend, so the report can still be read.
"""

from __future__ import annotations

import tensorplay as tp
from tensorplay import library


def _scaled_op():
    """``demo_compile::scaled``: x * 2 with a fake kernel (for capture) and a gradient."""
    name = "demo_compile::scaled"
    if library.has_op(name):  # main() may run twice in one process
        return library.get_op(name)

    @library.custom_op(name, mutates_args=())
    def scaled(x: tp.Tensor) -> tp.Tensor:
        return tp.mul(x, 2.0)

    scaled.register_fake(lambda x: tp.empty_like(x))
    scaled.register_autograd(lambda ctx, grad: (tp.mul(grad, 2.0),))
    return scaled


def main() -> None:
    scaled = _scaled_op()
    status = tp.compiler.tvm_status()
    if status:
        backend = "tvm"
    else:
        backend = "eager"
        print("apache-tvm is not usable here, so this demo uses backend='eager'.")
        print(f"  ({status.reason.splitlines()[0][:200]})")
        print("  To try the TVM backend: pip install './packages/tensorplay-compile[tvm]'")

    def f(x):
        y = tp.sigmoid((tp.tanh(tp.exp(x / 2) - 1) * 2) + x) * x  # 8 pointwise ops: one kernel
        return scaled(y).relu() + 1  # the custom op is a fusion barrier

    compiled = tp.compile(f, backend=backend)
    x = tp.randn(100_000, requires_grad=True)
    out = compiled(x)
    out.sum().backward()  # gradients flow through the kernels and the custom op

    expected = f(x.detach())
    assert tp.allclose(out.detach(), expected, rtol=1e-4, atol=1e-5)
    print(f"tp.compile(f, backend={backend!r}) matches eager on {x.numel():,} elements")
    print(compiled.report())


if __name__ == "__main__":
    main()
