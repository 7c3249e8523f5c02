"""TensorPlay quickstart: tensors, broadcasting, views, DLPack interop, autograd, and the
extension path (a custom operator with its own autograd formula, checked by opcheck).

Run: python examples/quickstart.py
"""

import numpy as np

import tensorplay as tp

print(f"TensorPlay {tp.__version__} from {tp.__file__}\n")

# --- tensors, dtypes and PyTorch type promotion -------------------------------------------
x = tp.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
print("x =", x)
print("x.shape:", x.shape, " x.dtype:", x.dtype, " x.stride():", x.stride())
i = tp.arange(3)  # int64
print("int64 + float32 ->", (i + x).dtype)  # promotion like torch
print("int64 tensor / 2 ->", (i / 2).dtype, (i / 2))

# --- broadcasting -----------------------------------------------------------------------------
col = tp.tensor([[10.0], [20.0]])  # (2, 1)
print("\nx + col (2,3) + (2,1) =", x + col)
try:
    x + tp.ones(4)
except RuntimeError as e:  # a clear error naming the op and both shapes
    print("bad broadcast ->", e)

# --- views share storage and the version counter --------------------------------------------
t = x.t()  # a view: no copy
print("\nx.t() is contiguous?", t.is_contiguous(), " strides:", t.stride())
row = x[1]  # basic indexing is a view too
row.mul_(10)  # in-place through the view ...
print("after x[1].mul_(10), x =", x)  # ... is visible in x
print("x._version == row._version:", x._version == row._version)
print("reductions: x.sum(dim=0) =", x.sum(dim=0), " x.max(dim=1) =", x.max(dim=1).values)

# --- DLPack: zero-copy exchange with numpy (and torch, CuPy, tvm-ffi) ------------------------
a = np.arange(6, dtype=np.float32).reshape(2, 3)
ta = tp.from_dlpack(a)  # shares memory with the numpy array
a[0, 0] = 100.0
print("\nfrom_dlpack(numpy) sees the numpy write:", ta[0, 0].item())
back = np.from_dlpack(tp.ones(2, 2) * 3)  # and the other way round
print("np.from_dlpack(tensor) =", back.tolist())

# --- meta tensors: shapes and dtypes without data ---------------------------------------------
m = tp.empty(1024, 4096, device="meta")
print("\nmeta matmul shape:", (m @ tp.empty(4096, 8, device="meta")).shape)

# --- autograd: reverse mode, higher order, forward mode ---------------------------------------
w = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
loss = (w * w).sum()
loss.backward()
print("\nd/dw sum(w^2) =", w.grad, " grad_fn:", loss.grad_fn.name())
(g,) = tp.autograd.grad((w**3).sum(), w, create_graph=True)
(gg,) = tp.autograd.grad(g.sum(), w)
print("second derivative of sum(w^3) = 6w:", gg)
with tp.autograd.forward_ad.dual_level():
    dual = tp.autograd.forward_ad.make_dual(tp.tensor([0.0, 1.0]), tp.tensor([1.0, 1.0]))
    print(
        "forward mode: d/dx sin(x) at [0, 1] =",
        tp.autograd.forward_ad.unpack_dual(dual.sin()).tangent,
    )

# --- the extension path: your own operator, its derivative, opcheck -------------------------
from tensorplay import library  # noqa: E402 - the demo introduces it here


@library.custom_op("demo::scaled", mutates_args=())
def scaled(x):
    return tp.mul(x, 2.0)  # a Python body: the default kernel for every device


@scaled.register_fake
def _(x):
    return tp.empty_like(x)  # shapes without data: meta tensors and graph capture


@scaled.register_autograd
def _(ctx, grad_out):
    return (tp.mul(grad_out, 2.0),)  # d(2x)/dx, one gradient per input


v = tp.tensor([1.0, -2.0, 3.0], requires_grad=True)
out = scaled(v)
print("\ncustom op", scaled, "->", out, " grad_fn:", out.grad_fn.name())
out.sum().backward()
print("its registered backward: d/dv sum(scaled(v)) =", v.grad)
print("registered as tp.ops.demo.scaled:", tp.ops.demo.scaled is scaled)
print("on meta tensors (fake kernel):", scaled(tp.empty(2, 3, device="meta")).shape)
failures = library.opcheck(scaled, (tp.randn(4),), test_utils="all")
print("opcheck (schema, autograd, fake, capture, gradcheck) failures:", failures)

# --- a C++ kernel as an operator: JIT-compiled over apache-tvm-ffi (examples/demo_cpp_jit.py)
import demo_cpp_jit  # noqa: E402 - examples/ is on sys.path when this script runs

print("\n--- C++ kernel through tensorplay.utils.cpp_jit ---")
demo_cpp_jit.main()

# --- tp.compile: a chain with a custom op, fused by the TVM backend (examples/demo_compile.py)
import demo_compile  # noqa: E402

print("\n--- tp.compile with the TVM backend, and its fallback report ---")
demo_compile.main()

print(
    "\nCUDA available:",
    tp.cuda.is_available(),
    "" if tp.cuda.is_available() else f"({tp.cuda.unavailable_reason()})",
)
