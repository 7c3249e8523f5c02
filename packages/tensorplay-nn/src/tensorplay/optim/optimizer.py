"""``Optimizer``: the base class of every optimiser (torch's ``torch.optim.Optimizer``).

An optimiser holds ``param_groups`` (a list of dicts: ``"params"``, a list of tensors, and the
group's hyperparameters, filled from ``defaults``) and ``state`` (a dict from parameter to its
per-parameter state, e.g. ``{"step": tensor(3.), "exp_avg": ...}``). Subclasses implement
``step``; updates run under ``tp.no_grad()`` and write the parameters in place, so modules
holding the parameters see the new values.

``state_dict()`` / ``load_state_dict()`` use torch's format: parameters are referenced by their
index over all groups (in group order), hyperparameters are plain values.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable
from copy import deepcopy
from itertools import chain
from typing import Any

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.nn.utils._grads import zero_grads

__all__ = ["Optimizer", "required"]


class _RequiredParameter:
    """Marks a hyperparameter without a default (every group must give it)."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()


def _typename(obj: Any) -> str:
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _check_nonneg(name: str, value: Any, label: str | None = None) -> None:
    """Raise torch's ``ValueError("Invalid <label>: <value>")`` unless ``0 <= value``.

    NaN fails the check too (``not 0.0 <= nan``)."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(f"Tensor {name} must be 1-element")
        v = value.item()
    else:
        v = value
    if not 0.0 <= v:
        raise ValueError(f"Invalid {label or name + ' value'}: {value}")


def _to_scalar(x: Any) -> Any:
    """A 1-element tensor hyperparameter (e.g. a tensor lr) as a Python number."""
    if isinstance(x, Tensor):
        return x.item()
    return x


def _clone_tree(value: Any) -> Any:
    """Deep copy of a state value: tensors cloned (detached), containers rebuilt."""
    if isinstance(value, Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _clone_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_clone_tree(v) for v in value)
    return value


def _cast_state(param: Tensor, value: Any, key: Any = None) -> Any:
    """A copy of a loaded state value for ``param``: tensors are cloned onto ``param``'s device;
    floating tensors (other than ``"step"``) take ``param``'s dtype, like torch. A step count
    stays on the host (reading it each step from a GPU would synchronise); an optimizer
    that wants it on the device (``capturable``) moves it at its next step."""
    if isinstance(value, Tensor):
        v = value.detach()
        if key == "step":
            return v.to("cpu").clone()
        if param.is_floating_point() and v.is_floating_point():
            v = v.to(dtype=param.dtype)
        if str(v.device) != str(param.device):
            v = v.to(param.device)
        return v.clone()
    if isinstance(value, dict):
        return {k: _cast_state(param, v, key=k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_state(param, v) for v in value)
    return value


class Optimizer:
    """Base class of all optimisers.

    Args:
        params: an iterable of tensors, or of dicts (parameter groups) each with a
            ``"params"`` entry and optional per-group hyperparameters.
        defaults: the hyperparameters' default values, used for groups that do not set them.
    """

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], defaults: dict) -> None:
        self.defaults = defaults
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or "
                "dicts, but got " + _typename(params)
            )
        self.state: defaultdict[Tensor, dict[str, Any]] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []

        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for param_group in param_groups:
            self.add_param_group(param_group)

    # ---- pickling -----------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        format_string = self.__class__.__name__ + " ("
        for i, group in enumerate(self.param_groups):
            format_string += "\n"
            format_string += f"Parameter Group {i}\n"
            for key in sorted(group.keys()):
                if key != "params":
                    format_string += f"    {key}: {group[key]}\n"
        format_string += ")"
        return format_string

    # ---- groups -------------------------------------------------------------------------------

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a parameter group (a dict with ``"params"`` and optional hyperparameters).

        Useful when fine-tuning: frozen layers can be made trainable and added later.
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {_typename(param_group)}")
        if "params" not in param_group:
            raise ValueError("param_group must have a 'params' entry")
        params = param_group["params"]
        if isinstance(params, Tensor):
            param_group["params"] = [params]
        elif isinstance(params, (set, frozenset)):
            raise TypeError(
                "optimizer parameters need to be organized in ordered collections, but "
                "the ordering of tensors in sets will change between runs. Please use a list "
                "instead."
            )
        else:
            param_group["params"] = list(params)

        tensors: list[Any] = []
        names: list[str] = []
        for param in param_group["params"]:
            if isinstance(param, tuple):  # named_parameters(): (name, tensor)
                names.append(param[0])
                tensors.append(param[1])
            else:
                tensors.append(param)
        param_group["params"] = tensors
        if names:
            if len(names) != len(tensors):
                raise ValueError(
                    "all optimizer params should be with/without names. Some param names are "
                    "missing"
                )
            param_group["param_names"] = names

        for param in param_group["params"]:
            if not isinstance(param, Tensor):
                raise TypeError(
                    "optimizer can only optimize Tensors, but one of the params is "
                    + _typename(param)
                )
            if not (param.is_leaf or param.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")

        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(
                    "parameter group didn't specify a value of required optimization "
                    f"parameter {name}"
                )
            param_group.setdefault(name, default)

        ids = [id(p) for p in param_group["params"]]
        if len(ids) != len(set(ids)):
            warnings.warn(
                "optimizer contains a parameter group with duplicate parameters; "
                "in future, this will cause an error; "
                "see github.com/pytorch/pytorch/issues/40967 for more information",
                stacklevel=3,
            )

        seen: set[int] = set()
        for group in self.param_groups:
            seen.update(id(p) for p in group["params"])
            if ("param_names" in param_group) != ("param_names" in group):
                which = "with names" if "param_names" in param_group else "without names"
                raise ValueError(
                    "all optimizer param groups should be with/without names. "
                    f"cannot add param group {which} to the optimizer"
                )
        if not seen.isdisjoint(ids):
            raise ValueError("some parameters appear in more than one parameter group")

        self.param_groups.append(param_group)

    # ---- gradients and steps ------------------------------------------------------------------

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all optimised tensors: to ``None`` (default) or to zeros."""
        zero_grads((p for group in self.param_groups for p in group["params"]), set_to_none)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Perform one optimisation step; ``closure`` re-evaluates the model and returns the
        loss (it runs with grad enabled), which ``step`` returns."""
        raise NotImplementedError

    def _eval_closure(self, closure: Callable[[], Any] | None) -> Any:
        if closure is None:
            return None
        with tp.enable_grad():
            return closure()

    # ---- state dict ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The optimiser's state as ``{"state": {index: {...}}, "param_groups": [...]}``.

        Parameters are replaced by their index over all groups; the per-parameter state holds
        the optimiser's own tensors (not copies, like torch: ``copy.deepcopy`` the result to
        snapshot it); ``load_state_dict`` copies them.
        """
        param_mappings: dict[int, int] = {}
        start_index = 0

        def pack_group(group: dict[str, Any]) -> dict[str, Any]:
            nonlocal start_index
            packed = {k: v for k, v in group.items() if k != "params"}
            for i, p in enumerate(group["params"], start_index):
                param_mappings.setdefault(id(p), i)
            packed["params"] = [param_mappings[id(p)] for p in group["params"]]
            start_index += len(packed["params"])
            return packed

        param_groups = [pack_group(g) for g in self.param_groups]
        packed_state = {
            (param_mappings[id(k)] if isinstance(k, Tensor) else k): v
            for k, v in self.state.items()
        }
        return {"state": packed_state, "param_groups": param_groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state from :meth:`state_dict` (of an optimiser of the same kind over the same
        parameter layout). State tensors are copied onto each parameter's device (and dtype,
        for floating state other than ``step``)."""
        if not isinstance(state_dict, dict) or "param_groups" not in state_dict:
            raise ValueError(
                "load_state_dict: expected a dict with 'state' and 'param_groups' entries, as "
                "returned by Optimizer.state_dict()"
            )
        groups = self.param_groups
        saved_groups = deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError(
                "loaded state dict has a different number of parameter groups "
                f"({len(saved_groups)}) than the optimizer ({len(groups)})"
            )
        for i, (g, sg) in enumerate(zip(groups, saved_groups)):
            if len(g["params"]) != len(sg["params"]):
                raise ValueError(
                    "loaded state dict contains a parameter group that doesn't match the size "
                    f"of optimizer's group (group {i}: {len(sg['params'])} saved parameters, "
                    f"{len(g['params'])} in the optimizer)"
                )

        id_map = dict(
            zip(
                chain.from_iterable(g["params"] for g in saved_groups),
                chain.from_iterable(g["params"] for g in groups),
            )
        )
        state: defaultdict[Any, dict[str, Any]] = defaultdict(dict)
        for k, v in state_dict.get("state", {}).items():
            if k in id_map:
                param = id_map[k]
                state[param] = _cast_state(param, v)
            else:
                state[k] = _clone_tree(v)

        def update_group(group: dict[str, Any], new_group: dict[str, Any]) -> dict[str, Any]:
            new_group["params"] = group["params"]
            if "param_names" in group and "param_names" not in new_group:
                new_group["param_names"] = group["param_names"]
            return new_group

        param_groups = [update_group(g, ng) for g, ng in zip(groups, saved_groups)]
        self.__setstate__({"state": state, "param_groups": param_groups})


def _params_with_grad(group: dict[str, Any], name: str, real_only: bool = False) -> list[Tensor]:
    """The group's parameters that have a gradient (others are skipped by every step)."""
    out = [p for p in group["params"] if p.grad is not None]
    if real_only:
        for p in out:
            if p.is_complex():
                raise NotImplementedError(
                    f"{name}: complex parameters are not supported yet (got one of dtype "
                    f"{p.dtype}); optimise the real and imaginary parts as separate real tensors"
                )
    return out


def _advance(step_t: Tensor) -> float:
    """``step += 1`` on the step counter (a CPU float32 scalar); its new value as a float."""
    a = step_t._data
    if type(step_t) is Tensor and step_t.device.type == "cpu" and a is not None:
        a += 1  # what add_(1) does, without a dispatch per parameter
        step_t._storage._version += 1
        return float(a)
    step_t.add_(1)
    return step_t.item()


def _split_by(keys: list, columns: list[list]) -> list[tuple[Any, list[list]]]:
    """``(key, columns)`` for each distinct per-parameter key, the columns restricted to
    that key's parameters (the columns themselves when every key is the same, the usual
    case): multi-tensor updates run once per step count or rate."""
    groups: dict[Any, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    if len(groups) == 1:
        return [(keys[0], columns)]
    return [(k, [[c[i] for i in idx] for c in columns]) for k, idx in groups.items()]
