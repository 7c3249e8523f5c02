"""``OplibError``: a bad op library definition, reported at the place it is written."""

from __future__ import annotations

__all__ = ["OplibError", "Where"]


class Where:
    """A place in a definition: ``file:line``, and the operator it belongs to, if any."""

    __slots__ = ("file", "line", "op")

    def __init__(self, file: str, line: int | None = None, op: str | None = None):
        self.file, self.line, self.op = file, line, op

    def at(self, line: int | None, op: str | None = None) -> Where:
        """The same file, another line (and operator)."""
        return Where(self.file, line if line is not None else self.line, op or self.op)

    def __str__(self) -> str:
        place = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{place}: {self.op}" if self.op else place


class OplibError(ValueError):
    """An op library definition (YAML schema, kernel sources, derivatives) is wrong.

    The message starts with ``file:line: namespace::op:`` and says what to change; nothing
    is built or installed from a definition that raised it.
    """

    def __init__(self, where: Where | str, message: str):
        self.where = where
        super().__init__(f"{where}: {message}")
