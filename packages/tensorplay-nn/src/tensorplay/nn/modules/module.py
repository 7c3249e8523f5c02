"""``nn.Module``: the base class of every layer, with PyTorch's semantics.

A module owns parameters (``_parameters``), buffers (``_buffers``) and child modules
(``_modules``), all registered by attribute assignment; ``__call__`` runs the forward
pre-hooks, ``forward`` and the forward hooks, and wires the full backward (pre-)hooks into the
autograd graph. ``state_dict`` / ``load_state_dict`` save and restore the tensors by dotted
name; unlike PyTorch, a load that fails changes nothing.
"""

from __future__ import annotations

import contextvars
import copy
import itertools
import warnings
import weakref
from collections import OrderedDict, namedtuple
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.nn.parameter import Buffer, Parameter
from tensorplay.nn.utils._grads import zero_grads

__all__ = ["Module", "RemovableHandle"]


def _typename(obj: Any) -> str:
    """``torch.typename``: the dotted name of ``obj``'s type (``tensorplay.Tensor``)."""
    if isinstance(obj, Tensor):
        return "tensorplay.Tensor"
    cls = obj if isinstance(obj, type) else type(obj)
    module = getattr(cls, "__module__", "") or ""
    name = getattr(cls, "__qualname__", cls.__name__)
    return name if module in ("", "builtins") else f"{module}.{name}"


def _addindent(s: str, num_spaces: int) -> str:
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    first = lines.pop(0)
    return first + "\n" + "\n".join(num_spaces * " " + line for line in lines)


class RemovableHandle:
    """A hook's registration: ``remove()`` (or leaving a ``with`` block) unregisters it.

    Holds its hook dicts weakly, so a handle does not keep a module alive.
    """

    _next_id = 0

    def __init__(self, hooks_dict: OrderedDict, *, extra_dict: Any = None) -> None:
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = RemovableHandle._next_id
        RemovableHandle._next_id += 1
        extras = [] if extra_dict is None else extra_dict
        if not isinstance(extras, (list, tuple)):
            extras = [extras]
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extras)

    def remove(self) -> None:
        for ref in (self.hooks_dict_ref, *self.extra_dict_ref):
            d = ref()
            if d is not None and self.id in d:
                del d[self.id]

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"<RemovableHandle id={self.id}>"


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _forward_unimplemented(self, *args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(
        f'Module [{type(self).__name__}] is missing the required "forward" function'
    )


# While ``load_state_dict`` validates, ``_load_from_state_dict`` queues its copies here
# instead of doing them; they run only once the whole state dict is known to load.
_LOAD_PLAN: contextvars.ContextVar[list | None] = contextvars.ContextVar("_LOAD_PLAN", default=None)
# While ``_apply`` converts a module tree: id(old parameter) -> (old, new), so a parameter
# shared by several modules stays shared after ``to()``.
_APPLY_MEMO: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "_APPLY_MEMO", default=None
)


def _check_name(kind: str, name: Any) -> None:
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string. Got {_typename(name)}")
    if "." in name:
        raise KeyError(f'{kind} name can\'t contain ".", got: {name}')
    if name == "":
        raise KeyError(f'{kind} name can\'t be empty string ""')


def _parse_to(args: tuple, kwargs: dict) -> tuple:
    """``Module.to``'s arguments -> ``(device, dtype)`` (either may be None)."""
    kwargs = dict(kwargs)
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    kwargs.pop("memory_format", None)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword argument(s) {sorted(kwargs)}")
    if len(args) > 2:
        raise TypeError(f"to() takes at most 2 positional arguments ({len(args)} given)")
    for a in args:
        if isinstance(a, tp.dtype):
            dtype = a
        elif isinstance(a, Tensor):
            device, dtype = a.device, a.dtype
        elif isinstance(a, (str, tp.device)) or (isinstance(a, int) and not isinstance(a, bool)):
            device = a
        elif isinstance(a, bool):  # to(device, dtype, non_blocking)
            continue
        else:
            raise TypeError(
                f"to() received an invalid combination of arguments: got {_typename(a)}; "
                "expected a device, a dtype or a tensor"
            )
    if device is not None and not isinstance(device, (str, int, tp.device)):
        raise TypeError(f"to(device=): expected a device, got {_typename(device)}")
    if dtype is not None and not isinstance(dtype, tp.dtype):
        raise TypeError(f"to(dtype=): expected a tensorplay dtype, got {_typename(dtype)}")
    if isinstance(device, str):
        device = tp.device(device)
    return device, dtype


def _is_float(t: Tensor) -> bool:
    return t.dtype.is_floating_point or t.dtype.is_complex


class Module:
    """Base class of all neural network modules (``torch.nn.Module``'s API).

    Subclasses call ``super().__init__()`` before assigning parameters or submodules, and
    define ``forward``; call the module (``m(x)``), not ``forward``, so hooks run.
    """

    dump_patches: bool = False
    _version: int = 1
    training: bool
    call_super_init: bool = False

    forward: Callable[..., Any] = _forward_unimplemented

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if not self.call_super_init and kwargs:
            raise TypeError(
                f"{type(self).__name__}.__init__() got an unexpected keyword argument "
                f"'{next(iter(kwargs))}'"
            )
        if not self.call_super_init and args:
            raise TypeError(
                f"{type(self).__name__}.__init__() takes 1 positional argument but "
                f"{len(args) + 1} were given"
            )
        setattr_ = object.__setattr__
        setattr_(self, "training", True)
        setattr_(self, "_parameters", OrderedDict())
        setattr_(self, "_buffers", OrderedDict())
        setattr_(self, "_non_persistent_buffers_set", set())
        setattr_(self, "_forward_hooks", OrderedDict())
        setattr_(self, "_forward_hooks_with_kwargs", OrderedDict())
        setattr_(self, "_forward_hooks_always_called", OrderedDict())
        setattr_(self, "_forward_pre_hooks", OrderedDict())
        setattr_(self, "_forward_pre_hooks_with_kwargs", OrderedDict())
        setattr_(self, "_backward_hooks", OrderedDict())
        setattr_(self, "_backward_pre_hooks", OrderedDict())
        setattr_(self, "_state_dict_hooks", OrderedDict())
        setattr_(self, "_state_dict_pre_hooks", OrderedDict())
        setattr_(self, "_load_state_dict_pre_hooks", OrderedDict())
        setattr_(self, "_load_state_dict_post_hooks", OrderedDict())
        setattr_(self, "_modules", OrderedDict())
        if self.call_super_init:
            super().__init__(*args, **kwargs)

    # ---- registration -------------------------------------------------------------------

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Add a buffer: state saved in ``state_dict`` (unless ``persistent=False``) that is
        not trained, such as running statistics."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        _check_name("buffer", name)
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(
                f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                "(tensorplay Tensor or None required)"
            )
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def register_parameter(self, name: str, param: Tensor | None) -> None:
        """Add a parameter (an ``nn.Parameter``, or None) under ``name``."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_name("parameter", name)
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is None:
            self._parameters[name] = None
        elif not isinstance(param, Parameter):
            raise TypeError(
                f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                "(nn.Parameter or None required)"
            )
        elif getattr(param, "grad_fn", None) is not None:
            raise ValueError(
                f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must be "
                f"created explicitly. To express '{name}' as a function of another Tensor, "
                "compute the value in the forward() method."
            )
        else:
            self._parameters[name] = param

    def add_module(self, name: str, module: Module | None) -> None:
        """Add a child module under ``name`` (an attribute of this module)."""
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        if "_modules" not in self.__dict__:
            raise AttributeError("cannot assign module before Module.__init__() call")
        _check_name("module", name)
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    def register_module(self, name: str, module: Module | None) -> None:
        """Alias of ``add_module``."""
        self.add_module(name, module)

    def get_submodule(self, target: str) -> Module:
        """The submodule at dotted path ``target`` (``""`` is this module)."""
        if target == "":
            return self
        mod: Module = self
        for item in target.split("."):
            if not isinstance(mod, Module) or item not in mod._modules:
                raise AttributeError(mod._get_name() + " has no attribute `" + item + "`")
            mod = mod._modules[item]
            if not isinstance(mod, Module):
                raise AttributeError("`" + item + "` is not an nn.Module")
        return mod

    def get_parameter(self, target: str) -> Tensor:
        """The parameter at dotted path ``target`` (``"fc.weight"``)."""
        module_path, _, param_name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, param_name):
            raise AttributeError(mod._get_name() + " has no attribute `" + param_name + "`")
        param = getattr(mod, param_name)
        if not isinstance(param, Parameter):
            raise AttributeError("`" + param_name + "` is not an nn.Parameter")
        return param

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at dotted path ``target``."""
        module_path, _, buffer_name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, buffer_name):
            raise AttributeError(mod._get_name() + " has no attribute `" + buffer_name + "`")
        if buffer_name not in mod._buffers:
            raise AttributeError("`" + buffer_name + "` is not a buffer")
        return getattr(mod, buffer_name)

    def get_extra_state(self) -> Any:
        """Override (with ``set_extra_state``) to save extra state in ``state_dict``."""
        raise RuntimeError(
            "Reached a code path in Module.get_extra_state() that should never be called."
        )

    def set_extra_state(self, state: Any) -> None:
        raise RuntimeError(
            "Reached a code path in Module.set_extra_state() that should never be called."
        )

    def _has_extra_state(self) -> bool:
        return type(self).get_extra_state is not Module.get_extra_state

    # ---- attributes ---------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__

        def remove_from(*stores: Any) -> None:
            for s in stores:
                if name in s:
                    if isinstance(s, dict):
                        del s[name]
                    else:
                        s.discard(name)

        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            remove_from(d, self._buffers, self._modules, self._non_persistent_buffers_set)
            self.register_parameter(name, value)
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{_typename(value)}' as parameter '{name}' "
                    "(nn.Parameter or None expected)"
                )
            self.register_parameter(name, value)
            return
        modules = d.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            remove_from(d, self._parameters, self._buffers, self._non_persistent_buffers_set)
            modules[name] = value
            return
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{_typename(value)}' as child module '{name}' "
                    "(nn.Module or None expected)"
                )
            modules[name] = value
            return
        buffers = d.get("_buffers")
        if isinstance(value, Buffer) or (buffers is not None and name in buffers):
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(
                    f"cannot assign '{_typename(value)}' as buffer '{name}' "
                    "(nn.Buffer, tensorplay Tensor or None expected)"
                )
            if buffers is None:
                raise AttributeError("cannot assign buffer before Module.__init__() call")
            if isinstance(value, Buffer):
                persistent = value.__dict__["_buffer_persistent"]
            else:
                persistent = name not in self._non_persistent_buffers_set
            if name not in buffers:
                remove_from(d)  # a plain attribute of that name gives way to the buffer
            self.register_buffer(name, value, persistent)
            return
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._buffers:
            del self._buffers[name]
            self._non_persistent_buffers_set.discard(name)
        elif name in self._modules:
            del self._modules[name]
        else:
            object.__delattr__(self, name)

    def __dir__(self) -> list[str]:
        keys = (
            dir(type(self))
            + list(self.__dict__)
            + list(self._parameters)
            + list(self._modules)
            + list(self._buffers)
        )
        return sorted({k for k in keys if not k[0].isdigit()})

    def __deepcopy__(self, memo: dict) -> Module:
        # Tensor deep copies drop the parameter mark: copy parameters as Parameters.
        for p in self._parameters.values():
            if p is not None and id(p) not in memo:
                new = Parameter(p.detach().clone(), requires_grad=p.requires_grad)
                if p.grad is not None:
                    new.grad = p.grad.detach().clone()
                memo[id(p)] = new
        cls = type(self)
        out = cls.__new__(cls)
        memo[id(self)] = out
        for k, v in self.__dict__.items():
            out.__dict__[k] = copy.deepcopy(v, memo)
        return out

    # ---- calling ------------------------------------------------------------------------

    def _call_impl(self, *args: Any, **kwargs: Any) -> Any:
        if not (
            self._forward_hooks
            or self._forward_pre_hooks
            or self._backward_hooks
            or self._backward_pre_hooks
        ):
            return self.forward(*args, **kwargs)
        called_always: set = set()
        try:
            for hook_id, hook in list(self._forward_pre_hooks.items()):
                if hook_id in self._forward_pre_hooks_with_kwargs:
                    res = hook(self, args, kwargs)
                    if res is not None:
                        if isinstance(res, tuple) and len(res) == 2:
                            args, kwargs = res
                        else:
                            raise RuntimeError(
                                "forward pre-hook must return None or a tuple of "
                                f"(new_args, new_kwargs), but got {res}."
                            )
                else:
                    res = hook(self, args)
                    if res is not None:
                        args = res if isinstance(res, tuple) else (res,)
            bw_hook = None
            if self._backward_hooks or self._backward_pre_hooks:
                # the hooks registered now serve this call's backward, as in torch
                hooks, pre_hooks = self._backward_hooks, self._backward_pre_hooks
                bw_hook = _BackwardHook(self, list(hooks.values()), list(pre_hooks.values()))
                args = bw_hook.setup_input_hook(args)
            result = self.forward(*args, **kwargs)
            for hook_id, hook in list(self._forward_hooks.items()):
                if hook_id in self._forward_hooks_always_called:
                    called_always.add(hook_id)
                if hook_id in self._forward_hooks_with_kwargs:
                    res = hook(self, args, kwargs, result)
                else:
                    res = hook(self, args, result)
                if res is not None:
                    result = res
            if bw_hook is not None:
                if not isinstance(result, (Tensor, tuple)):
                    warnings.warn(
                        "For backward hooks to be called, module output should be a Tensor or a "
                        f"tuple of Tensors but received {type(result)}",
                        stacklevel=2,
                    )
                result = bw_hook.setup_output_hook(result)
            return result
        except Exception:
            for hook_id, hook in list(self._forward_hooks.items()):
                if hook_id in self._forward_hooks_always_called and hook_id not in called_always:
                    try:
                        if hook_id in self._forward_hooks_with_kwargs:
                            hook(self, args, kwargs, None)
                        else:
                            hook(self, args, None)
                    except Exception:  # noqa: S112 - the forward's error is the one to raise
                        continue
            raise

    __call__: Callable[..., Any] = _call_impl

    def register_forward_pre_hook(
        self, hook: Callable, *, prepend: bool = False, with_kwargs: bool = False
    ) -> RemovableHandle:
        """``hook(module, args)`` (or ``hook(module, args, kwargs)`` with ``with_kwargs``)
        runs before ``forward``; it may return new args (a tuple, or a single value) or, with
        kwargs, a ``(new_args, new_kwargs)`` pair."""
        if not callable(hook):
            raise TypeError(
                f"register_forward_pre_hook(hook=): expected a callable, got {_typename(hook)}"
            )
        handle = RemovableHandle(
            self._forward_pre_hooks, extra_dict=self._forward_pre_hooks_with_kwargs
        )
        self._forward_pre_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_hook(
        self,
        hook: Callable,
        *,
        prepend: bool = False,
        with_kwargs: bool = False,
        always_call: bool = False,
    ) -> RemovableHandle:
        """``hook(module, args, output)`` (``hook(module, args, kwargs, output)`` with
        ``with_kwargs``) runs after ``forward``; a non-None return replaces the output.
        ``always_call=True`` runs it (with output None) even when ``forward`` raises."""
        if not callable(hook):
            raise TypeError(
                f"register_forward_hook(hook=): expected a callable, got {_typename(hook)}"
            )
        handle = RemovableHandle(
            self._forward_hooks,
            extra_dict=[self._forward_hooks_with_kwargs, self._forward_hooks_always_called],
        )
        self._forward_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_full_backward_pre_hook(
        self, hook: Callable, prepend: bool = False
    ) -> RemovableHandle:
        """``hook(module, grad_output)`` runs when the gradients of this module's outputs are
        known, before the gradients of its inputs are computed; it may return a new
        ``grad_output`` (a tuple as long as the one it got). ``grad_output`` has an entry per
        output (None for a non-tensor one and for an output that got no gradient)."""
        if not callable(hook):
            raise TypeError(
                "register_full_backward_pre_hook(hook=): expected a callable, got "
                f"{_typename(hook)}"
            )
        handle = RemovableHandle(self._backward_pre_hooks)
        self._backward_pre_hooks[handle.id] = hook
        if prepend:
            self._backward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_full_backward_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_input, grad_output)`` runs when the gradients of this module's
        positional inputs are computed; it may return a new ``grad_input`` (a tuple as long as
        the one it got) that replaces them. Entries are None for non-tensor arguments; keyword
        arguments are not included. When no input requires grad, it runs with ``grad_input``
        all None (and must return None), like torch. The hooks registered when the module is
        called are the ones its backward runs."""
        if not callable(hook):
            raise TypeError(
                f"register_full_backward_hook(hook=): expected a callable, got {_typename(hook)}"
            )
        handle = RemovableHandle(self._backward_hooks)
        self._backward_hooks[handle.id] = hook
        if prepend:
            self._backward_hooks.move_to_end(handle.id, last=False)
        return handle

    # ---- traversal ----------------------------------------------------------------------

    def _named_members(
        self,
        get_members: Callable,
        prefix: str = "",
        recurse: bool = True,
        remove_duplicate: bool = True,
    ) -> Iterator[tuple[str, Any]]:
        memo: set[int] = set()
        modules = (
            self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
            if recurse
            else [(prefix, self)]
        )
        for module_prefix, module in modules:
            for k, v in get_members(module):
                if v is None or id(v) in memo:
                    continue
                if remove_duplicate:
                    memo.add(id(v))
                yield module_prefix + ("." if module_prefix else "") + k, v

    def parameters(self, recurse: bool = True) -> Iterator[Tensor]:
        """This module's parameters (and its descendants' with ``recurse``), each once."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        """``(dotted name, parameter)`` pairs; a shared parameter comes once, under its
        first name, unless ``remove_duplicate=False``."""
        yield from self._named_members(
            lambda m: m._parameters.items(), prefix, recurse, remove_duplicate
        )

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        yield from self._named_members(
            lambda m: m._buffers.items(), prefix, recurse, remove_duplicate
        )

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        memo: set[int] = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in memo:
                memo.add(id(module))
                yield name, module

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_modules(
        self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """``(dotted name, module)`` for this module (name ``prefix``) and every descendant,
        depth first; a module reachable twice comes once unless ``remove_duplicate=False``."""
        if memo is None:
            memo = set()
        if self in memo:
            return
        if remove_duplicate:
            memo.add(self)
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            sub_prefix = prefix + ("." if prefix else "") + name
            yield from module.named_modules(memo, sub_prefix, remove_duplicate)

    # ---- modes and gradients ------------------------------------------------------------

    def train(self, mode: bool = True) -> Module:
        """Set training mode (``mode=False``: evaluation) here and in every descendant."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's ``.grad``: to None, or (``set_to_none=False``) to zeros in
        place."""
        zero_grads(self.parameters(), set_to_none)

    def apply(self, fn: Callable[[Module], None]) -> Module:
        """Call ``fn`` on every descendant (children first) and then on this module."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # ---- conversions --------------------------------------------------------------------

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> Module:
        memo = _APPLY_MEMO.get()
        token = _APPLY_MEMO.set({}) if memo is None else None
        try:
            memo = _APPLY_MEMO.get()
            if recurse:
                for module in self.children():
                    module._apply(fn)
            for key, param in self._parameters.items():
                if param is None:
                    continue
                hit = memo.get(id(param))
                if hit is not None:
                    self._parameters[key] = hit[1]
                    continue
                with tp.no_grad():
                    new_data = fn(param)
                    grad = param.grad
                    new_grad = fn(grad) if grad is not None else None
                if new_data is param and new_grad is grad:
                    new = param
                else:
                    new = Parameter(new_data.detach(), requires_grad=param.requires_grad)
                    if new_grad is not None:
                        new.grad = new_grad.detach()
                memo[id(param)] = (param, new)
                self._parameters[key] = new
            for key, buf in self._buffers.items():
                if buf is None:
                    continue
                hit = memo.get(id(buf))
                if hit is not None:
                    self._buffers[key] = hit[1]
                    continue
                with tp.no_grad():
                    new = fn(buf)
                memo[id(buf)] = (buf, new)
                self._buffers[key] = new
        finally:
            if token is not None:
                _APPLY_MEMO.reset(token)
        return self

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """Move and/or cast parameters and buffers, in place: ``to(device)``, ``to(dtype)``,
        ``to(device, dtype)``, ``to(tensor)``, ``to(device=..., dtype=...)``. Only floating
        point (and complex) tensors change dtype; parameters stay Parameters (new tensor
        objects when anything changes; a parameter shared by modules stays shared)."""
        device, dtype = _parse_to(args, kwargs)
        if dtype is not None and not (dtype.is_floating_point or dtype.is_complex):
            raise TypeError(
                "nn.Module.to only accepts floating point or complex dtypes, but got desired "
                f"dtype={dtype}"
            )

        def convert(t: Tensor) -> Tensor:
            kw: dict[str, Any] = {}
            if device is not None:
                kw["device"] = device
            if dtype is not None and _is_float(t):
                kw["dtype"] = dtype
            return t.to(**kw) if kw else t

        return self._apply(convert)

    def cpu(self) -> Module:
        return self._apply(lambda t: t.cpu())

    def cuda(self, device: Any = None) -> Module:
        return self._apply(lambda t: t.cuda() if device is None else t.cuda(device))

    def _cast_floats(self, dtype: Any) -> Module:
        return self._apply(lambda t: t.to(dtype=dtype) if t.dtype.is_floating_point else t)

    def float(self) -> Module:
        return self._cast_floats(tp.float32)

    def double(self) -> Module:
        return self._cast_floats(tp.float64)

    def half(self) -> Module:
        return self._cast_floats(tp.float16)

    def bfloat16(self) -> Module:
        return self._cast_floats(tp.bfloat16)

    # ---- state dict ---------------------------------------------------------------------

    def register_state_dict_pre_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, prefix, keep_vars)`` runs before ``state_dict`` saves this module."""
        handle = RemovableHandle(self._state_dict_pre_hooks)
        self._state_dict_pre_hooks[handle.id] = hook
        return handle

    def register_state_dict_post_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, state_dict, prefix, local_metadata)`` runs after this module saved
        its entries; it edits ``state_dict`` in place."""
        handle = RemovableHandle(self._state_dict_hooks)
        self._state_dict_hooks[handle.id] = hook
        return handle

    def register_load_state_dict_pre_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs)`` runs before this module's entries are checked; it may
        edit ``state_dict`` in place (rename keys of an old checkpoint)."""
        handle = RemovableHandle(self._load_state_dict_pre_hooks)
        self._load_state_dict_pre_hooks[handle.id] = hook
        return handle

    def register_load_state_dict_post_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, incompatible_keys)`` runs after ``load_state_dict`` has checked (and,
        when it loads, before it copies); it may remove entries of ``missing_keys`` /
        ``unexpected_keys`` in place to accept them under ``strict=True``."""
        handle = RemovableHandle(self._load_state_dict_post_hooks)
        self._load_state_dict_post_hooks[handle.id] = hook
        return handle

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if keep_vars else buf.detach()
        if self._has_extra_state():
            destination[prefix + "_extra_state"] = self.get_extra_state()

    def state_dict(
        self, destination: Any = None, prefix: str = "", keep_vars: bool = False
    ) -> OrderedDict:
        """Name -> tensor for every parameter and persistent buffer, recursively (keys like
        ``"fc.weight"``); values are detached unless ``keep_vars=True``."""
        if not isinstance(prefix, str):
            raise TypeError(f"state_dict(prefix=): expected a str, got {_typename(prefix)}")
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()  # type: ignore[attr-defined]
        elif not isinstance(destination, dict):
            raise TypeError(
                f"state_dict(destination=): expected a dict, got {_typename(destination)}"
            )
        local_metadata = {"version": self._version}
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = local_metadata
        for hook in self._state_dict_pre_hooks.values():
            hook(self, prefix, keep_vars)
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(
                    destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars
                )
        for hook in self._state_dict_hooks.values():
            res = hook(self, destination, prefix, local_metadata)
            if res is not None:
                destination = res
        return destination

    def _load_from_state_dict(
        self,
        state_dict: Mapping,
        prefix: str,
        local_metadata: dict,
        strict: bool,
        missing_keys: list,
        unexpected_keys: list,
        error_msgs: list,
    ) -> None:
        """Check this module's own entries of ``state_dict`` (keys under ``prefix``) and load
        them: inside ``load_state_dict`` the copies are queued and done only if the whole load
        succeeds."""
        for hook in self._load_state_dict_pre_hooks.values():
            hook(
                self,
                state_dict,
                prefix,
                local_metadata,
                strict,
                missing_keys,
                unexpected_keys,
                error_msgs,
            )
        persistent = {
            k: v for k, v in self._buffers.items() if k not in self._non_persistent_buffers_set
        }
        local_state = {
            k: v
            for k, v in itertools.chain(self._parameters.items(), persistent.items())
            if v is not None
        }
        assign = local_metadata.get("assign_to_params_buffers", False)
        plan = _LOAD_PLAN.get()
        for name, param in local_state.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor):
                error_msgs.append(
                    f'While copying the parameter named "{key}", expected tensorplay Tensor from '
                    f"checkpoint but received {type(value)}"
                )
                continue
            if len(param.shape) == 0 and len(value.shape) == 1 and value.shape[0] == 1:
                value = value[0]  # old checkpoints saved scalars as shape (1,)
            if tuple(value.shape) != tuple(param.shape):
                error_msgs.append(
                    f"size mismatch for {key}: copying a param with shape {value.shape} from "
                    f"checkpoint, the shape in current model is {param.shape}."
                )
                continue
            action = (self, name, param, value, name in self._parameters, assign, key)
            if plan is None:
                _do_load(action)
            else:
                plan.append(action)
        extra_key = prefix + "_extra_state"
        if self._has_extra_state():
            if extra_key in state_dict:
                action = (
                    self,
                    "_extra_state",
                    None,
                    state_dict[extra_key],
                    False,
                    False,
                    extra_key,
                )
                if plan is None:
                    _do_load(action)
                else:
                    plan.append(action)
            elif strict:
                missing_keys.append(extra_key)
        elif strict and extra_key in state_dict:
            unexpected_keys.append(extra_key)
        if strict:
            for key in state_dict:
                if key.startswith(prefix) and key != extra_key:
                    head = key[len(prefix) :].split(".", 1)
                    if len(head) > 1:
                        if head[0] not in self._modules:
                            unexpected_keys.append(key)
                    elif head[0] not in local_state:
                        unexpected_keys.append(key)

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> _IncompatibleKeys:
        """Copy ``state_dict``'s tensors into this module's parameters and buffers.

        Everything is checked first: with ``strict`` (default), missing or unexpected keys
        are errors; shape mismatches always are. On any error a RuntimeError lists them all
        and nothing is loaded. ``assign=True`` makes the state dict's tensors the module's
        (as Parameters, keeping ``requires_grad``) instead of copying into them. Returns
        ``(missing_keys, unexpected_keys)``.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                "load_state_dict(state_dict=): expected a dict-like mapping, "
                f"got {type(state_dict)}."
            )
        if not isinstance(strict, bool):
            raise TypeError(f"load_state_dict(strict=): expected a bool, got {_typename(strict)}")
        missing_keys: list[str] = []
        unexpected_keys: list[str] = []
        error_msgs: list[str] = []
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)
        if metadata is not None:
            state_dict._metadata = metadata  # type: ignore[attr-defined]
        plan: list = []
        visited: list[Module] = []

        def load(module: Module, local_state_dict: Mapping, prefix: str = "") -> None:
            local_metadata = {} if metadata is None else dict(metadata.get(prefix[:-1], {}))
            if assign:
                local_metadata["assign_to_params_buffers"] = assign
            module._load_from_state_dict(
                local_state_dict,
                prefix,
                local_metadata,
                True,
                missing_keys,
                unexpected_keys,
                error_msgs,
            )
            visited.append(module)
            for name, child in module._modules.items():
                if child is not None:
                    child_prefix = prefix + name + "."
                    child_sd = {
                        k: v for k, v in local_state_dict.items() if k.startswith(child_prefix)
                    }
                    load(child, child_sd, child_prefix)

        token = _LOAD_PLAN.set(plan)
        try:
            load(self, state_dict)
        finally:
            _LOAD_PLAN.reset(token)
        incompatible = _IncompatibleKeys(missing_keys, unexpected_keys)
        seen: set[int] = set()
        for module in visited:
            if id(module) in seen:
                continue
            seen.add(id(module))
            for hook in module._load_state_dict_post_hooks.values():
                if hook(module, incompatible) is not None:
                    raise RuntimeError(
                        "Hooks registered with ``register_load_state_dict_post_hook`` are not "
                        "expected to return new values, if incompatible_keys need to be "
                        "modified, it should be done inplace."
                    )
        if strict:
            if unexpected_keys:
                error_msgs.insert(
                    0,
                    "Unexpected key(s) in state_dict: {}. ".format(
                        ", ".join(f'"{k}"' for k in unexpected_keys)
                    ),
                )
            if missing_keys:
                error_msgs.insert(
                    0,
                    "Missing key(s) in state_dict: {}. ".format(
                        ", ".join(f'"{k}"' for k in missing_keys)
                    ),
                )
        if error_msgs:
            raise RuntimeError(
                "Error(s) in loading state_dict for {}:\n\t{}".format(
                    type(self).__name__, "\n\t".join(error_msgs)
                )
            )
        for action in plan:
            _do_load(action)
        return incompatible

    # ---- printing -----------------------------------------------------------------------

    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """Override to add a line (or lines) of settings to this module's ``repr``."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [
            "(" + key + "): " + _addindent(repr(module), 2) for key, module in self._modules.items()
        ]
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"


class BackwardHookFunction(tp.autograd.Function):
    """Identity on tensors: its one backward node is where a module's backward hooks see the
    gradients of all its inputs (or outputs) at once."""

    @staticmethod
    def forward(ctx: Any, *args: Tensor) -> tuple:
        ctx.mark_non_differentiable(*[a for a in args if not a.requires_grad])
        return args

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple:
        return grads

    @staticmethod
    def jvp(ctx: Any, *tangents: Any) -> tuple:
        return tangents


class _BackwardHook:
    """One module call's backward hooks (torch's ``torch.utils.hooks.BackwardHook``): the
    positional tensor inputs and the tensor outputs each go through a ``BackwardHookFunction``;
    the output node's hook runs the pre-hooks and keeps ``grad_output``, the input node's hook
    runs the hooks with ``grad_input`` and passes on what they return."""

    def __init__(self, module: Module, hooks: list, pre_hooks: list) -> None:
        self.module, self.hooks, self.pre_hooks = module, hooks, pre_hooks
        self.grad_outputs: tuple | None = None
        self.n_inputs = self.n_outputs = -1
        self.input_index: list[int] | None = None
        self.output_index: list[int] | None = None
        self.input_meta: list[tuple] = []
        self.output_meta: list[tuple] = []

    @staticmethod
    def _pack(index: list[int], values: Any, size: int) -> tuple:
        res: list[Any] = [None] * size
        for i, v in zip(index, values):
            res[i] = v
        return tuple(res)

    def _check(self, grads: Any, index: list[int], meta: list[tuple], what: str) -> tuple:
        """What the hooks returned, for the tensors at ``index``: each None or a tensor of
        the shape and dtype of the one it is the gradient of (torch's rule for hooks)."""
        out = []
        name = self.module._get_name()
        for i, (shape, dtype) in zip(index, meta):
            g = grads[i]
            if g is not None:
                if not isinstance(g, Tensor):
                    raise TypeError(
                        f"backward hook of {name} returned {what}[{i}] of type "
                        f"{_typename(g)}; expected a Tensor or None"
                    )
                if tuple(g.shape) != shape:
                    raise RuntimeError(
                        f"backward hook of {name} has changed the size of value: {what}[{i}] "
                        f"was {list(shape)}, got {list(g.shape)}; return a gradient shaped "
                        "like the tensor it belongs to"
                    )
                if g.dtype is not dtype:
                    raise RuntimeError(
                        f"backward hook of {name} has changed the type of value: {what}[{i}] "
                        f"was {dtype}, got {g.dtype}; return grad.to({dtype}) instead"
                    )
            out.append(g)
        return tuple(out)

    def _apply_on_tensors(self, fn: Callable, args: tuple) -> tuple:
        index, tensors = [], []
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                index.append(i)
                tensors.append(a)
        if not (any(t.requires_grad for t in tensors) and tp.is_grad_enabled()):
            return args, None, []
        new = BackwardHookFunction.apply(*tensors)
        grad_fn = next(t.grad_fn for t in new if t.grad_fn is not None)
        fn(grad_fn)
        items = list(args)
        for i, t in zip(index, new):
            items[i] = t
        # a namedtuple output is rebuilt as one
        out = tuple(items) if type(args) is tuple else type(args)(*items)
        return out, index, [(tuple(t.shape), t.dtype) for t in tensors]

    def setup_input_hook(self, args: tuple) -> tuple:
        def fn(grad_fn: Any) -> None:
            def hook(grad_input: tuple, _grad_output: tuple) -> tuple | None:
                if self.grad_outputs is None:
                    # the inputs got a gradient that did not pass through the outputs
                    return None
                assert self.input_index is not None
                res = self._pack(self.input_index, grad_input, self.n_inputs)
                for user_hook in self.hooks:
                    out = user_hook(self.module, res, self.grad_outputs)
                    if out is None:
                        continue
                    if len(out) != len(res):
                        raise RuntimeError(
                            "Backward hook returned an invalid number of grad_input, "
                            f"got {len(out)}, but expected {len(res)}"
                        )
                    res = out
                self.grad_outputs = None
                return self._check(res, self.input_index, self.input_meta, "grad_input")

            grad_fn.register_hook(hook)

        res, self.input_index, self.input_meta = self._apply_on_tensors(fn, args)
        self.n_inputs = len(args)
        return res

    def setup_output_hook(self, result: Any) -> Any:
        def fn(grad_fn: Any) -> None:
            def hook(_grad_input: tuple, grad_output: tuple) -> tuple | None:
                assert self.output_index is not None
                self.grad_outputs = self._pack(self.output_index, grad_output, self.n_outputs)
                for pre_hook in self.pre_hooks:
                    new = pre_hook(self.module, self.grad_outputs)
                    if new is None:
                        continue
                    if len(new) != len(self.grad_outputs):
                        raise RuntimeError(
                            "Backward pre hook returned an invalid number of grad_output, "
                            f"got {len(new)}, but expected {len(self.grad_outputs)}"
                        )
                    self.grad_outputs = tuple(new)
                local = self.grad_outputs
                if self.input_index is None:
                    # no input requires grad: the input node never runs, so the hooks run here
                    warnings.warn(
                        "Full backward hook is firing when gradients are computed with respect "
                        "to module outputs since no inputs require gradients.",
                        stacklevel=2,
                    )
                    grad_inputs = (None,) * self.n_inputs
                    for user_hook in self.hooks:
                        res = user_hook(self.module, grad_inputs, self.grad_outputs)
                        if res is not None and not (
                            isinstance(res, tuple) and all(r is None for r in res)
                        ):
                            raise RuntimeError(
                                "Backward hook for Modules where no input requires gradient "
                                "should always return None or None for all gradients."
                            )
                    self.grad_outputs = None
                return self._check(local, self.output_index, self.output_meta, "grad_output")

            grad_fn.register_hook(hook)

        is_tuple = isinstance(result, tuple)
        args = result if is_tuple else (result,)
        res, self.output_index, self.output_meta = self._apply_on_tensors(fn, args)
        self.n_outputs = len(args)
        return res if is_tuple else res[0]


def _do_load(action: tuple) -> None:
    module, name, param, value, is_param, assign, key = action
    if name == "_extra_state" and param is None:
        module.set_extra_state(value)
        return
    with tp.no_grad():
        if assign:
            if is_param:
                if isinstance(value, Parameter):
                    value.requires_grad_(param.requires_grad)
                else:
                    value = Parameter(value.detach(), requires_grad=param.requires_grad)
            setattr(module, name, value)
        else:
            try:
                param.copy_(value)
            except Exception as ex:
                raise RuntimeError(
                    f'While copying the parameter named "{key}", whose dimensions in the model '
                    f"are {param.shape} and whose dimensions in the checkpoint are "
                    f"{value.shape}, an exception occurred : {ex.args}."
                ) from ex
