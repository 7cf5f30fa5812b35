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
from provgraph.store.cache import ROWS_AT_ONCE


def document(data: bytes) -> dict[str, Any]:
    """The head of the cache in ``data``, with its rows and edges (the checksum left out)."""
    head, paths, stats, *lines, _check = (orjson.loads(line) for line in data.splitlines())
    rests = [rest for line in lines[: len(lines) - len(EDGE_COLUMNS)] for rest in line]
    head.pop("others")
    head["rows"] = {path: [*stats[4 * at : 4 * at + 4], *rests[at]] for at, path in enumerate(paths)}
    if head.get("last") is not None:
        head["last"]["edges"] = [list(edge) for edge in zip(*lines[-len(EDGE_COLUMNS) :], strict=True)]
    return head


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
    stats = [value for row in whole for value in row[:4]]
    batches = [[row[4:] for row in whole[at : at + ROWS_AT_ONCE]] for at in range(0, len(whole), ROWS_AT_ONCE)]
    columns = (
        [[_field(edge, at) for edge in edges] for at in range(len(EDGE_COLUMNS))]
        if isinstance(edges, list)
        else [edges] * len(EDGE_COLUMNS)
    )
    data = b"".join(orjson.dumps(line) + b"\n" for line in (head, paths, stats, *batches, *columns))
    return data + (check or b"%d\n" % crc32(data))


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
