"""``GraphModule``: a ``Graph`` plus the attributes it reads, callable as Python code."""

from __future__ import annotations

import linecache
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tensorplay.graph._graph import Graph, PythonCode

__all__ = ["GraphModule"]

_counter = [0]
# instance attributes an attribute of the graph must not shadow
_OWN = frozenset({"graph", "code", "_forward"})


class GraphModule:
    """A callable program generated from ``graph``.

    ``root`` gives the objects the graph reads by name (``get_attr`` tensors,
    ``call_module`` submodules): a dict from target to object (every entry is kept), or
    any object (a ``tensorplay.nn.Module``, ...) from which each target the graph names is
    read, dotted paths (``"layer.weight"``) included. Submodules are duck-typed: anything
    callable works, so tensorplay-compile needs no dependency on tensorplay-nn.

    ``code`` is the generated ``forward`` source; after editing ``graph`` call
    ``recompile()`` to regenerate it.
    """

    def __init__(self, graph: Graph, root: Any = None) -> None:
        self.graph = graph
        graph.owning_module = self
        if isinstance(root, dict):
            for target, value in root.items():
                self._install(target, value)
        elif root is not None:
            for target in _targets(graph):
                try:
                    value = _walk(root, target)
                except AttributeError:
                    raise AttributeError(
                        f"GraphModule: the graph reads {target!r}, which "
                        f"{type(root).__name__} root does not have"
                    ) from None
                self._install(target, value)
        self.code = ""
        self.recompile()

    def _install(self, target: str, value: Any) -> None:
        if not isinstance(target, str) or hasattr(GraphModule, target) or target in _OWN:
            raise ValueError(
                f"GraphModule: attribute name {target!r} would replace the module's own "
                f"attribute; rename the get_attr/call_module target (names in use: "
                f"{sorted(_OWN)} and GraphModule's methods)"
            )
        setattr(self, target, value)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not set on the module: a dotted target ("seq.0.weight")
        # is read through the longest prefix that is set, so getattr(gm, target) serves
        # the generated code, the interpreter and backends alike.
        if "." in name:
            parts = name.split(".")
            for cut in range(len(parts) - 1, 0, -1):
                head = ".".join(parts[:cut])
                if head in self.__dict__:
                    return _walk(self.__dict__[head], ".".join(parts[cut:]))
        raise AttributeError(f"GraphModule has no attribute {name!r}")

    @property
    def constants(self) -> dict[str, Any]:
        """The objects the graph reads by name: each ``get_attr``/``call_module`` target."""
        return {target: getattr(self, target) for target in _targets(self.graph)}

    # ---- submodules (torch.fx.GraphModule's names) ----------------------------------------

    def add_submodule(self, target: str, module: Any) -> bool:
        """Hold ``module`` (any callable) under ``target`` for ``call_module`` nodes.

        Returns True, as torch.fx does. Raises ``TypeError`` for a non-callable.
        """
        if not callable(module):
            raise TypeError(
                f"add_submodule({target!r}, module): module must be callable (a "
                f"tensorplay.nn.Module or any function-like object), got {type(module).__name__}"
            )
        self._install(target, module)
        return True

    def get_submodule(self, target: str) -> Any:
        """The submodule ``target`` (dotted paths walk into submodules)."""
        try:
            return getattr(self, target)
        except AttributeError:
            raise AttributeError(
                f"GraphModule has no submodule {target!r}; add one with "
                f"gm.add_submodule({target!r}, module)"
            ) from None

    def delete_submodule(self, target: str) -> bool:
        """Forget the submodule ``target``; False when there was none."""
        if target not in self.__dict__ or target in _OWN:
            return False
        del self.__dict__[target]
        return True

    # ---- code ------------------------------------------------------------------------------

    def recompile(self) -> PythonCode:
        """Regenerate ``code`` (and the ``forward`` it defines) from ``graph``.

        Returns the ``PythonCode`` (``src``, ``globals``), as torch.fx does.
        """
        python_code = self.graph.python_code()
        src = python_code.src
        _counter[0] += 1
        filename = f"<tensorplay graph {_counter[0]}>"
        # registered with linecache so tracebacks through forward show the generated line
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        env = dict(python_code.globals)
        exec(compile(src, filename, "exec"), env)  # noqa: S102 - code generated from our graph
        self._forward = env["forward"]
        self.code = src
        return python_code

    def forward(self, *args: Any) -> Any:
        return self._forward(self, *args)

    def __call__(self, *args: Any) -> Any:
        return self._forward(self, *args)

    def print_readable(self) -> None:
        print(self.code)

    def draw(self, path: str | Path) -> Path:
        """Render the graph as SVG at ``path`` with Graphviz's ``dot`` executable.

        Raises ``RuntimeError`` naming Graphviz when ``dot`` is not installed.
        """
        dot = shutil.which("dot")
        if dot is None:
            raise RuntimeError(
                "GraphModule.draw() needs Graphviz: the 'dot' executable was not found on PATH. "
                "Install Graphviz (apt-get install graphviz / brew install graphviz / "
                "conda install graphviz), or write graph.to_dot() to a file yourself."
            )
        path = Path(path)
        result = subprocess.run(  # noqa: S603 - fixed argv, our own DOT text on stdin
            [dot, "-Tsvg", "-o", str(path)],
            input=self.graph.to_dot(),
            text=True,
            capture_output=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"Graphviz dot failed: {result.stderr.strip()}")
        return path

    def __repr__(self) -> str:
        return f"GraphModule(\n{self.code})"


def _targets(graph: Graph) -> list[str]:
    """The attribute names the graph reads, in order, each once."""
    found = {n.target: None for n in graph.nodes if n.op in ("get_attr", "call_module")}
    return list(found)


def _walk(obj: Any, path: str) -> Any:
    """``obj.<path>``: the name as a whole first (a GraphModule holds ``"0.weight"`` as
    one attribute), else one dotted step at a time."""
    try:
        return getattr(obj, path)
    except AttributeError:
        if "." not in path:
            raise
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj
