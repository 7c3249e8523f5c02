"""Reading an op library's YAML with PyYAML's safe loader, keeping the line of every key.

Mappings come back as ``Node`` (a dict that also knows the line of each key), lists as
``Items`` (a list that knows the line of each item), so every later check can say
``ops.yaml:12``. Keys are taken verbatim as strings (YAML 1.1 would read ``on:`` as True),
and a key given twice is an error: PyYAML would silently keep the last one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tensorplay.oplib._errors import OplibError, Where

__all__ = ["Node", "Items", "read"]


class Node(dict):
    """A YAML mapping: ``lines[key]`` is the 1-based line where ``key`` is written."""

    line: int
    lines: dict[str, int]


class Items(list):
    """A YAML sequence: ``lines[i]`` is the line of item ``i``."""

    line: int
    lines: list[int]


class _Loader(yaml.SafeLoader):
    """SafeLoader (no Python objects, no tags beyond YAML's own) that records lines."""

    def __init__(self, stream: str, file: str):
        super().__init__(stream)
        self.file = file


def _mapping(loader: _Loader, node: yaml.MappingNode) -> Node:
    loader.flatten_mapping(node)
    out = Node()
    out.line = node.start_mark.line + 1
    out.lines = {}
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        if not isinstance(key_node, yaml.ScalarNode):
            raise OplibError(Where(loader.file, line), "a key must be a plain name")
        key = key_node.value
        if key in out:
            raise OplibError(
                Where(loader.file, line),
                f"key {key!r} is given twice (first on line {out.lines[key]}); keep one",
            )
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = line
    return out


def _sequence(loader: _Loader, node: yaml.SequenceNode) -> Items:
    out = Items(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.lines = [child.start_mark.line + 1 for child in node.value]
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _sequence)


def read(path: Path) -> Any:
    """The document in ``path``; ``OplibError`` (with the line) for malformed YAML."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise OplibError(str(path), f"cannot read the schema file: {exc.strerror}") from None
    loader = _Loader(text, str(path))
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        what = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise OplibError(Where(str(path), line), f"malformed YAML: {what}") from None
    except yaml.YAMLError as exc:
        raise OplibError(str(path), f"malformed YAML: {exc}") from None
    finally:
        loader.dispose()
