"""Replay of compiled Triton kernels on CUDA: the per-call cost of a TensorPlay launch.

Triton's ``JITFunction.run`` binds the arguments, asks its specialiser about each one
(for objects that are not torch tensors that is a slow generic path: ``data_ptr()``,
``dtype``, string parsing), builds a cache key string, checks the kernel's globals and
then calls the compiled kernel's launcher. On an H200 host that was ~20 us per launch
with TensorPlay tensors, more than a small kernel runs for.

``FastLauncher`` keeps, per *call signature*, the ``CompiledKernel`` Triton chose the
first time and calls its launcher directly afterwards. The signature holds everything
Triton specialises on and more (so it can only be finer than Triton's key, never
coarser): per tensor its dtype, device and 16-byte alignment (dtypes and devices are
interned, so their ids stand for them: hashing a device runs Python code); per int
whether it is 1, a multiple of 16, and its type (i32/i64/u64); the value of every
constexpr and option; the current device; and, for an autotuned kernel, the values of
its ``key`` arguments (the autotuner's own cache key). A signature not seen before takes
Triton's full path once.

Not replayed (Triton's full path runs instead): launches while a launch hook is
installed (profilers such as proton read the metadata it builds), configs with a
``pre_hook``, and argument types other than tensors, ``Pointer``, numbers, strings,
None and Triton dtypes. Triton's check that a kernel's global ``constexpr`` values have
not changed since compilation runs on the full path only: change a kernel's globals and
call ``FastLauncher.clear()`` (``TritonKernel.clear_launch_cache()``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from tensorplay import Tensor
from tensorplay._extension import data_ptr_of

__all__ = ["FastLauncher"]


def _int_width(v: int) -> int:
    """Triton's integer argument type: i32, i64, or u64 (returned as 32, 64, 65)."""
    if -(1 << 31) <= v < 1 << 31:
        return 32
    return 64 if -(1 << 63) <= v < 1 << 63 else 65


class _Unsupported(Exception):
    """An argument the replay does not describe: this call takes Triton's full path."""


class FastLauncher:
    """Compiled-kernel replay for one ``triton.jit`` function (or its autotuner)."""

    def __init__(
        self,
        built: Any,
        *,
        device: Callable[[], int],
        stream: Callable[[], int],
        tune_keys: tuple[str, ...] = (),
        pointer_type: type | None = None,
    ):
        """``built``: a ``triton.jit`` function or its ``triton.autotune`` wrapper;
        ``device``/``stream``: the current CUDA device index and stream handle."""
        from triton import knobs  # noqa: PLC0415
        from triton.language import dtype as tl_dtype  # noqa: PLC0415

        self.autotuner = built if hasattr(built, "configs") else None
        jit = built.fn if self.autotuner is not None else built
        self.names: list[str] = list(jit.arg_names)
        self.position = {n: i for i, n in enumerate(self.names)}
        self.constexpr = frozenset(p.name for p in jit.params if p.is_constexpr)
        self.runtime_params = frozenset(self.names) - self.constexpr
        self.defaults = {p.name: p.default for p in jit.params if p.has_default}
        self.tune_keys = tuple(tune_keys) if self.autotuner is not None else ()
        unknown = [k for k in self.tune_keys if k not in self.position]
        if unknown:  # Triton's autotuner would ignore them silently
            raise ValueError(
                f"Triton kernel {jit.__name__}: autotune key {unknown} names no parameter; "
                f"key= must list parameters of the kernel ({', '.join(self.names)})"
            )
        self.pointer_type = pointer_type
        self.const_types = (str, bool, type(None), tl_dtype)
        self.entries: dict[tuple, tuple] = {}
        self._stream = stream
        self._device = device
        self._runtime = knobs.runtime

    def clear(self) -> None:
        self.entries.clear()

    # ---- the call signature -------------------------------------------------------------

    def _describe(self, name: str | None, value: Any) -> tuple[Any, Any]:
        """(what Triton specialises on, the value the launcher gets) for one argument."""
        t = type(value)
        if t is Tensor:
            ptr = data_ptr_of(value)
            return (id(value.dtype), id(value.device), not ptr & 15), ptr
        if t is self.pointer_type:
            ptr = value.ptr
            return (id(value.dtype), None, not ptr & 15), ptr
        if name in self.constexpr or isinstance(value, self.const_types):
            return (t, value), value  # an unhashable value fails the cache lookup: no replay
        if t is int:
            return (int, value == 1, not value % 16, _int_width(value)), value
        if t is float:
            return float, value
        raise _Unsupported

    def _signature(self, args: tuple, kwargs: dict) -> tuple[tuple, list]:
        names, describe = self.names, self._describe
        parts: list[Any] = [self._device(), len(args)]
        values: list[Any] = []
        for i, a in enumerate(args):
            if type(a) is Tensor:  # the common case, inline
                ptr = data_ptr_of(a)
                parts.append((id(a.dtype), id(a.device), not ptr & 15))
                values.append(ptr)
                continue
            part, v = describe(names[i] if i < len(names) else None, a)
            parts.append(part)
            values.append(v)
        runtime = self.runtime_params
        for k, a in kwargs.items():
            if k in runtime:
                part, v = describe(k, a)
                parts.append((k, part))
                values.append(v)
            else:  # a constexpr or a launch option (num_warps, ...): the value is the key
                parts.append((k, a))
                values.append(a)
        for k in self.tune_keys:  # the autotuner picks a config per value of these
            i = self.position[k]
            parts.append(args[i] if i < len(args) else kwargs.get(k))
        return tuple(parts), values

    # ---- launching ----------------------------------------------------------------------

    def launch(self, grid: Any, args: tuple, kwargs: dict) -> Any:
        """Launch from the replay cache and return the kernel; None when this call needs
        Triton's full path."""
        rt = self._runtime  # hooks are HookChains in Triton 3.6 (plain callables before)
        enter, leave = rt.launch_enter_hook, rt.launch_exit_hook
        if getattr(enter, "calls", enter) or getattr(leave, "calls", leave):
            return None
        try:
            key, values = self._signature(args, kwargs)
            entry = self.entries.get(key)
        except (_Unsupported, TypeError):  # TypeError: an unhashable constexpr value
            return None
        if entry is None:
            return None
        kernel, launch, head, pick, consts = entry
        full = pick(values + consts)
        if callable(grid):  # Triton passes the bound arguments, config included
            grid = grid(dict(zip(self.names, full)))
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        launch(grid[0], g1, g2, self._stream(), *head, *full)
        return kernel

    def record(self, kernel: Any, args: tuple, kwargs: dict) -> None:
        """Remember the kernel Triton's full path just launched for this call signature."""
        if kernel is None or not hasattr(kernel, "packed_metadata"):
            return
        config: dict[str, Any] = {}
        if self.autotuner is not None:
            best = getattr(self.autotuner, "best_config", None)
            if best is None or best.pre_hook is not None:
                return
            config = best.all_kwargs()
        try:
            key, values = self._signature(args, kwargs)
            hash(key)
        except (_Unsupported, TypeError):
            return
        # where each parameter's value comes from: the call (positional, then keyword
        # arguments in call order) or a constant (the chosen config, or a default)
        slot_of = {self.names[i]: i for i in range(len(args))}
        slot_of.update({k: len(args) + j for j, k in enumerate(kwargs) if k in self.position})
        consts: list[Any] = []
        order = []
        for name in self.names:
            if name in slot_of:
                order.append(slot_of[name])
                continue
            if name in config:
                value = config[name]
            elif name in self.defaults:
                value = self.defaults[name]
            else:
                return  # a parameter with no value: leave it to Triton's errors
            order.append(len(values) + len(consts))
            consts.append(value)
        if len(order) < 2:
            return
        self.entries[key] = (kernel, *_launcher(kernel), operator.itemgetter(*order), consts)


def _launcher(kernel: Any) -> tuple[Callable[..., Any], tuple]:
    """The callable launching ``kernel`` and the arguments it takes between the stream and
    the kernel's own: ``launch(gx, gy, gz, stream, *head, *args)``.

    Triton's ``CudaLauncher.__call__`` allocates the kernel's global/profile scratch (from
    ``triton.set_allocator``) and calls its compiled C launcher. A kernel that needs no
    scratch is launched through that C function directly, one Python frame less.
    """
    run = kernel.run
    hooks = (None, None, None)  # launch metadata, enter hook, exit hook: none installed
    c_launch = getattr(run, "launch", None)
    if (
        c_launch is not None
        and getattr(run, "global_scratch_size", 1) == 0
        and getattr(run, "profile_scratch_size", 1) == 0
        and hasattr(run, "launch_cooperative_grid")
        and hasattr(run, "launch_pdl")
    ):
        head = (kernel.function, run.launch_cooperative_grid, run.launch_pdl, None, None)
        return c_launch, (*head, kernel.packed_metadata, *hooks)
    return run, (kernel.function, kernel.packed_metadata, *hooks)
