"""The cache file as one document, for tests that read, damage or rewrite what it holds.

provgraph writes the cache as JSON lines (``provgraph.store.cache``): a head, lines of
rows, lines of the last result's edges, and the CRC-32 of the bytes before it.  Here the
rows and the edges join the head (``"rows"``, ``"last"["edges"]``), and ``written`` gives
the lines back, with a checksum that matches, so that a test damages the values, not the
checksum.
"""

from __future__ import annotations

from binascii import crc32
from typing import Any

import orjson


def document(data: bytes) -> dict[str, Any]:
    """The head of the cache in ``data``, with its rows and edges (the checksum left out)."""
    head, *lines, _check = (orjson.loads(line) for line in data.splitlines())
    head["rows"] = {}
    edges = []
    for line in lines:
        if isinstance(line, dict):
            head["rows"].update(line)
        else:
            edges += line
    if head.get("last") is not None:
        head["last"]["edges"] = edges
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
    data = b"".join(orjson.dumps(line) + b"\n" for line in (head, rows, edges))
    return data + (check or b"%d\n" % crc32(data))


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
