"""The fallback report: how every captured node runs, and why when it is not lowered."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

__all__ = ["Report", "ReportRow"]


@dataclasses.dataclass(frozen=True)
class ReportRow:
    """One captured node.

    ``route`` is where it runs (``"tvm"``, ``"interpreter"``, ``"custom_op"``,
    ``"triton_op"``, ``"tile_lang_op"``, ``"eager"``); ``reason`` says why a node was not
    lowered (empty when it was). ``fallback`` marks a node the backend meant to lower but
    could not (what ``strict=True`` refuses); library ops are barriers by design, not
    fallbacks. ``region`` numbers the fused kernel a lowered node belongs to.
    """

    node: str
    op: str
    route: str
    reason: str = ""
    fallback: bool = False
    region: int | None = None


class Report:
    """The rows of one compiled specialisation; ``str(report)`` is a readable table."""

    def __init__(self, rows: list[ReportRow], *, backend: str, key: tuple = ()) -> None:
        self.rows = list(rows)
        self.backend = backend
        self.key = key

    def __iter__(self) -> Iterator[ReportRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, node: str) -> ReportRow:
        """The row of the node named ``node``."""
        for row in self.rows:
            if row.node == node:
                return row
        raise KeyError(f"no node named {node!r} in the report; nodes: {[r.node for r in self]}")

    @property
    def fallbacks(self) -> list[ReportRow]:
        return [r for r in self.rows if r.fallback]

    def routes(self) -> dict[str, int]:
        """How many nodes took each route."""
        counts: dict[str, int] = {}
        for r in self.rows:
            counts[r.route] = counts.get(r.route, 0) + 1
        return counts

    def __str__(self) -> str:
        head = ("node", "op", "route", "reason")
        cells = [head] + [
            (
                r.node,
                r.op,
                r.route + (f" #{r.region}" if r.region is not None else ""),
                r.reason or "-",
            )
            for r in self.rows
        ]
        widths = [max(len(c[i]) for c in cells) for i in range(4)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
        summary = ", ".join(f"{n} {route}" for route, n in self.routes().items())
        return f"backend={self.backend}: {summary}\n" + "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)
