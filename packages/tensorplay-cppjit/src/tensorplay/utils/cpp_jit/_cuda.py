"""Finding the CUDA toolkit and the GPU architecture to compile ``cuda_sources`` for."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path


def cuda_home() -> Path:
    """The CUDA toolkit: ``CUDA_HOME``/``CUDA_PATH``, else where ``nvcc`` on PATH lives.

    ``nvcc`` on PATH may be a wrapper script (``/usr/local/bin/nvcc`` here), so a
    candidate counts only if it has both ``bin/nvcc`` and ``include/cuda_runtime.h``.
    """
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
        candidates.extend(_exec_target(Path(nvcc)))
    candidates.append("/usr/local/cuda")
    for c in candidates:
        if (
            c
            and (Path(c) / "bin" / "nvcc").is_file()
            and (Path(c) / "include/cuda_runtime.h").is_file()
        ):
            return Path(c)
    raise RuntimeError(
        "cpp_jit: cuda_sources need the CUDA toolkit (nvcc), which was not found: "
        "set CUDA_HOME to the toolkit folder (the one holding bin/nvcc)"
    )


def _exec_target(script: Path) -> list[str]:
    # a one-line wrapper script such as `exec /usr/local/cuda-13.0/bin/nvcc "$@"`
    try:
        text = script.read_text(errors="replace")[:4096]
    except OSError:
        return []
    return [str(Path(m).parent.parent) for m in re.findall(r"(/\S+/bin/nvcc)\b", text)]


def _normalize(arch: str) -> str:
    """``"9.0"``, ``"90"``, ``"sm_90"``, ``"9.0a"`` -> ``"9.0"`` / ``"9.0a"`` (tvm-ffi's form)."""
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+)\.?(\d)([af]?)", arch.strip())
    if not m:
        raise ValueError(
            f"TENSORPLAY_CUDA_ARCH={arch!r} is not a GPU architecture; "
            "use a compute capability such as 9.0 (H100/H200) or 8.0 (A100)"
        )
    major, minor, suffix = m.groups()
    return f"{int(major)}.{minor}{suffix}"


def cuda_arch_list() -> str:
    """Space-separated compute capabilities to build for.

    ``TENSORPLAY_CUDA_ARCH`` (e.g. ``"9.0"`` or ``"8.0 9.0"``) wins; otherwise the
    visible GPUs are asked through ``nvidia-smi``; with neither, a clear error.
    """
    env = os.environ.get("TENSORPLAY_CUDA_ARCH")
    if env:
        return " ".join(_normalize(a) for a in env.replace(",", " ").split())
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        caps = sorted({_normalize(line) for line in out.split() if line.strip()})
        if caps:
            return " ".join(caps)
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    raise RuntimeError(
        "cpp_jit: cuda_sources need a GPU architecture and no GPU was detected; "
        "set TENSORPLAY_CUDA_ARCH, e.g. TENSORPLAY_CUDA_ARCH=9.0 for an H200"
    )
