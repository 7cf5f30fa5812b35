"""The portable lock: every stamp as one line of text, for git, sync tools and CI.

``provgraph.lock`` holds only facts that mean the same on every machine: for each edge,
the sha256 the derived file was derived from, when, (while the source differs) the
originating change date, and ``"meaning"`` when the sha256 is of the source's meaning
rather than its bytes (``HashRule``): a stamp keeps the rule it was made under.  One edge
per line, sorted, so a line-wise union merges two machines' stamps without conflict.
Reading forgives what merges leave (an edge twice, conflict markers): the later stamp wins,
then the earliest originating date.  Pure.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import re
from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from typing import Any, NamedTuple

import orjson

from ..errors import ProvgraphError
from ..model import LATEST_DATE, HashRule, Stamp

__all__ = [
    "HEADER",
    "HEADER_BYTES",
    "LOCK_NAME",
    "LockError",
    "LockRead",
    "NewerLock",
    "Record",
    "decode_lock",
    "decode_options",
    "decode_stamps",
    "encode_lock",
    "encode_pieces",
    "encode_rows",
    "lock_row",
    "is_sync_copy",
    "records_start",
    "merge_reads",
]

LOCK_VERSION = 2
"""Format 2 adds the rule a stamp was made under; a lock of format 1 holds stamps of bytes
only, and reads as it always did."""
HEADER = (
    f"# provgraph lock {LOCK_VERSION}: [derived file, source, sha256, stamped at, changed since, derived_at"
    '(, "meaning")] per line; commit it\n'
)
HEADER_BYTES = HEADER.encode()
"""The header as the lock file holds it: what every lock provgraph writes starts with."""
_HEADER_PREFIX = "# provgraph lock "
OPTIONS_PREFIX = "# options: "
"""Starts the line after the header that records the reading options, a JSON object."""
_BOM = b"\xef\xbb\xbf"
_CONFLICT_MARKER = r"^(<{7}|={7}|>{7}|\|{7})( |$)"
LOCK_NAME = "provgraph.lock"


def is_sync_copy(name: str) -> bool:
    """A copy of the lock a sync tool made when two machines changed it at once: a name with
    ``conflict`` in it (Syncthing, Dropbox, Seafile) or ``provgraph-DESKTOP-1234.lock`` (OneDrive)."""
    if name == LOCK_NAME or not (name.startswith("provgraph") and name.endswith(".lock")):
        return False
    return "conflict" in name.lower() or re.fullmatch(_MACHINE_COPY, name) is not None


_MACHINE_COPY = r"provgraph-[A-Z0-9][A-Z0-9-]{0,14}\.lock"
"""OneDrive's copy: the lock's name, a hyphen and a Windows machine name (up to 15 characters)."""


class LockError(ProvgraphError):
    """The bytes are not a provgraph lock (another program's file, a damaged header)."""


class NewerLock(ProvgraphError):
    """The lock was written by a newer provgraph: rewriting it from less would lose stamps."""

    def __init__(self, version: int) -> None:
        super().__init__(f"{LOCK_NAME} was written by a newer provgraph (lock format {version}); upgrade provgraph")
        self.version = version


class Record(NamedTuple):
    """One line: a derived file's stamp of one source, and its ``derived_at`` then."""

    derived: str
    source: str
    stamp: Stamp
    derived_at: str | None


class LockRead(NamedTuple):
    """What a lock holds, and how much of it had to be reconciled or skipped."""

    records: Mapping[tuple[str, str], Record]
    merged: int = 0
    """Lines that repeated an edge (the older ones lost) plus conflict markers."""
    damaged: int = 0
    """Lines that are not a valid record; they are skipped."""

    def derivations(self) -> dict[str, tuple[str | None, dict[str, Stamp]]]:
        """Derived file -> (its ``derived_at``, source -> stamp)."""
        return _stamps_of(record for _, record in sorted(self.records.items())) or {}


def encode_lock(records: Iterable[Record], options: Mapping[str, str] | None = None) -> bytes:
    """The lock's bytes: the header, the ``options`` line, then one sorted line per edge.
    Equal records give equal bytes, so an unchanged lock is never rewritten."""
    return encode_rows((lock_row(r.derived, r.source, r.stamp, r.derived_at) for r in records), options)


LockRow = tuple[str | float | None, ...]
"""One line's values, in the order the header names them."""


def lock_row(derived: str, source: str, stamp: Stamp, derived_at: str | None) -> LockRow:
    """One edge's line values: a stamp of the source's bytes leaves its rule unwritten, as
    the first format wrote every stamp."""
    sha256, stamped_at, since, rule = stamp
    if rule is HashRule.BYTES:
        return derived, source, sha256, stamped_at, since, derived_at
    return derived, source, sha256, stamped_at, since, derived_at, rule.value


def encode_rows(rows: Iterable[LockRow], options: Mapping[str, str] | None = None) -> bytes:
    """``encode_lock`` of the records these rows hold, without a record built for each."""
    return b"".join(encode_pieces(rows, options))


def encode_pieces(rows: Iterable[LockRow], options: Mapping[str, str] | None = None) -> list[bytes]:
    """``encode_rows`` in pieces, written one after the other: a large lock is not held twice,
    in pieces and joined.  Rows are encoded a batch at a time into one buffer each, and
    sorted only when out of order."""
    remaining = iter(rows)
    batches: list[bytes] = []
    last, in_order = b"", True
    while batch := list(islice(remaining, _ROWS)):
        encoded = _lines(batch)
        lines = encoded.split(b"\n")
        in_order = in_order and last <= lines[0] and all(map(operator.le, lines, islice(lines, 1, None)))
        last = lines[-1]
        batches.append(encoded)
    if not in_order:
        batches = sorted(b"\n".join(batches).split(b"\n"))
    recorded = [_OPTIONS + orjson.dumps(options, option=orjson.OPT_SORT_KEYS)] if options else []
    head = [line + b"\n" for line in (_HEADER_LINE, *recorded)]
    return head + [piece for batch in batches for piece in (batch, b"\n")]


def records_start(data: bytes) -> int:
    """Where a lock's first record line starts: after the header and its options line."""
    start = data.find(b"\n") + 1
    if start and data.startswith(_OPTIONS, start):
        end = data.find(b"\n", start)
        return len(data) if end < 0 else end + 1
    return start or len(data)


def decode_options(data: bytes) -> dict[str, str]:
    """The reading options a lock records; ``LockError`` when its options line is not a JSON
    object of text values, ``NewerLock`` when a newer provgraph wrote it."""
    start, end = data.find(b"\n") + 1, records_start(data)
    header = data[: start - 1 if start else None].removeprefix(_BOM)
    if header.startswith(_HEADER_PREFIX.encode()):
        with contextlib.suppress(LockError, UnicodeDecodeError):  # damage: the reading of the stamps sets it aside
            _check_version(header.decode())
    if not start or not data.startswith(_OPTIONS, start):
        return {}
    try:
        options = orjson.loads(data[start + len(_OPTIONS) : end])
    except orjson.JSONDecodeError:
        options = None
    if not isinstance(options, dict) or not all(type(value) is str for value in options.values()):
        raise LockError(f"its {OPTIONS_PREFIX.strip()} line is not a JSON object of text values")
    return options


_OPTIONS = OPTIONS_PREFIX.encode()
_HEADER_LINE = HEADER_BYTES.removesuffix(b"\n")


def _lines(rows: list[LockRow]) -> bytes:
    """The rows as lines, in one call: inside a string orjson escapes quotes and line
    breaks, so ``],["`` occurs only between two rows."""
    return orjson.dumps(rows)[1:-1].replace(b'],["', b']\n["')


_ROWS = 4096
"""Rows encoded in one call: few calls, and small buffers."""


def decode_lock(data: bytes) -> LockRead:
    """Every record of a lock, merged lines reconciled; ``LockError`` when it is not a lock.
    Only a lock not in the shape provgraph writes is read line by line."""
    data = data.removeprefix(_BOM)  # an editor's or PowerShell's byte-order mark, not part of the text
    clean = _decode_clean(data)
    if clean is not None:
        return clean
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise LockError("it is not UTF-8 text") from error
    return _decode_lines(text)


def _decode_lines(text: str) -> LockRead:
    """Line by line, for a lock in any shape: repeated edges and conflict markers reconciled,
    lines that are not records counted as damaged."""
    records: dict[tuple[str, str], Record] = {}
    merged = damaged = headers = 0
    conflict_marker = re.compile(_CONFLICT_MARKER)
    for line in text.split("\n"):  # not splitlines: U+2028 or U+0085 may sit in a file name
        if line.startswith(_HEADER_PREFIX):
            _check_version(line)
            headers += 1
        elif conflict_marker.match(line):
            merged += 1
        elif line.startswith(OPTIONS_PREFIX):
            continue
        elif line.strip():
            record = _record(line)
            if record is None:
                damaged += 1
                continue
            key = (record.derived, record.source)
            kept = records.get(key)
            if kept is not None:
                merged += 1
                record = _later(kept, record)
            records[key] = record
    if not headers:
        raise LockError("it has no provgraph lock header")
    return LockRead(records, merged + max(0, headers - 1), damaged)


class _NotClean(Exception):
    """Something in the lock is not what provgraph writes: read it line by line."""


def _clean_records(data: bytes) -> Iterator[Record]:
    """Each record of a lock as provgraph writes it, in order; ``_NotClean`` at anything else."""
    end = data.find(b"\n")
    if end < 0 or not data.startswith(_HEADER_PREFIX.encode()) or data.find(_HEADER_PREFIX.encode(), end) >= 0:
        raise _NotClean
    try:
        _check_version(data[:end].decode("utf-8"))
    except UnicodeDecodeError as error:
        raise _NotClean from error
    for rows in _row_batches(data, records_start(data)):
        if rows is None:
            raise _NotClean
        for row in rows:
            record = _from_row(row)
            if record is None:
                raise _NotClean
            yield record


def _decode_clean(data: bytes) -> LockRead | None:
    """The records of a clean lock, or None when it is not one (read it line by line then)."""
    records: dict[tuple[str, str], Record] = {}
    try:
        for record in _clean_records(data):
            key = (record.derived, record.source)
            if key in records:
                return None
            records[key] = record
    except _NotClean:
        return None
    return LockRead(records)


def decode_stamps(data: bytes) -> dict[str, tuple[str | None, dict[str, Stamp]]] | None:
    """What ``decode_lock(data).derivations()`` gives, built straight from a clean lock's
    lines; None when the lock is not clean, or not a lock."""
    try:
        return _stamps_of(_clean_records(data))
    except (_NotClean, LockError):
        return None


def _stamps_of(records: Iterable[Record]) -> dict[str, tuple[str | None, dict[str, Stamp]]] | None:
    """Derived file -> (the ``derived_at`` of its latest stamp, source -> stamp, sorted);
    None when an edge comes twice."""
    stamps: dict[str, dict[str, Stamp]] = {}
    latest: dict[str, Record] = {}
    for record in records:
        table = stamps.setdefault(record.derived, {})
        if record.source in table:
            return None
        table[record.source] = record.stamp
        best = latest.get(record.derived)
        if best is None or _derived_later(record, best):
            latest[record.derived] = record
    return {derived: (latest[derived].derived_at, dict(sorted(table.items()))) for derived, table in stamps.items()}


def _derived_later(record: Record, best: Record) -> bool:
    """Whether ``record`` carries the file's ``derived_at`` rather than ``best``: the later
    stamp, and for the same stamp the first source by name (as ``derivations`` picks)."""
    at, best_at = record.stamp.stamped_at, best.stamp.stamped_at
    return at > best_at or (at == best_at and record.source < best.source)


_BATCH = 1 << 20
"""Bytes of lines parsed in one call."""


def _row_batches(data: bytes, start: int) -> Iterator[list[Any] | None]:
    """The lines from ``start`` on, parsed a batch at a time; None for a batch that is not
    one JSON value per line."""
    stop = len(data)
    while stop > start and data[stop - 1] == ord("\n"):
        stop -= 1
    while start < stop:
        end = data.find(b"\n", min(start + _BATCH, stop))
        end = stop if end < 0 or end > stop else end
        lines = data[start:end]
        try:
            rows = orjson.loads(b"[" + lines.replace(b"\n", b",") + b"]")
        except orjson.JSONDecodeError:
            rows = None
        yield rows if rows is not None and len(rows) == lines.count(b"\n") + 1 else None
        start = end + 1


def merge_reads(first: LockRead, others: Iterable[LockRead]) -> LockRead:
    """Several locks as one (a sync tool's conflict copies): for each edge the later stamp."""
    records = dict(first.records)
    merged, damaged = first.merged, first.damaged
    for other in others:
        merged, damaged = merged + other.merged, damaged + other.damaged
        for key, record in other.records.items():
            kept = records.get(key)
            records[key] = record if kept is None else _later(kept, record)
    return LockRead(records, merged, damaged)


def _check_version(line: str) -> None:
    version = line[len(_HEADER_PREFIX) :].split(":", 1)[0].strip()
    if version.isascii() and version.isdigit() and len(version) < 10 and int(version) > LOCK_VERSION:
        raise NewerLock(int(version))
    if version not in ("1", str(LOCK_VERSION)):
        raise LockError(f"lock version {version!r}, this provgraph reads versions 1 to {LOCK_VERSION}")


def _later(one: Record, other: Record) -> Record:
    """The later stamp; for the same stamp, the one that saw the change first."""
    return min((one, other), key=_precedence)


def _precedence(record: Record) -> tuple[float, bool, float, str, str]:
    since = record.stamp.mismatch_since
    return (-record.stamp.stamped_at, since is None, since or 0.0, record.stamp.sha256 or "", record.derived_at or "")


def _record(line: str) -> Record | None:
    """One line as a record, or None when it is not one (a date out of range is not one)."""
    try:
        return _from_row(orjson.loads(line))
    except orjson.JSONDecodeError:
        return None


@functools.cache
def _sha256() -> re.Pattern[str]:
    """A sha256 as the lock writes it: 64 lowercase hexadecimal digits."""
    return re.compile(r"^[0-9a-f]{64}$")


def _from_row(row: Any) -> Record | None:
    """One decoded line as a record, or None when it is not one."""
    try:
        derived, source, sha256, stamped_at, since, derived_at, *named = row
    except (ValueError, TypeError):
        return None
    rule = HashRule.BYTES if not named else HashRule.MEANING if named == [HashRule.MEANING.value] else None
    if rule is None or not (
        _is_path(derived)
        and _is_path(source)
        and (derived_at is None or type(derived_at) is str)
        and (sha256 is None or (type(sha256) is str and _sha256().match(sha256)))
        and _is_date(stamped_at)
        and (since is None or _is_date(since))
    ):
        return None
    stamp = Stamp(sha256, float(stamped_at), None if since is None else float(since), rule)
    return Record(derived, source, stamp, derived_at)


def _is_path(value: object) -> bool:
    return type(value) is str and value != "" and "\x00" not in value


def _is_date(value: object) -> bool:
    """Epoch seconds that a date can be made of (a bool, NaN or infinity is not one)."""
    return type(value) in (int, float) and 0 <= value <= LATEST_DATE  # type: ignore[operator]
