"""Device kernels as TensorPlay operators (distribution ``tensorplay-kernels``).

Will hold Triton (``[triton]``), TileLang (``[tilelang]``) and CUDA kernels registered
through ``tensorplay.library``, and the glue that launches them on TensorPlay tensors.
"""

from __future__ import annotations

__all__: list[str] = []
