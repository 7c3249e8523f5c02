"""``GraphModule``: a ``Graph`` plus the constants it reads, callable as Python code."""

from __future__ import annotations

import linecache
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tensorplay.graph._graph import Graph

__all__ = ["GraphModule"]

_counter = [0]
# instance attributes a constant must not shadow
_OWN = frozenset({"graph", "constants", "code", "_forward"})


class GraphModule:
    """A callable program generated from ``graph``.

    ``constants`` maps the ``get_attr`` targets of the graph to their tensors.
    ``code`` is the generated ``forward`` source; after editing ``graph`` call
    ``recompile()`` to regenerate it.
    """

    def __init__(self, graph: Graph, constants: dict[str, Any] | None = None) -> None:
        self.graph = graph
        self.constants: dict[str, Any] = dict(constants or {})
        for name, value in self.constants.items():
            if not isinstance(name, str) or hasattr(GraphModule, name) or name in _OWN:
                raise ValueError(
                    f"GraphModule: constant name {name!r} would replace the module's own "
                    f"attribute; rename the get_attr target (names in use: {sorted(_OWN)} and "
                    "GraphModule's methods)"
                )
            setattr(self, name, value)
        self.code = ""
        self.recompile()

    def recompile(self) -> str:
        """Regenerate ``code`` (and the ``forward`` it defines) from ``graph``."""
        src, env = self.graph.python_code()
        _counter[0] += 1
        filename = f"<tensorplay graph {_counter[0]}>"
        # registered with linecache so tracebacks through forward show the generated line
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        exec(compile(src, filename, "exec"), env)  # noqa: S102 - code generated from our graph
        self._forward = env["forward"]
        self.code = src
        return src

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
