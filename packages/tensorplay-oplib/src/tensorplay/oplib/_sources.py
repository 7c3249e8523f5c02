"""What the kernel sources export, checked against the operators that name them.

Before compiling, the sources are scanned for ``TVM_FFI_DLL_EXPORT_TYPED_FUNC(name, fn)``:
every kernel an operator names must be exported by a source of its device (C++ for
``cpu``, CUDA for ``cuda``). After compiling, the library is asked for each kernel's
signature (tvm-ffi's type schema, exported because the build defines
``TVM_FFI_DLL_EXPORT_INCLUDE_METADATA``) and it must be the calling convention's: one
parameter per schema argument, of the matching type, then one tensor per output, returning
nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tensorplay.oplib._errors import OplibError
from tensorplay.oplib._schema import KERNEL_TYPES, OUTPUT_TYPES
from tensorplay.oplib._spec import OpSpec

__all__ = ["exports", "check_exports", "check_signature", "type_text"]

_EXPORT = re.compile(r"\bTVM_FFI_DLL_EXPORT_TYPED_FUNC\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def exports(files: Sequence[Path]) -> dict[str, str]:
    """Exported function name -> ``file:line`` of its export macro, over ``files``."""
    found: dict[str, str] = {}
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        # blank out comments, keeping newlines so line numbers stay right
        code = _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)
        for m in _EXPORT.finditer(code):
            found.setdefault(m.group(1), f"{path}:{code.count(chr(10), 0, m.start()) + 1}")
    return found


def check_exports(op: OpSpec, sources: Mapping[str, Sequence[Path]]) -> None:
    """Every kernel ``op`` names is exported by a source of its device."""
    for device, fn in op.kernels.items():
        files = sources.get(device, [])
        kind = "CUDA" if device == "cuda" else "C++"
        if not files:
            raise OplibError(
                op.where.at(op._lines.get("kernels")),
                f"names the {device} kernel {fn!r}, but the library has no {kind} sources; add "
                f"them under sources: {{{'cuda' if device == 'cuda' else 'cpp'}: [...]}}",
            )
        if fn not in exports(files):
            names = ", ".join(str(f) for f in files)
            raise OplibError(
                op.where.at(op._lines.get("kernels")),
                f"the {device} kernel {fn!r} is not exported by the {kind} sources ({names}); "
                f"export it with TVM_FFI_DLL_EXPORT_TYPED_FUNC({fn}, {fn});",
            )


def type_text(schema: Mapping[str, Any]) -> str:
    """tvm-ffi's type schema as text: ``Optional[DLTensor*]``, ``ffi.Array[int]``."""
    args = schema.get("args") or []
    inner = ", ".join(type_text(a) for a in args)
    return f"{schema['type']}[{inner}]" if args else str(schema["type"])


def expected_signature(op: OpSpec) -> str:
    """The C++ signature the calling convention asks of ``op``'s kernels (for errors)."""
    params = [f"{KERNEL_TYPES[a.kernel_type][1]} {a.name}" for a in op.schema.args]
    outs = len(op.schema.returns)
    params += [f"tvm::ffi::TensorView out{i if outs > 1 else ''}" for i in range(outs)]
    return f"void {{kernel}}({', '.join(params)})"


def check_signature(op: OpSpec, device: str, metadata: Mapping[str, Any], where: str) -> None:
    """The kernel's type schema (``metadata`` from tvm-ffi) fits ``op``'s schema."""
    fn = op.kernels[device]
    wanted = expected_signature(op).format(kernel=fn)
    schema = json.loads(metadata["type_schema"])
    named = schema.get("named_args") or {}
    params = [type_text(p) for p in named.get("params", [])]
    ret = [type_text(r) for r in named.get("return", [])]
    expected = [KERNEL_TYPES[a.kernel_type][0] for a in op.schema.args]
    expected += [OUTPUT_TYPES] * len(op.schema.returns)
    names = [a.name for a in op.schema.args] + [
        f"output {i}" for i in range(len(op.schema.returns))
    ]

    def fail(problem: str) -> None:
        raise OplibError(
            op.where.at(op._lines.get("kernels")),
            f"the {device} kernel {fn!r} ({where}) does not fit the schema: {problem}. "
            f"The calling convention asks for: {wanted}",
        )

    if len(params) != len(expected):
        fail(
            f"it takes {len(params)} parameter(s), the schema needs {len(expected)} "
            f"({', '.join(names)})"
        )
    for i, (got, allowed) in enumerate(zip(params, expected)):
        if got not in allowed:
            fail(f"parameter {i} ({names[i]}) is {got}, expected {' or '.join(allowed)}")
    if ret not in ([], ["None"]):
        fail(f"it returns {ret[0]}; kernels write their outputs and return void")
