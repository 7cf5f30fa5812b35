"""The memory index (``MEMORY.md``): its entries, what is wrong with them, and the index as
it should be.

An entry is a list line that links a memory file, ``- [Title](file.md) — hook``.  It is
derived from the linked file's ``name``, ``description`` and ``type`` only, so a body edit
never marks it.  Its stamp is an ordinary lock edge, index file -> listed file, whose
sha256 is ``Fields.digest``; the index's ``derived_at`` there is the sha256 of the index
file as it was when its entries were last stamped.  Pure: bytes and stamps in, values out.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import posixpath
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import NamedTuple

import orjson

from .declarations import Lookup, did_you_mean, resolve_entries
from .model import INDEX_KINDS, Problem, ProblemKind, Stamp, day
from .stamps import Derivation, first_observed

__all__ = [
    "INDEX_HEADING",
    "INDEX_NAME",
    "Entry",
    "Fields",
    "IndexReading",
    "block_lines",
    "entries_of",
    "index_problems",
    "index_text",
    "problem_line",
    "read_fields",
]

INDEX_NAME = "MEMORY.md"
"""The index every Claude Code memory folder keeps at its root."""
INDEX_HEADING = "## The memory index is out of step with the files"
"""The prompt block's heading when nothing is stale but an index has a problem."""

_FIELD = r"(name|description|type)[ \t]*:[ \t]*(.*?)[ \t]*\r?"
_DEFAULT_SEPARATOR = " — "


class Fields(NamedTuple):
    """What an entry derives from: the linked file's ``name``, ``description`` and ``type``."""

    name: str | None
    description: str | None
    type: str | None

    @property
    def digest(self) -> str:
        """The entry stamp's sha256: of the three values as a JSON list (absent is null)."""
        return hashlib.sha256(orjson.dumps(list(self))).hexdigest()


NO_FIELDS = Fields(None, None, None)


def read_fields(head: bytes) -> Fields:
    """The top-level ``name``, ``description`` and ``type`` of a frontmatter block."""
    lines = head.decode("utf-8", "replace").removeprefix("\ufeff").split("\n")
    if lines[0].rstrip() != "---":
        return NO_FIELDS
    found: dict[str, str] = {}
    field = re.compile(_FIELD)
    for line in lines[1:]:
        if line.rstrip() in ("---", "..."):
            break
        match = field.fullmatch(line)
        if match is not None and match[1] not in found:
            found[match[1]] = _unquoted(match[2])
    return Fields(found.get("name"), found.get("description"), found.get("type"))


def _unquoted(value: str) -> str:
    """A YAML scalar as text: quotes taken off (``''`` inside single quotes is one quote)."""
    if len(value) > 1 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    if len(value) > 1 and value[0] == value[-1] == '"':
        try:
            text = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value[1:-1]
        return text if isinstance(text, str) else value[1:-1]
    return value


class Entry(NamedTuple):
    """One line of an index; ``target`` is the memory file it links (root-relative), None
    for a line that is not an entry (a heading, prose, a link to no memory file)."""

    number: int
    text: str
    target: str | None
    bullet: str = "- "
    separator: str = _DEFAULT_SEPARATOR


def entries_of(index: str, text: str, lookup: Lookup) -> tuple[Entry, ...]:
    """Every line of the index ``index`` (root-relative), its links resolved as a
    ``derived_from`` entry written in that file would be."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    entries, fenced = [], False
    for number, line in enumerate(lines, 1):
        fenced ^= line.lstrip().startswith(("```", "~~~"))  # a code block lists nothing
        entries.append(Entry(number, line, None) if fenced else _entry(index, number, line, lookup))
    return tuple(entries)


@functools.cache
def _entry_line() -> re.Pattern[str]:
    """``- [Title](file.md) — hook``: ``-`` or ``*``, a Markdown or wiki link, then ``—``, ``--``,
    ``-`` or ``:`` and the hook, or nothing."""
    return re.compile(
        r"(?P<bullet>[ \t]*[-*][ \t]+)(?P<link>\[(?P<title>(?:[^\]\\\n]|\\.)*)\]\([^)]*\)|\[\[[^\[\]]+\]\])"
        r"(?:(?P<separator>[ \t]+(?:—|--|-|:)[ \t]+|[ \t]*:[ \t]+)(?P<hook>.*?))?[ \t]*\r?"
    )


def _entry(index: str, number: int, line: str, lookup: Lookup) -> Entry:
    match = _entry_line().fullmatch(line)
    if match is None:
        return Entry(number, line, None)
    sources, refused = resolve_entries(index, (match["link"],), lookup)
    if refused or not sources or not sources[0].endswith(".md"):
        return Entry(number, line, None)
    return Entry(number, line, sources[0], match["bullet"], match["separator"] or _DEFAULT_SEPARATOR)


class IndexReading(NamedTuple):
    """An index file as a scan read it: its entries and the sha256 of its bytes."""

    path: str
    entries: tuple[Entry, ...]
    sha256: str


def restamped(
    reading: IndexReading,
    old: Derivation | None,
    fields: Mapping[str, Fields],
    mtimes: Mapping[str, float],
    now: float,
    restamp: bool = False,
) -> Derivation:
    """The index's entry stamps after this scan.  An entry seen for the first time adopts its
    file's fields as they are; ``restamp`` (``provgraph stamp`` of the index) takes every
    one anew; so does, for its own entry, an index rewritten since the last stamp whose
    line reads as ``index_text`` writes it now.  A stamp whose fields differ keeps the
    date the difference was first seen; a listed file that is gone keeps its stamp."""
    kept = {} if old is None else old.stamps
    rewritten = old is not None and old.derived_at != reading.sha256
    stamps: dict[str, Stamp] = {}
    for entry in reading.entries:
        if entry.target is None or entry.target in stamps:
            continue
        stamp, now_fields = kept.get(entry.target), fields.get(entry.target)
        if now_fields is None:
            if stamp is not None:
                stamps[entry.target] = stamp
            continue
        digest = now_fields.digest
        if stamp is None or restamp or (rewritten and entry.text == _line(entry, now_fields)):
            stamps[entry.target] = Stamp(digest, now)
        elif stamp.sha256 == digest:
            stamps[entry.target] = stamp if stamp.mismatch_since is None else stamp._replace(mismatch_since=None)
        else:
            since = stamp.mismatch_since
            if since is None:
                since = first_observed(True, stamp.stamped_at, mtimes.get(entry.target), now)
            stamps[entry.target] = stamp._replace(mismatch_since=since)
    at = reading.sha256 if old is None or restamp or rewritten else old.derived_at
    return Derivation(at, dict(sorted(stamps.items())))


def index_problems(
    readings: Iterable[IndexReading],
    stamps: Mapping[str, Derivation],
    files: Collection[str],
    unindexed: Collection[str] = (),
    digests: Mapping[str, str] = {},
) -> tuple[Problem, ...]:
    """What is wrong with the indexes, in the order to repair it: dangling entries (with
    the file the entry's fields moved to, or a name it probably meant), orphans (memory
    files no index lists, but those matching an ``unindexed`` pattern), outdated entries
    (with the date their file first differed), duplicate entries.  ``digests`` holds the
    fields' digest of unlisted files, for the rename hint."""
    readings = tuple(readings)
    listed = {entry.target for reading in readings for entry in reading.entries if entry.target is not None}
    indexes = {reading.path for reading in readings}
    found: list[Problem] = []
    lookup = Lookup(files)
    for reading in readings:
        seen: dict[str, list[int]] = {}
        for entry in reading.entries:
            if entry.target is not None:
                seen.setdefault(entry.target, []).append(entry.number)
        own = stamps.get(reading.path)
        for target, numbers in seen.items():
            where = f"{reading.path} line {numbers[0]}"
            stamp = None if own is None else own.stamps.get(target)
            if target not in files:
                found.append(
                    Problem(target, ProblemKind.DANGLING_ENTRY, _dangling(where, target, stamp, digests, lookup))
                )
            elif stamp is not None and stamp.mismatch_since is not None:
                since = day(stamp.mismatch_since)
                detail = f"{where} predates a change of its name, description or type (since {since})"
                found.append(Problem(target, ProblemKind.OUTDATED_ENTRY, detail))
            if len(numbers) > 1:
                lines = ", ".join(map(str, numbers))
                found.append(Problem(target, ProblemKind.DUPLICATE_ENTRY, f"{reading.path} lists it on lines {lines}"))
    named = ", ".join(sorted(indexes))
    for path in sorted(orphans(files, indexes, listed, unindexed)):
        found.append(Problem(path, ProblemKind.ORPHAN, f"no line of {named} links it"))
    return tuple(sorted(found, key=lambda problem: (INDEX_KINDS.index(problem.kind), problem.path, problem.detail)))


def _dangling(where: str, target: str, stamp: Stamp | None, digests: Mapping[str, str], lookup: Lookup) -> str:
    moved = None if stamp is None else next((p for p, d in sorted(digests.items()) if d == stamp.sha256), None)
    hint = moved or did_you_mean(target, lookup)
    return f"{where} links it, and it does not exist" + (f" (renamed to {hint}?)" if hint else "")


def orphans(
    files: Collection[str], indexes: Collection[str], listed: Collection[str], unindexed: Collection[str] = ()
) -> list[str]:
    """The Markdown files beside an index (in its folder, not below) that no index lists
    and no ``unindexed`` pattern matches."""
    folders = {index.rpartition("/")[0] for index in indexes}
    if folders == {""}:  # the root's files, told without splitting every path of a large folder
        beside = [path for path in files if "/" not in path]
    else:
        beside = [path for path in files if path.rpartition("/")[0] in folders]
    return [
        path
        for path in beside
        if path.endswith(".md")
        and path not in listed
        and path not in indexes
        and not any(fnmatch.fnmatchcase(path, pattern) for pattern in unindexed)
    ]


def index_text(
    reading: IndexReading,
    fields: Mapping[str, Fields],
    outdated: Collection[str],
    missing: Collection[str],
    added: Iterable[str],
) -> str:
    """The index as it should be: its lines in order, the entries of ``outdated`` files
    written from their fields, entries of ``missing`` files and repeated entries dropped,
    ``added`` files appended in the format of its first entry."""
    folder = posixpath.dirname(reading.path)
    model = next((entry for entry in reading.entries if entry.target is not None), Entry(0, "", None))
    lines, written = [], set()
    for entry in reading.entries:
        if entry.target is None:
            lines.append(entry.text)
        elif entry.target not in missing and entry.target not in written:
            written.add(entry.target)
            lines.append(_line(entry, fields.get(entry.target, NO_FIELDS)) if entry.target in outdated else entry.text)
    for path in added:
        link = re.sub(_LINK_UNSAFE, _percent, posixpath.relpath(path, folder) if folder else path)
        title = _escaped(posixpath.splitext(posixpath.basename(path))[0])
        new = Entry(0, f"{model.bullet}[{title}]({link})", path, model.bullet, model.separator)
        lines.append(_line(new, fields.get(path, NO_FIELDS)))
    return "\n".join(lines) + "\n"


def block_lines(problems: Sequence[Problem], room: int, hint: str, shown: Callable[[str], str]) -> list[str]:
    """The prompt block's lines about the indexes: what is wrong, ``room`` lines at most, and
    ``hint``, how to print the index; names go through ``shown`` (``render.safe_name``)."""
    if not problems:
        return []
    lines = [f"The memory index disagrees with the files; {hint}:"]
    lines += [problem_line(problem, shown) for problem in problems[:room]]
    return lines + ([f"- … and {len(problems) - room} more index problems."] if len(problems) > room else [])


def problem_line(problem: Problem, shown: Callable[[str], str]) -> str:
    """``- file: kind: what is wrong``, the line an agent reads of one index problem."""
    return f"- {shown(problem.path)}: {problem.kind.value}: {shown(problem.detail)}"


def _line(entry: Entry, fields: Fields) -> str:
    """``entry`` with its title set to the name and its hook to the description, where given."""
    match = _entry_line().fullmatch(entry.text)
    if match is None:
        return entry.text
    link, title, hook = match["link"], match["title"], match["hook"]
    if fields.name is not None and title is not None:
        link = f"[{_escaped(fields.name)}]{link[len(title) + 2 :]}"
    hook = fields.description if fields.description is not None else hook
    return f"{entry.bullet}{link}" + (f"{entry.separator}{' '.join(hook.split())}" if hook else "")


_LINK_UNSAFE = r"[\s()<>%\x00-\x1f\x7f]"
"""What cannot stand in a link's target as it is: written as ``%XX``, which reading unquotes."""


def _percent(match: re.Match[str]) -> str:
    return "".join(f"%{byte:02X}" for byte in match[0].encode())


def _escaped(title: str) -> str:
    """A name as a link's text: brackets that would end it written with a backslash."""
    return " ".join(title.replace("[", "\\[").replace("]", "\\]").split())
