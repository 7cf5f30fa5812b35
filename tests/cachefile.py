"""The cache file as one document, for tests that read, damage or rewrite what it holds.

provgraph writes the cache as JSON lines (``provgraph.store.cache``): a head, the rows'
paths, their stats, lines of the rest of the rows, the last result's edges a column a
line, and the CRC-32 of the bytes before it.  Here the rows and the edges join the head
(``"rows"``: path -> whole row, ``"last"["edges"]``: one list per edge), and ``written``
gives the lines back, with a checksum that matches, so that a test damages the values,
not the checksum.
"""

from __future__ import annotations

from binascii import crc32
from typing import Any

import orjson

from provgraph.model import EDGE_COLUMNS
from provgraph.store import cache


def document(data: bytes) -> dict[str, Any]:
    """The head of the cache in ``data``, with its rows and edges (the checksum left out)."""
    head, *lines, _check = (orjson.loads(line) for line in data.splitlines())
    count, edge_count, others = head.pop("row_count"), head.pop("edge_count"), head.pop("others")
    paths, stats = _joined(lines, count), _joined(lines, count)
    rests = [rest for line in lines[: -(-count // cache.ROWS_AT_ONCE)] for rest in line]
    del lines[: -(-count // cache.ROWS_AT_ONCE)]
    columns = [_joined(lines, edge_count) for _ in EDGE_COLUMNS]
    assert not lines and others == [path for at, path in enumerate(paths) if rests[at][1] is None]
    head["rows"] = {path: [*stats[4 * at : 4 * at + 4], *rests[at]] for at, path in enumerate(paths)}
    if head.get("last") is not None:
        head["last"]["edges"] = [list(edge) for edge in zip(*columns, strict=True)]
    return head


def _joined(lines: list[Any], count: int) -> list[Any]:
    """The values of the lines that hold ``count`` files' paths, stats or edges, taken off ``lines``."""
    taken = -(-count // cache.VALUES_AT_ONCE)
    joined = [value for line in lines[:taken] for value in line]
    del lines[:taken]
    return joined


def written(document: Any, check: bytes | None = None) -> bytes:
    """The lines of ``document`` as provgraph writes them, ending with a checksum that matches,
    or with the line ``check`` (a damaged cache keeps the checksum of the whole one)."""
    if not isinstance(document, dict):
        return orjson.dumps(document) + b"\n" + (check or b"0\n")
    head = dict(document)
    rows = head.pop("rows", {})
    last = head.get("last")
    edges = []
    if isinstance(last, dict) and "edges" in last:
        head["last"] = {key: value for key, value in last.items() if key != "edges"}
        edges = last["edges"]
    paths = sorted(rows) if isinstance(rows, dict) else rows  # damaged as a whole: written where the paths go
    values = [rows[path] for path in paths] if isinstance(rows, dict) else []
    whole = [row if isinstance(row, list) else [row] for row in values]
    head["others"] = [path for path, row in zip(paths, whole, strict=False) if len(row) > 5 and row[5] is None]
    head["row_count"] = len(paths) if isinstance(paths, list) else 0
    head["edge_count"] = len(edges) if isinstance(edges, list) else 0
    stats = [value for row in whole for value in row[:4]]
    batches = [
        [row[4:] for row in whole[at : at + cache.ROWS_AT_ONCE]] for at in range(0, len(whole), cache.ROWS_AT_ONCE)
    ]
    columns = (
        [[_field(edge, at) for edge in edges] for at in range(len(EDGE_COLUMNS))]
        if isinstance(edges, list)
        else [edges] * len(EDGE_COLUMNS)
    )
    lines = [
        head,
        *_split(paths, 1),
        *_split(stats, 4),
        *batches,
        *(line for values in columns for line in _split(values, 1)),
    ]
    data = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    return data + (check or b"%d\n" % crc32(data))


def _split(values: Any, width: int) -> list[Any]:
    """``values`` in lines of ``VALUES_AT_ONCE`` files' values, as provgraph writes them."""
    if not isinstance(values, list):
        return [values]
    size = cache.VALUES_AT_ONCE * width
    return [values[at : at + size] for at in range(0, len(values), size)]


def _field(edge: Any, at: int) -> Any:
    """One field of an edge as written, or the whole value where a test put something else."""
    return edge[at] if isinstance(edge, list) and len(edge) == len(EDGE_COLUMNS) else edge


def check_line(data: bytes) -> bytes:
    """The last line of the cache in ``data``: its checksum."""
    return data[data.rstrip(b"\n").rfind(b"\n") + 1 :]


def is_whole(data: bytes) -> bool:
    """Whether ``data`` is a whole cache file: its last line the checksum of the bytes before it."""
    body, _, check = data.rstrip(b"\n").rpartition(b"\n")
    return data.endswith(b"\n") and check.isdigit() and crc32(body + b"\n") == int(check)


def with_row(data: bytes, row: list[Any]) -> bytes:
    """The cache in ``data`` with one more row, for the file ``x.md``."""
    found = document(data)
    found["rows"] = {"x.md": row, **found["rows"]}
    return written(found)
