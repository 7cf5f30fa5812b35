"""The portable lock: every stamp as one line of text, for git, sync tools and CI.

``provgraph.lock`` holds only facts that mean the same on every machine: for
each derived file and each declared source, the sha256 the file was derived
from, when, and (while the source differs) the originating change date.  One
edge per line, sorted, so two machines that stamp different files produce
lines that a line-wise union merges without conflict.

Reading is forgiving in the one way merges need: a line may appear twice, in
two versions (a union merge, a sync copy), and conflict markers may sit
between lines (a merge without the attributes).  For each edge the later
stamp wins; among equal stamps the earliest originating date (every machine
must report the same one).  Pure: bytes in, records out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import orjson

from .errors import ProvgraphError
from .model import Stamp
from .nochange import LOCK_NAME, is_sync_copy  # rule 2 of the no-change rule looks for sync copies

__all__ = [
    "HEADER",
    "LOCK_NAME",
    "LockError",
    "LockRead",
    "Record",
    "decode_lock",
    "encode_lock",
    "is_sync_copy",
    "merge_reads",
]

LOCK_VERSION = 1
HEADER = (
    f"# provgraph lock {LOCK_VERSION}: [derived file, source, sha256, stamped at, changed since, derived_at]"
    " per line; commit it\n"
)
_HEADER_PREFIX = "# provgraph lock "
_CONFLICT_MARKER = re.compile(r"^(<{7}|={7}|>{7}|\|{7})( |$)")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_LATEST = 253402300799.0
"""The last second of year 9999: a later (or negative) date cannot be shown, so it is damage."""


class LockError(ProvgraphError):
    """The bytes are not a provgraph lock at all (another program's file, another version)."""


@dataclass(frozen=True, slots=True)
class Record:
    """One line: a derived file's stamp of one source, and its ``derived_at`` then."""

    derived: str
    source: str
    stamp: Stamp
    derived_at: str | None


@dataclass(frozen=True)
class LockRead:
    """What a lock holds, and how much of it had to be reconciled or skipped."""

    records: Mapping[tuple[str, str], Record]
    merged: int = 0
    """Lines that repeated an edge (the older ones lost) plus conflict markers."""
    damaged: int = 0
    """Lines that are not a valid record; they are skipped."""

    def derivations(self) -> dict[str, tuple[str | None, dict[str, Stamp]]]:
        """Derived file -> (its ``derived_at``, source -> stamp); the ``derived_at`` is the
        one written with the file's latest stamp."""
        stamps: dict[str, dict[str, Stamp]] = {}
        latest: dict[str, Record] = {}
        for (derived, source), record in sorted(self.records.items()):
            stamps.setdefault(derived, {})[source] = record.stamp
            best = latest.get(derived)
            if best is None or record.stamp.stamped_at > best.stamp.stamped_at:
                latest[derived] = record
        return {derived: (latest[derived].derived_at, table) for derived, table in stamps.items()}


def encode_lock(records: Iterable[Record]) -> bytes:
    """The lock's bytes: the header, then one sorted line per edge.  Equal records give
    equal bytes, so an unchanged lock is never rewritten."""
    lines = sorted(
        orjson.dumps([r.derived, r.source, r.stamp.sha256, r.stamp.stamped_at, r.stamp.mismatch_since, r.derived_at])
        for r in records
    )
    return HEADER.encode() + b"".join(line + b"\n" for line in lines)


def decode_lock(data: bytes) -> LockRead:
    """Every record of a lock, merged lines reconciled; ``LockError`` when it is not a lock."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise LockError("it is not UTF-8 text") from error
    records: dict[tuple[str, str], Record] = {}
    merged = damaged = headers = 0
    for line in text.split("\n"):  # not splitlines: U+2028 or U+0085 may sit in a file name
        if line.startswith(_HEADER_PREFIX):
            _check_version(line)
            headers += 1
        elif _CONFLICT_MARKER.match(line):
            merged += 1
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


def merge_reads(first: LockRead, others: Iterable[LockRead]) -> LockRead:
    """Several locks as one (a sync tool's conflict copies beside the lock): for each edge
    the later stamp, as for the lines of a union merge."""
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
    if version != str(LOCK_VERSION):
        raise LockError(f"lock version {version!r}, this provgraph reads version {LOCK_VERSION}")


def _later(one: Record, other: Record) -> Record:
    """The later stamp; for the same stamp, the one that saw the change first."""
    return min((one, other), key=_precedence)


def _precedence(record: Record) -> tuple:
    since = record.stamp.mismatch_since
    return (
        -record.stamp.stamped_at,
        since is None,
        since or 0.0,
        record.stamp.sha256 or "",
        record.derived_at or "",
    )


def _record(line: str) -> Record | None:
    """One line as a record, or None when it is not one (a date out of range is not one)."""
    try:
        derived, source, sha256, stamped_at, since, derived_at = orjson.loads(line)
    except (orjson.JSONDecodeError, ValueError, TypeError):
        return None
    if not (_is_path(derived) and _is_path(source) and _is_optional_text(derived_at)):
        return None
    if not (sha256 is None or (isinstance(sha256, str) and _SHA256.match(sha256))):
        return None
    if not _is_date(stamped_at) or not (since is None or _is_date(since)):
        return None
    stamp = Stamp(sha256, float(stamped_at), None if since is None else float(since))
    return Record(derived, source, stamp, derived_at)


def _is_path(value: object) -> bool:
    return isinstance(value, str) and bool(value) and "\x00" not in value


def _is_optional_text(value: object) -> bool:
    return value is None or isinstance(value, str)


def _is_date(value: object) -> bool:
    """Epoch seconds that a date can be made of."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= _LATEST
    )
