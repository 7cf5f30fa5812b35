"""Read ``derived_from`` and ``derived_at`` out of a memory file's frontmatter.

Pure functions: bytes in, a ``Declaration`` out.  The reader tries, in order:

1. a plain one-line value (``derived_from: a.md, b.md``), split directly;
   this is what most memory files hold and it needs no YAML at all;
2. YAML on the ``derived_from`` lines alone, then on the whole frontmatter;
3. when the frontmatter is not valid YAML (an unquoted colon in a
   description, an unquoted Markdown link), the lines themselves, the way
   agent memory middlewares read frontmatter.

Then each entry is resolved to a path relative to the memory root, or
refused with a problem.  Nothing here opens a file.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

from .model import Problem, ProblemKind

__all__ = ["Declaration", "FRONTMATTER_LIMIT", "frontmatter_incomplete", "read_declaration", "resolve_entries"]

FRONTMATTER_LIMIT = 64 * 1024
"""Only this many leading bytes of a file are searched for frontmatter."""

_BOM = b"\xef\xbb\xbf"
_KEY = "derived_from:"
_AT_KEY = "derived_at:"
_PLAIN = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_ ./,\-]*")
_LINK = re.compile(r"\[[^\]]*\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+[\"'(].*)?\s*\)")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:(//|[^/\\])")
_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")
_NESTING = re.compile(r"[\"'\[\]()<>]")
_ITEM = re.compile(r"( *)- (.*)")
_SPLIT_MARKS = re.compile(r"[\"'\[\]()<>,]")


@dataclass(frozen=True, slots=True)
class Declaration:
    """What one file's frontmatter says about its derivation, before resolution.

    ``entries`` are the strings as written (Markdown links not yet unwrapped);
    ``problems`` are (kind, detail) pairs about the frontmatter itself.
    """

    entries: tuple[str, ...] = ()
    derived_at: str | None = None
    problems: tuple[tuple[ProblemKind, str], ...] = ()


NOTHING = Declaration()


class _NotStrings(Exception):
    """``derived_from`` holds something other than a string or a list of strings."""


def read_declaration(head: bytes, truncated: bool = False) -> Declaration:
    """Parse the frontmatter at the start of ``head``.

    ``truncated`` says that ``head`` is only the first ``FRONTMATTER_LIMIT``
    bytes of a longer file, so an unclosed block may just be too long.
    """
    if head.startswith(_BOM):
        head = head[len(_BOM) :]
    if not head.startswith(b"---"):
        return NOTHING
    block = _block(head)
    if block is None:
        if b"derived_" not in head:
            return NOTHING
        why = (
            f"frontmatter is not closed within the first {FRONTMATTER_LIMIT // 1024} KiB"
            if truncated
            else "frontmatter block is never closed with a '---' line"
        )
        return Declaration(problems=((ProblemKind.BAD_FRONTMATTER, why),))
    if b"derived_" not in block:
        return NOTHING
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError as error:
        detail = f"invalid UTF-8 in the frontmatter at byte {error.start}"
        return Declaration(problems=((ProblemKind.UNREADABLE, detail),))
    return _parse(text)


def frontmatter_incomplete(head: bytes) -> bool:
    """True when ``head`` may be a file caught while it is being written: empty,
    part of the opening ``---`` line, or a frontmatter block that does not close.
    Such a reading says nothing about what the file declares."""
    head = head.removeprefix(_BOM)
    if len(head) <= 3:
        return b"---".startswith(head)
    return head.startswith(b"---") and _block(head) is None


def _block(head: bytes) -> bytes | None:
    """The bytes between the opening ``---`` line and the closing one, or None.

    Only a line that starts with ``---`` can close the block: the search goes
    from one such line to the next."""
    first_end = head.find(b"\n")
    if first_end < 0 or head[:first_end].rstrip() != b"---":
        return None
    newline = first_end
    while (newline := head.find(b"\n---", newline)) >= 0:
        position = newline + 1
        end = head.find(b"\n", position)
        line = head[position:] if end < 0 else head[position:end]
        if line.rstrip() == b"---":
            return head[first_end + 1 : position]
        newline = position
    return None


def _parse(text: str) -> Declaration:
    lines = text.splitlines()
    derived_at = _line_value(lines, _AT_KEY)
    key_lines = _key_lines(lines)
    if key_lines is None:
        return Declaration(derived_at=derived_at)
    try:
        entries = _entries(key_lines, text)
    except _NotStrings as error:
        detail = f"derived_from must be a string or a list of strings, not {error}"
        return Declaration(derived_at=derived_at, problems=((ProblemKind.BAD_FRONTMATTER, detail),))
    except _References as error:
        return Declaration(derived_at=derived_at, problems=((ProblemKind.BAD_FRONTMATTER, f"derived_from: {error}"),))
    return Declaration(entries=entries, derived_at=derived_at)


def _key_lines(lines: list[str]) -> list[str] | None:
    """The ``derived_from:`` line and the lines that continue its value."""
    for index, line in enumerate(lines):
        if line.startswith(_KEY):
            end = index + 1
            while end < len(lines) and (lines[end][:1] in (" ", "\t", "-", "") or not lines[end].strip()):
                end += 1
            return lines[index:end]
    return None


def _line_value(lines: list[str], key: str) -> str | None:
    for line in lines:
        if line.startswith(key):
            value = _strip_comment(line[len(key) :]).strip()
            return _unquote(value) or None
    return None


def _entries(key_lines: list[str], text: str) -> tuple[str, ...]:
    value = key_lines[0][len(_KEY) :].strip()
    if len(key_lines) == 1 and _is_plain_string(value):
        return _split(value)
    listed = _plain_list(value, key_lines[1:])
    if listed is not None:
        return listed
    parsed = _yaml_mapping("\n".join(key_lines))
    if parsed is None:
        with contextlib.suppress(_References):  # elsewhere in the frontmatter: read the lines
            parsed = _yaml_mapping(text)
    if parsed is None:
        return _entries_from_lines(key_lines)
    return _entries_from_value(parsed.get("derived_from"))


def _plain_list(value: str, continued: list[str]) -> tuple[str, ...] | None:
    """``[a, b]``, or ``- a`` lines at one indentation, of plain strings only: what YAML
    would read as exactly these strings, read without it.  None: let YAML decide."""
    if value:
        if not (value.startswith("[") and value.endswith("]")) or any(line.strip() for line in continued):
            return None
        items = [item.strip() for item in value[1:-1].split(",")]
    else:
        matches = [_ITEM.fullmatch(line) for line in continued if line.strip()]
        if not matches or None in matches or len({match[1] for match in matches}) != 1:
            return None
        items = [match[2].strip() for match in matches]
    return tuple(items) if all(_is_plain_string(item) for item in items) else None


def _is_plain_string(value: str) -> bool:
    """True when YAML would read ``value`` as this very string (no quoting, no types)."""
    if not _PLAIN.fullmatch(value):
        return False
    from yaml.nodes import ScalarNode
    from yaml.resolver import Resolver

    return Resolver().resolve(ScalarNode, value, (True, False)) == "tag:yaml.org,2002:str"


class _References(Exception):
    """The YAML holds an anchor, an alias or a merge key: it is not given to the loader."""


def _yaml_mapping(text: str) -> dict | None:
    """``text`` as a YAML mapping, None when it is not one.  Raises ``_References``
    for YAML with anchors, aliases or merge keys: expanding them takes time
    exponential in their nesting in some PyYAML releases, and no declaration
    needs them, so they never reach the loader whatever its version."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        if _references(yaml.parse(text, Loader=loader)):
            raise _References("YAML anchors, aliases and merge keys (<<) are not read")
        parsed = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except (yaml.YAMLError, RecursionError, ValueError, TypeError, OverflowError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _references(events: Iterable) -> bool:
    """True at the first anchor, alias or plain ``<<`` scalar among YAML parser events
    (parsing is linear; only constructing follows references)."""
    import yaml

    for event in events:
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            return True
        if isinstance(event, yaml.ScalarEvent) and event.value == "<<" and event.implicit[0]:
            return True
    return False


def _entries_from_value(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return _split(value)
    if isinstance(value, list):
        for item in value:
            if not isinstance(item, str):
                raise _NotStrings(f"a list holding {_type_name(item)}")
        return tuple(item.strip() for item in value)
    raise _NotStrings(_type_name(value))


def _type_name(value: object) -> str:
    names = {dict: "a mapping", list: "a list", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), f"a {type(value).__name__}")


def _entries_from_lines(key_lines: list[str]) -> tuple[str, ...]:
    """Read the value without YAML: scalar, inline list or block list."""
    value = _strip_comment(key_lines[0][len(_KEY) :]).strip()
    if value.startswith("[") and value.endswith("]"):
        return _split(value[1:-1])
    if value:
        return _split(value)
    items = []
    for line in key_lines[1:]:
        stripped = line.strip()
        if stripped.startswith("-"):
            items.append(_unquote(_strip_comment(stripped[1:]).strip()))
    return tuple(items)


def _split(value: str) -> tuple[str, ...]:
    """Split on commas that are not inside brackets, parentheses or quotes."""
    if not value.strip():
        return ()
    if not _NESTING.search(value):  # the common case: nothing to keep together
        return tuple(_unquote(part.strip()) for part in value.split(","))
    parts, start, depth, quote, started, looked = [], 0, 0, "", False, 0
    for match in _SPLIT_MARKS.finditer(value):  # only these characters change anything
        index, char = match.start(), match.group()
        if quote:
            quote = "" if char == quote else quote
            continue
        # each stretch between marks is looked at once: linear on hostile input
        started = started or bool(value[looked:index].strip())
        looked = index + 1
        if char in "\"'" and not started:
            quote = char
        elif char in "[(<":
            depth += 1
        elif char in "])>":
            depth = max(0, depth - 1)
        elif char == "," and depth == 0:
            parts.append(value[start:index])
            start, started = index + 1, False
            continue
        started = True
    parts.append(value[start:])
    return tuple(_unquote(part.strip()) for part in parts)


def _strip_comment(value: str) -> str:
    """Drop a YAML comment: ``#`` after white space, outside quotes and brackets."""
    if "#" not in value:
        return value
    depth, quote, previous, started = 0, "", " ", False
    for index, char in enumerate(value):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'" and not started:
            quote = char
        elif char in "[(":
            depth += 1
        elif char in "])":
            depth = max(0, depth - 1)
        elif char == "#" and depth == 0 and previous.isspace():
            return value[:index]
        previous = char
        started = started or not char.isspace()
    return value


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def resolve_entries(declaring: str, entries: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[Problem, ...]]:
    """Resolve each entry to a root-relative POSIX path, or refuse it with a problem.

    Entries are relative to the declaring file's folder (Markdown link
    semantics); a leading ``/`` makes one relative to the root.  Duplicates
    collapse; the result is sorted so that entry order never matters.
    """
    sources: set[str] = set()
    problems: list[Problem] = []
    folder = posixpath.dirname(declaring)
    for entry in entries:
        resolved = _resolve(folder, entry)
        if isinstance(resolved, str):
            sources.add(resolved)
        else:
            problems.append(Problem(declaring, resolved[0], resolved[1]))
    return tuple(sorted(sources)), tuple(problems)


def _resolve(folder: str, entry: str) -> str | tuple[ProblemKind, str]:
    target = _link_target(entry.strip())
    if not target:
        return ProblemKind.BAD_ENTRY, f"empty entry {entry!r}" if entry.strip() else "empty entry"
    if "\x00" in target:
        return ProblemKind.BAD_ENTRY, f"entry contains a NUL character: {entry!r}"
    if _DRIVE.match(target) or target.startswith(("~", "\\\\", "//")):
        return ProblemKind.OUTSIDE_ROOT, entry
    if _URL.match(target):
        return ProblemKind.BAD_ENTRY, f"URL ignored: {entry}"
    joined = target.lstrip("/") if target.startswith("/") else posixpath.join(folder, target)
    path = posixpath.normpath(joined) if joined else "."
    if path == ".." or path.startswith("../"):
        return ProblemKind.OUTSIDE_ROOT, entry
    if path == "." or target.endswith("/"):
        return ProblemKind.BAD_ENTRY, f"not a file: {entry}"
    if path == ".provgraph" or path.startswith(".provgraph/"):
        return ProblemKind.BAD_ENTRY, f"provgraph's own state is not a source: {entry}"
    return path


def _link_target(entry: str) -> str:
    """``[text](target "title")`` -> ``target``; ``<target>`` -> ``target``; else the entry."""
    match = _LINK.fullmatch(entry)
    if match:
        target = match.group(1)
        if target.startswith("<") and target.endswith(">"):
            target = target[1:-1]
        target = target.split("#", 1)[0]
        return unquote(target).strip()
    if entry.startswith("<") and entry.endswith(">"):
        return entry[1:-1].strip()
    return entry
