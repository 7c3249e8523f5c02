"""The definition of an op library, checked: ``LibrarySpec`` holds ``OpSpec``s.

Read from the YAML file (``from_yaml``) at build time, written into the built library as
JSON (``to_json``) and read back from it (``from_json``) when the library is loaded. The
build runs every check; loading trusts the JSON the builder wrote (its format, TensorPlay
version, tvm-ffi ABI and platform are checked first, ``_loader.check_built_for_this``) and
reads only what registering needs, so a library loads without paying for its checks again.
Derivative formulas are still checked against the whitelist before they are compiled,
whoever wrote the JSON (on first use). The YAML keys (unknown ones are errors, with the line)::

    namespace: mylib                 # tp.ops.mylib
    sources:   {cpp: [kernels.cc], cuda: [kernels.cu]}   # relative to the YAML file
    cflags:    [-O3]                 # optional, C++ compiler flags (cuda_cflags for nvcc)
    ops:
      - schema: fused_bias_gelu(Tensor x, Tensor b, *, float alpha=1.0) -> Tensor
        kernels: {cpu: fused_bias_gelu_cpu, cuda: fused_bias_gelu_cuda}
        fake: {broadcast: [x, b]}
        derivatives:                 # one formula per differentiable input
          x: fused_bias_gelu_backward(grad, x, b, alpha)
        tags: [pointwise]
        check: {x: [3, 4], b: [4]}   # sample arguments for `build --check` (optional)
        doc: "..."                   # optional docstring
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tensorplay.oplib import _schema
from tensorplay.oplib._errors import OplibError, Where
from tensorplay.oplib._formula import BUILTINS, Expression
from tensorplay.oplib._rules import OutputRule, parse_rules

__all__ = ["LibrarySpec", "OpSpec", "DEVICES", "TAGS", "FORMAT"]

FORMAT = 1  # of the JSON a built library carries; a loader refuses other formats
DEVICES = ("cpu", "cuda")
TAGS = frozenset(
    {"pointwise", "reduction", "inplace", "nondeterministic_seeded", "pt2_compliant_tag"}
)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_LIBRARY_KEYS = ("namespace", "sources", "cflags", "cuda_cflags", "ops")
_OP_KEYS = ("schema", "kernels", "fake", "derivatives", "tags", "check", "doc")
# names a derivative formula gets besides the operator's arguments
_GRAD_NAMES = ("grad", "grads", "result", "results")


def _lines(node: Any) -> dict[str, int]:
    return dict(getattr(node, "lines", {}) or {})


def _unknown(node: Mapping, allowed: tuple[str, ...], where: Where, what: str) -> None:
    lines = _lines(node)
    for key in node:
        if key not in allowed:
            raise OplibError(
                where.at(lines.get(key)),
                f"unknown key {key!r} in {what}; the keys are {list(allowed)}",
            )


class OpSpec:
    """One operator: schema, kernels per device, shape rules, derivatives, tags.

    With ``built``, ``raw`` is an entry of a built library's ``oplib.json``, written by the
    builder from a definition that passed every check here: only what registering needs is
    read (the schema's structure, the shape rules), and the derivative formulas are parsed
    and checked when first used.
    """

    def __init__(
        self,
        raw: Mapping[str, Any],
        lines: Mapping[str, Any],
        namespace: str,
        file: str,
        line: int | None,
        op_names: frozenset[str],
        *,
        built: bool = False,
    ):
        where = Where(file, line)
        if not built:
            if not isinstance(raw, Mapping):
                raise OplibError(
                    where, f"an entry of 'ops' must be a mapping with a schema, got {raw!r}"
                )
            if "schema" not in raw:
                _unknown(raw, _OP_KEYS, where, "an operator")
                raise OplibError(where, "the operator has no 'schema'")
        at = {k: where.at(lines.get(k)) for k in _OP_KEYS}
        self.schema = _schema.parse(raw["schema"], namespace, at["schema"], check=not built)
        self.name = self.schema.name
        self.qualname = f"{namespace}::{self.name}"
        self.line = line
        at = {k: w.at(None, self.qualname) for k, w in at.items()}
        self.where = where.at(None, self.qualname)
        if not built:
            _unknown(raw, _OP_KEYS, self.where, "an operator")
        self.kernels = (
            dict(raw["kernels"]) if built else self._kernels(raw.get("kernels"), at["kernels"])
        )
        self.fake_json = raw.get("fake")
        self.fake: list[OutputRule] = parse_rules(raw.get("fake"), self.schema, at["fake"])
        self.tags = (
            list(raw.get("tags", [])) if built else self._tags(raw.get("tags", []), at["tags"])
        )
        self.doc = raw.get("doc")
        if not built and self.doc is not None and not isinstance(self.doc, str):
            raise OplibError(at["doc"], "doc must be a string")
        self._formulas = (
            raw.get("derivatives"),
            at["derivatives"],
            lines.get("derivative_lines"),
            op_names,
        )
        # checked now when building (a bad formula is reported before anything compiles)
        self._derivatives: dict[str, Expression] | None = (
            None if built else self._read_derivatives()
        )
        self.check = (
            dict(raw.get("check") or {}) if built else self._check(raw.get("check"), at["check"])
        )
        self._lines = {k: v for k, v in lines.items() if k in _OP_KEYS}

    @property
    def derivatives(self) -> dict[str, Expression]:
        """Input name -> its formula, checked (on first use, for a built library)."""
        if self._derivatives is None:
            self._derivatives = self._read_derivatives()
        return self._derivatives

    @property
    def has_derivatives(self) -> bool:
        """Whether the definition gives formulas (without parsing them)."""
        return bool(self._formulas[0])

    # ---- the parts ----
    def _kernels(self, value: Any, where: Where) -> dict[str, str]:
        if not isinstance(value, Mapping) or not value:
            raise OplibError(
                where,
                "'kernels' must map devices to exported kernel functions, e.g. "
                f"kernels: {{cpu: {self.name}_cpu}}",
            )
        lines = _lines(value)
        out = {}
        for device, fn in value.items():
            w = where.at(lines.get(device))
            if device not in DEVICES:
                raise OplibError(
                    w, f"kernels: unknown device {device!r}; devices are {list(DEVICES)}"
                )
            if not isinstance(fn, str) or not _IDENT.match(fn):
                raise OplibError(
                    w, f"kernels: {device}: {fn!r} is not a C++ function name (a C identifier)"
                )
            out[device] = fn
        return out

    def _tags(self, value: Any, where: Where) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise OplibError(where, f"tags must be a list of names, got {value!r}")
        for t in value:
            if t not in TAGS:
                raise OplibError(where, f"unknown tag {t!r}; the tags are {sorted(TAGS)}")
        return list(value)

    def _read_derivatives(self) -> dict[str, Expression]:
        value, where, json_lines, op_names = self._formulas
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise OplibError(
                where, "'derivatives' must map input names to formulas, e.g. x: grad * 2"
            )
        if not self.schema.returns:
            raise OplibError(
                where,
                "the operator returns nothing (an in-place operator), so it has no derivatives; "
                "mutated arguments cannot require grad",
            )
        lines = _lines(value) or dict(json_lines or {})
        args = {a.name: a for a in self.schema.args}
        arg_names = list(args)
        clash = sorted(set(arg_names) & (set(_GRAD_NAMES) | BUILTINS | {"tp"} | op_names))
        if clash:
            raise OplibError(
                where,
                f"argument(s) {clash} share a name with what derivative formulas use (grad, "
                "grads, result, results, tp, builtins, the library's operators); rename them",
            )
        variables = [*arg_names, *_GRAD_NAMES]
        out = {}
        for name, formula in value.items():
            w = where.at(lines.get(name))
            arg = args.get(name)
            if arg is None:
                raise OplibError(
                    w, f"derivatives: {name!r} is not an argument (arguments: {arg_names})"
                )
            if arg.type not in ("Tensor", "Tensor?") or arg.is_write:
                why = "is mutated in place" if arg.is_write else f"is a {arg.type}"
                raise OplibError(
                    w, f"derivatives: {name!r} {why}, so it has no gradient; only tensor inputs do"
                )
            out[name] = Expression(formula, w, f"the derivative for {name!r}", variables, op_names)
        return out

    def _check(self, value: Any, where: Where) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise OplibError(where, "'check' must map argument names to sample values")
        args = {a.name: a for a in self.schema.args}
        for name, sample in value.items():
            if name not in args:
                raise OplibError(where, f"check: {name!r} is not an argument ({list(args)})")
            if args[name].is_tensor and not (
                isinstance(sample, list) and all(type(s) is int and s >= 0 for s in sample)
            ):
                raise OplibError(
                    where, f"check: {name!r} is a tensor; give its shape, e.g. {name}: [3, 4]"
                )
        return dict(value)

    # ---- JSON ----
    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "schema": f"{self.name}{self.schema.text}",
            "kernels": self.kernels,
            "line": self.line,
            "lines": {
                **self._lines,
                "derivative_lines": {n: e.where.line for n, e in self.derivatives.items()},
            },
        }
        if self.fake_json is not None:
            entry["fake"] = _plain(self.fake_json)
        if self.derivatives:
            entry["derivatives"] = {n: e.text for n, e in self.derivatives.items()}
        for key in ("tags", "check", "doc"):
            value = getattr(self, key)
            if value:
                entry[key] = _plain(value)
        return entry


def _plain(value: Any) -> Any:
    """``Node``/``Items`` as plain JSON values."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class LibrarySpec:
    """A whole library: namespace, sources, flags, operators (checked)."""

    def __init__(self, raw: Any, file: str, *, op_lines: list[Any] | None = None):
        where = Where(file, getattr(raw, "line", None))
        if not isinstance(raw, Mapping):
            raise OplibError(where, "the schema file must be a mapping with 'namespace' and 'ops'")
        _unknown(raw, _LIBRARY_KEYS, where, "the library")
        lines = _lines(raw)
        self.file = file
        ns = raw.get("namespace")
        if not isinstance(ns, str) or not _IDENT.match(ns) or ns.startswith("__"):
            raise OplibError(
                where.at(lines.get("namespace", 1)),
                f"'namespace' must be a Python identifier (tp.ops.<namespace>), got {ns!r}",
            )
        self.namespace = ns
        self.sources = self._sources(raw.get("sources"), where.at(lines.get("sources")))
        self.cflags = self._flags(raw.get("cflags"), where.at(lines.get("cflags")), "cflags")
        self.cuda_cflags = self._flags(
            raw.get("cuda_cflags"), where.at(lines.get("cuda_cflags")), "cuda_cflags"
        )
        ops = raw.get("ops")
        w = where.at(lines.get("ops"))
        if not isinstance(ops, list) or not ops:
            raise OplibError(w, "'ops' must be a non-empty list of operators")
        item_lines = getattr(ops, "lines", None) or [None] * len(ops)
        names = frozenset(_op_name(op) for op in ops)
        self.ops: list[OpSpec] = []
        seen: dict[str, int | None] = {}
        for i, op in enumerate(ops):
            line = item_lines[i] if op_lines is None else op_lines[i]
            op_line_table = _lines(op) if op_lines is None else op.get("lines", {})
            body = op if op_lines is None else {k: v for k, v in op.items() if k in _OP_KEYS}
            spec = OpSpec(body, op_line_table, ns, file, line, names, built=op_lines is not None)
            if spec.name in seen:
                raise OplibError(
                    spec.where.at(line),
                    f"the operator is defined twice (first on line {seen[spec.name]})",
                )
            seen[spec.name] = line
            self.ops.append(spec)

    @staticmethod
    def _sources(value: Any, where: Where) -> dict[str, list[str]]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise OplibError(where, "'sources' must map cpp/cuda to lists of files")
        _unknown(value, ("cpp", "cuda"), where, "sources")
        out = {}
        for kind, files in value.items():
            files = [files] if isinstance(files, str) else files
            if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
                raise OplibError(where, f"sources: {kind} must be a list of file names")
            out[kind] = list(files)
        return out

    @staticmethod
    def _flags(value: Any, where: Where, key: str) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
            raise OplibError(where, f"{key} must be a list of strings, one flag each")
        return list(value)

    @classmethod
    def from_yaml(cls, path: Any) -> LibrarySpec:
        # PyYAML is needed to build a library, not to load one: loading stays cheaper without
        from tensorplay.oplib import _yaml  # noqa: PLC0415

        path = Path(path)
        return cls(_yaml.read(path), str(path))

    @classmethod
    def from_json(cls, data: Mapping[str, Any], file: str) -> LibrarySpec:
        """The definition in a built library's ``oplib.json`` (see ``OpSpec``'s ``built``);
        ``OplibError`` if the file is not the builder's (damaged, or written by hand)."""
        try:
            ops = data["ops"]
            raw = {"namespace": data["namespace"], "ops": [dict(op) for op in ops]}
            return cls(raw, file, op_lines=[op.get("line") for op in ops])
        except (KeyError, TypeError, AttributeError) as exc:
            raise OplibError(
                file,
                f"the built library's {file} is damaged ({type(exc).__name__}: {exc}); "
                "rebuild and reinstall the library",
            ) from None

    def op(self, name: str) -> OpSpec:
        return next(o for o in self.ops if o.name == name)


def _op_name(op: Any) -> str:
    """The name in an entry's schema, for the names formulas may call (checked later)."""
    text = op.get("schema") if isinstance(op, Mapping) else None
    if not isinstance(text, str):
        return ""
    head = text.split("(", 1)[0].strip()
    return head.rsplit("::", 1)[-1].strip()
