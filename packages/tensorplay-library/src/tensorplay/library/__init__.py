"""User-defined operators for TensorPlay (distribution ``tensorplay-library``).

Will hold ``custom_op``, ``triton_op``, ``tile_lang_op``, the ``register_*`` decorators
(kernel, fake, autograd, vmap), ``Library``, ``opcheck`` and ``infer_schema``: one operator
contract through eager execution, autograd, graph capture and backend execution.
"""

from __future__ import annotations

__all__: list[str] = []
