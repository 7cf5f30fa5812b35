"""What a file means, as a hash: what ``HashRule.MEANING`` stamps compare.

A file's meaning is its text without what records when it was touched rather than what it
says: its lines without trailing whitespace (so ``\\r\\n`` is ``\\n``), no blank line at its
end, and its frontmatter without the top-level volatile fields (``updated:``...), a block
value under one going with it.  An edit of those alone marks nothing derived from the file.
Pure: bytes in, a hash out, a chunk at a time for a file too large to hold.
"""

from __future__ import annotations

import functools
import hashlib
import re

from .frontmatter import BOM, FRONTMATTER_LIMIT

__all__ = ["VOLATILE_FIELDS", "Meaning", "meaning_hash", "volatile_lines"]

VOLATILE_FIELDS = ("last_accessed", "last_updated", "originSessionId", "updated")
"""Frontmatter fields that record when a file was touched, not what it says."""


@functools.cache
def volatile_lines(extra: tuple[str, ...] = ()) -> re.Pattern[bytes]:
    """A line break, then the key of a top-level volatile field: one of ``VOLATILE_FIELDS`` or
    ``extra`` (a pattern that starts with a plain character is searched for quickly)."""
    names = b"|".join(re.escape(name.encode()) for name in sorted({*VOLATILE_FIELDS, *extra}))
    return re.compile(rb"\n(?:" + names + rb")[ \t]*:")


def meaning_hash(data: bytes, volatile: re.Pattern[bytes]) -> str | None:
    """The sha256 of what ``data`` means, or None when that is the sha256 of its bytes: as for
    nearly every file, which a few searches tell."""
    if not (_loose(data) or volatile.search(data, 0, _frontmatter_end(data) + 1)):
        return None
    meaning = Meaning(volatile)
    meaning.update(data)
    return meaning.hexdigest(hashlib.sha256(data).hexdigest())


def _loose(data: bytes) -> bool:
    """Whether a meaning leaves out anything of ``data`` but volatile fields: a trailing space
    or tab, a carriage return, a blank line at the end, or a missing last line break."""
    return (
        b"\r" in data
        or b" \n" in data
        or (b"\t" in data and b"\t\n" in data)  # a tab is rare: one quick look for it first
        or data[-1:] not in b"\n"
        or data == b"\n"
        or data[-2:] == b"\n\n"
    )


def _frontmatter_end(settled: bytes) -> int:
    """Where the frontmatter of ``settled`` (text whose whitespace a meaning keeps as it is)
    ends: 0 when it has none."""
    if not settled.removeprefix(BOM).startswith(b"---\n"):
        return 0
    return max(0, settled.find(_CLOSING, 3, FRONTMATTER_LIMIT))


_INNER_SPACE = rb"[ \t\r]+\n"
_SPACE = b" \t\r\n"
_CLOSING = b"\n---\n"


class Meaning:
    """A file's meaning hashed as its bytes come: whitespace is settled a chunk at a time
    (only a run at the end of what came waits for what follows), the frontmatter once its
    closing line is in or cannot be (it closes within ``FRONTMATTER_LIMIT`` bytes)."""

    def __init__(self, volatile: re.Pattern[bytes]) -> None:
        self._volatile = volatile
        self._digest = hashlib.sha256()
        self._waiting = b""
        """Whitespace at the end of what came: dropped if the file ends there."""
        self._head: bytes | None = b""
        """What came while the frontmatter is not settled; None once it is."""
        self._empty = True

    def update(self, chunk: bytes) -> None:
        data = self._waiting + chunk
        kept = len(data.rstrip(_SPACE))
        self._waiting = data[kept:]
        if kept:
            self._text(re.sub(_INNER_SPACE, b"\n", data[:kept]))

    def hexdigest(self, bytes_hash: str) -> str | None:
        """The meaning's sha256, or None when it is ``bytes_hash``, that of the bytes fed."""
        end = b"" if self._empty else b"\n"
        if self._head is None:
            self._digest.update(end)
        else:
            self._digest.update(_without_volatile_fields(self._head + end, self._volatile))
        found = self._digest.hexdigest()
        return None if found == bytes_hash else found

    def _text(self, text: bytes) -> None:
        self._empty = False
        if self._head is None:
            self._digest.update(text)
            return
        head = self._head + text
        opening = head.removeprefix(BOM)[:4]
        if (opening != b"---\n"[: len(opening)]) or head.find(_CLOSING, 3) >= 0 or len(head) > FRONTMATTER_LIMIT:
            self._head = None
            self._digest.update(_without_volatile_fields(head, self._volatile))
        else:
            self._head = head


def _without_volatile_fields(text: bytes, volatile: re.Pattern[bytes]) -> bytes:
    """``text`` (its whitespace settled) without the volatile fields of its frontmatter."""
    close = _frontmatter_end(text)
    if not close:
        return text
    opening, *block = text[:close].split(b"\n")
    if opening.removeprefix(BOM) != b"---":
        return text
    return b"\n".join([opening, *_without_volatile(block, volatile)]) + text[close:]


def _without_volatile(lines: list[bytes], volatile: re.Pattern[bytes]) -> list[bytes]:
    """The frontmatter's lines but each volatile field's, with the lines of a block value
    under it (indented, or a sequence's ``- item``)."""
    kept: list[bytes] = []
    dropping = False
    for line in lines:
        if volatile.match(b"\n" + line):
            dropping = True
        elif not (dropping and (line[:1] in (b" ", b"\t") or line[:2] == b"- " or line == b"-")):
            dropping = False
            kept.append(line)
    return kept
