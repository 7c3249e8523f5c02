"""``build_wheel``: an op library as an installable wheel, without hatch.

The wheel holds the built package (``_tensorplay_oplib_<namespace>/``), requires the
``tensorplay-oplib`` it was built with (``==``, as our distributions pin each other) and
declares the entry point ``<namespace> = _tensorplay_oplib_<namespace>:register`` in the group
``tensorplay.oplibs``. It is tagged ``py3-none-<platform>``: the kernels are native code
for this platform but use no Python C API (only tvm-ffi's C ABI).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import sysconfig
import tempfile
import zipfile
from pathlib import Path

import tensorplay as tp
from tensorplay._extension import OPLIB_ENTRY_POINT_GROUP
from tensorplay.oplib._build import build, package_name

__all__ = ["build_wheel", "platform_tag", "entry_point", "requirement"]

_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VERSION = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")


def platform_tag() -> str:
    """This platform as a wheel tag: ``linux_x86_64``, ``macosx_11_0_arm64``."""
    return re.sub(r"[-.]", "_", sysconfig.get_platform())


def entry_point(namespace: str) -> str:
    """The entry point's value for a library of ``namespace``."""
    return f"{package_name(namespace)}:register"


def requirement() -> str:
    """What an op library's wheel requires: the tensorplay-oplib it was built with."""
    return f"tensorplay-oplib=={tp.__version__}"


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def build_wheel(
    schema: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    name: str | None = None,
    version: str = "0.1.0",
    check: bool = False,
    cuda: str = "auto",
) -> Path:
    """Build the library defined by ``schema`` and write its wheel into ``output``.

    ``name`` is the distribution name (default: the namespace, ``_`` -> ``-``). Returns the wheel's
    path. Raises as ``build`` does, and ``ValueError`` for a malformed name or version.
    """
    with tempfile.TemporaryDirectory(prefix="tensorplay-oplib-") as tmp:
        package = build(schema, tmp, check=check, cuda=cuda)
        namespace = package.name.removeprefix(package_name(""))
        name = name or namespace.replace("_", "-")
        if not _NAME.match(name):
            raise ValueError(f"build_wheel: {name!r} is not a distribution name")
        if not _VERSION.match(version):
            raise ValueError(f"build_wheel: {version!r} is not a version such as 1.2.3")
        project = re.sub(r"[-_.]+", "_", name).lower()
        tag = f"py3-none-{platform_tag()}"
        dist_info = f"{project}-{version}.dist-info"
        files: list[tuple[str, bytes]] = [
            (f"{package.name}/{p.name}", p.read_bytes()) for p in sorted(package.iterdir())
        ]
        meta = (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            f"Summary: TensorPlay op library {namespace} (tp.ops.{namespace})\n"
            f"Requires-Dist: {requirement()}\n"
        )
        wheel = (
            f"Wheel-Version: 1.0\nGenerator: tensorplay-oplib\nRoot-Is-Purelib: false\nTag: {tag}\n"
        )
        entry = f"[{OPLIB_ENTRY_POINT_GROUP}]\n{namespace} = {entry_point(namespace)}\n"
        files += [
            (f"{dist_info}/METADATA", meta.encode()),
            (f"{dist_info}/WHEEL", wheel.encode()),
            (f"{dist_info}/entry_points.txt", entry.encode()),
        ]
        record = io.StringIO()
        writer = csv.writer(record, lineterminator="\n")
        for arcname, data in files:
            writer.writerow([arcname, _record_hash(data), len(data)])
        writer.writerow([f"{dist_info}/RECORD", "", ""])
        files.append((f"{dist_info}/RECORD", record.getvalue().encode()))
        out = Path(output)
        out.mkdir(parents=True, exist_ok=True)
        target = out / f"{project}-{version}-{tag}.whl"
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
            for arcname, data in files:
                info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
                info.external_attr = (0o755 if arcname.endswith(".so") else 0o644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, data)
        return target
