"""Find the frontmatter block at the start of a memory file and read what it declares.

Pure functions: bytes in, a ``Declaration`` out.  The common forms (plain names, Markdown
links, quoted items, wiki links in a list) are read without YAML, by a reader that declines
whatever it is not certain of and that a property test holds to YAML's answer.  Everything
else goes to YAML; frontmatter that is not valid YAML (an unquoted colon, an unquoted
Markdown link) is read line by line, as agent memory middlewares read it.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import re
from collections.abc import Iterable
from typing import NamedTuple

from .model import ProblemKind

__all__ = [
    "BOM",
    "FRONTMATTER_LIMIT",
    "NOTHING",
    "Declaration",
    "frontmatter_incomplete",
    "read_frontmatter",
    "value_entries",
]

FRONTMATTER_LIMIT = 64 * 1024
"""Only this many leading bytes of a file are searched for frontmatter."""
_TOO_LONG = f"frontmatter is not closed within the first {FRONTMATTER_LIMIT // 1024} KiB"
_UNCLOSED = "frontmatter block is never closed with a '---' line"
BOM = b"\xef\xbb\xbf"
_KEY = "derived_from:"
_AT_KEY = "derived_at:"
_PLAIN = r"[A-Za-z0-9_./][A-Za-z0-9_ ./,\-]*"
_NESTING = frozenset("\"'[]()<>")
_ITEM = r"( *)- (.*)"
_SPLIT_MARKS = r"[\"'\[\]()<>,]"
_WIKI_ONLY = r"\[\[[^\[\]\n]+\]\](?:\s*,\s*\[\[[^\[\]\n]+\]\])*"
_ANY_LINK = r"(?:!?\[\[[^\[\]\n]+\]\]|\[[^\[\]\n]*\]\((?:[^()\n]|\([^()\n]*\))*\))(?!\.?\w)"
_FILE_NAME = r"\A(?!.*[:;] )\S+(?: \S+){0,2}\.[A-Za-z][A-Za-z0-9]{0,7}\Z"
"""A wiki or Markdown link (``![[a|alias]]``, ``[t](a.md "title")``) that ends where a word
does (``x [y](z).md`` is a name); a name with an extension, in three words at most."""
_METADATA = r"metadata:[ \t]*(#.*)?"
_FLOW_METADATA = r"^metadata:[ \t]*\{"
_TOKEN = (
    r" *(?:(?P<wiki>\[\[(?P<inner>[\w./][\w./+|# -]*)\]\])"
    r"|(?P<link>\[[\w .,+/-]*\]\([\w./+#%-]*\))"
    r"|(?P<quoted>\"(?P<double>[^\"\\]*)\"|'(?P<single>[^']*)')"
    r"|(?P<plain>[\w./][\w./+ -]*)) *(?P<end>,|$)"
)
"""One entry as the common forms write it (a wiki link, a Markdown link, a quoted string,
a plain name) and the comma after it, if any."""
_NOT_PLAIN_START = frozenset("-?:,[]{}#&*!|>'\"%@`")
_TOP_LINE = r"(?:#.*|\w[\w .-]*:(?: .*)?)?"
_SPANNING = (
    r"(?:^|[-?:]) *(?:[&!]\S* +)*"
    r"(?!(?:\"[^\"\\]*\"|'[^']*'|\[[^\[\]{}\"'#]*\]|\{[^\[\]{}\"'#]*\}) *(?:#.*)?$)[\"'\[{|>]"
)
"""A quoted string, a bracket or a block scalar that may go on over the next lines."""
_OPENING = frozenset("\"'[{|>")
_LINE_KEY = "\n" + _KEY
_COMMON_ENTRY = r"(?:[A-Za-z0-9_./][A-Za-z0-9_./ -]*|\[[A-Za-z0-9_ .,+/-]*\]\([A-Za-z0-9_./+#%-]*\))"


@functools.cache
def _never_typed() -> re.Pattern[str]:
    """A character that no value YAML types implicitly (a number, a date, a boolean,
    null) is written with, or the ``.md`` that none ends with.  A line break is not one:
    YAML's patterns end in ``$``, which also matches before a last newline (``0\\n`` is 0)."""
    return re.compile(r"[^0-9A-Za-z_.:+\- \t\r\n~<=!&*]|\.md$")


@functools.cache
def _common_entries() -> re.Pattern[str]:
    """Entries of the common forms separated by commas (``a.md, [B](b.md)``)."""
    return re.compile(rf" *{_COMMON_ENTRY}(?: *, *{_COMMON_ENTRY})* *")


@functools.cache
def _common_item() -> re.Pattern[str]:
    """A ``- a`` line listing one entry of the common forms."""
    return re.compile(rf"( *)- +({_COMMON_ENTRY})")


class Declaration(NamedTuple):
    """What one file's frontmatter declares, before resolution: ``entries`` as written (links
    not yet unwrapped) and (kind, detail) ``problems`` about the frontmatter itself."""

    entries: tuple[str, ...] = ()
    derived_at: str | None = None
    problems: tuple[tuple[ProblemKind, str], ...] = ()


NOTHING = Declaration()


class _NotStrings(Exception):
    """``derived_from`` holds something other than a string or a list of strings."""

    def __str__(self) -> str:
        return f"derived_from must be a string or a list of strings, not {self.args[0]}"


def read_frontmatter(head: bytes, truncated: bool) -> tuple[Declaration, int]:
    """The frontmatter's declaration and where the body after it starts."""
    if not head.startswith(b"---"):
        return NOTHING, 0
    found = _block(head)
    if found is None:
        if b"derived_" not in head:
            return NOTHING, len(head)
        return _bad_frontmatter(_TOO_LONG if truncated else _UNCLOSED), len(head)
    block, body_start = found
    if b"derived_" not in block:
        return NOTHING, body_start
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError as error:
        detail = f"invalid UTF-8 in the frontmatter at byte {error.start}"
        return Declaration(problems=((ProblemKind.UNREADABLE, detail),)), body_start
    return _parse(text), body_start


def frontmatter_incomplete(head: bytes) -> bool:
    """True when ``head`` may be a file caught mid-write (empty, part of the opening ``---``
    line, or an unclosed block): such a reading says nothing about what it declares."""
    head = head.removeprefix(BOM)
    if len(head) <= 3:
        return b"---".startswith(head)
    return head.startswith(b"---") and _block(head) is None


def _block(head: bytes) -> tuple[bytes, int] | None:
    """The bytes between the opening ``---`` line and the closing one, and where the body
    after it starts; None when the block never closes."""
    first_end = head.find(b"\n")
    if first_end < 0 or head[:first_end].rstrip() != b"---":
        return None
    newline = first_end
    while (newline := head.find(b"\n---", newline)) >= 0:
        position = newline + 1
        end = head.find(b"\n", position)
        line = head[position:] if end < 0 else head[position:end]
        if line.rstrip() == b"---":
            return head[first_end + 1 : position], (len(head) if end < 0 else end + 1)
        newline = position
    return None


def _parse(text: str) -> Declaration:
    """The top-level declaration, and the one under a top-level ``metadata:`` mapping."""
    common = _common_declaration(text)
    if common is not None:
        return common
    lines = text.splitlines()
    top = _parse_lines(lines, text)
    nested = _metadata_lines(lines) if "metadata:" in text else None
    if nested is not None:
        inner = _parse_lines(nested, "\n".join(nested))
    elif "metadata:" in text and re.search(_FLOW_METADATA, text, re.M):
        inner = _flow_metadata(text)
    else:
        return top
    return Declaration(top.entries + inner.entries, top.derived_at or inner.derived_at, top.problems + inner.problems)


def _flow_metadata(text: str) -> Declaration:
    """``metadata: {type: user, derived_from: [a.md]}``: a flow mapping, which only YAML reads."""
    try:
        parsed = _yaml_mapping(text)
    except _References as error:
        return _bad_frontmatter(f"metadata: {error}")
    metadata = parsed.get("metadata") if parsed is not None else None
    if not isinstance(metadata, dict):
        return NOTHING
    derived_at = None if (at := metadata.get("derived_at")) is None else str(at) or None
    try:
        entries = _entries_from_value(metadata.get("derived_from"), text)
    except _NotStrings as error:
        return _bad_frontmatter(str(error), derived_at)
    return Declaration(entries=entries, derived_at=derived_at)


def _metadata_lines(lines: list[str]) -> list[str] | None:
    """The lines of a top-level ``metadata:`` block, dedented; None without one."""
    metadata = re.compile(_METADATA)
    for index, line in enumerate(lines):
        if metadata.fullmatch(line.rstrip()):
            block = list(itertools.takewhile(lambda inner: not inner.strip() or inner[:1] in " \t", lines[index + 1 :]))
            indented = [inner for inner in block if inner.strip()]
            if not indented or not any("derived_" in inner for inner in indented):
                return None
            width = len(indented[0]) - len(indented[0].lstrip())
            return [inner[width:] if inner[:width].isspace() else inner.lstrip() for inner in block]
    return None


def _parse_lines(lines: list[str], text: str) -> Declaration:
    derived_at = _line_value(lines, _AT_KEY)
    key_lines = _key_lines(lines)
    if key_lines is None:
        return Declaration(derived_at=derived_at)
    try:
        entries = _entries(key_lines, text)
    except _NotStrings as error:
        return _bad_frontmatter(str(error), derived_at)
    except _References as error:
        return _bad_frontmatter(f"derived_from: {error}", derived_at)
    return Declaration(entries=entries, derived_at=derived_at)


def _bad_frontmatter(detail: str, derived_at: str | None = None) -> Declaration:
    return Declaration(derived_at=derived_at, problems=((ProblemKind.BAD_FRONTMATTER, detail),))


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
    if len(key_lines) == 1 and (_is_plain_string(value) or re.fullmatch(_WIKI_ONLY, value)):
        return split_entries(value)
    listed = _plain_list(value, key_lines[1:])
    if listed is not None:
        return listed
    with contextlib.suppress(_Unsure):
        return _entries_without_yaml(value, key_lines, text)
    written = "\n".join(key_lines)
    parsed = _yaml_mapping(written)
    if parsed is None:
        with contextlib.suppress(_References):  # elsewhere in the frontmatter: read the lines
            parsed = _yaml_mapping(text)
    if parsed is None:
        return _entries_from_lines(key_lines)
    return _entries_from_value(parsed.get("derived_from"), written)


def _plain_list(value: str, continued: list[str]) -> tuple[str, ...] | None:
    """``[a, b]`` or ``- a`` lines at one indentation, of strings YAML reads as written; else None."""
    if value:
        if not (value.startswith("[") and value.endswith("]")) or any(line.strip() for line in continued):
            return None
        items = [item.strip() for item in value[1:-1].split(",")]
    else:
        listed = _listed(re.compile(_ITEM), continued)
        if listed is None:
            return None
        items = [item.strip() for item in listed]
    return tuple(items) if all(_is_plain_string(item) for item in items) else None


def _listed(item: re.Pattern[str], lines: list[str]) -> list[str] | None:
    """What the ``- a`` lines among ``lines`` list, when each is one (``item``) and all have
    one indentation; else None."""
    matches = [item.fullmatch(line) for line in lines if line.strip()]
    if not matches or None in matches or len({match[1] for match in matches if match}) != 1:
        return None
    return [match[2] for match in matches if match]


def _is_plain_string(value: str) -> bool:
    """True when YAML would read ``value`` as this very string (no quoting, no types)."""
    return re.fullmatch(_PLAIN, value) is not None and _reads_as_text(value)


def _reads_as_text(plain: str) -> bool:
    """True when YAML types the plain scalar ``plain`` as a string, not a number, date,
    boolean or null; ``_never_typed`` settles almost every name without YAML's resolver."""
    if _never_typed().search(plain):
        return True
    from yaml.nodes import ScalarNode  # YAML is heavy: loaded only for a name it may type
    from yaml.resolver import Resolver

    # PyYAML's stubs leave Resolver.resolve unannotated; it returns the tag, a str.
    tag: str = Resolver().resolve(ScalarNode, plain, (True, False))  # type: ignore[no-untyped-call]
    return tag == "tag:yaml.org,2002:str"


class _Unsure(Exception):
    """The reader without YAML cannot be certain of what YAML makes of a declaration."""


_YAML_FAILS = object()
"""A reading of a declaration that is certainly not valid YAML: it is read line by line."""


def _entries_without_yaml(value: str, key_lines: list[str], text: str) -> tuple[str, ...]:
    """The YAML path's answer, problems included, for the forms the shortcuts leave (Markdown
    links, quoted items, wiki links in a list, names beyond ASCII); ``_Unsure`` otherwise."""
    if key_lines[0][len(_KEY) : len(_KEY) + 1] not in ("", " "):
        raise _Unsure
    if not text.replace("\r\n", "").replace("\n", "").isprintable():
        raise _Unsure  # a tab, an odd break or space, a control character: YAML has rules for each
    continued = key_lines[1:]
    if value and any(line.strip() for line in continued):
        raise _Unsure  # a value that goes on over lines
    reading = _one_line_reading(value) if value else _block_reading(continued)
    if reading is _YAML_FAILS:
        if not _plain_lines_before(text):
            raise _Unsure
        return _entries_from_lines(key_lines)
    return _entries_from_value(reading, "\n".join(key_lines))


def _one_line_reading(value: str) -> object:
    """What YAML reads ``derived_from: value`` as, or ``_YAML_FAILS``."""
    if value[0] in "[\"'":
        return _bracketed_or_quoted(value)
    if value[0] in _NOT_PLAIN_START or ": " in value or value.endswith(":") or " #" in value:
        raise _Unsure
    if not _reads_as_text(value):
        raise _Unsure
    return value  # one plain scalar, brackets and quotes in it included


def _bracketed_or_quoted(value: str) -> object:
    """``[a, b]``; ``"a, b"``; or a bracket or a quoted string followed by more
    (``[A](a.md), b.md``, ``"a", b``), which YAML refuses."""
    if value[0] == "[" and value[-1] == "]":  # a quoted value may end in a bracket too
        items = _tokens(value[1:-1])
        if items is not None:
            return _list_reading(items)
    tokens = _tokens(value)
    if tokens is None:
        raise _Unsure
    first = tokens[0]
    if len(tokens) == 1 and first["quoted"]:
        return first["double"] if first["double"] is not None else first["single"]
    if (first["link"] or len(tokens) > 1) and ":" not in value and " #" not in value:
        return _YAML_FAILS
    raise _Unsure


def _block_reading(continued: list[str]) -> object:
    """What YAML reads the ``- a`` lines under ``derived_from:`` as, or ``_YAML_FAILS``."""
    if not any(line.strip() for line in continued):
        return None
    items = _listed(re.compile(_ITEM), continued)
    if items is None:
        raise _Unsure
    token = re.compile(_TOKEN)
    tokens = [token.fullmatch(item) for item in items]
    if any(token is None or token["end"] for token in tokens):
        raise _Unsure
    return _list_reading([token for token in tokens if token])


def _list_reading(tokens: list[re.Match[str]]) -> object:
    """The list YAML reads, or ``_YAML_FAILS`` when an item is a Markdown link (a bracket
    and then more, which YAML refuses)."""
    if any(token["link"] for token in tokens):
        if any(token["quoted"] and ":" in token["quoted"] for token in tokens):
            raise _Unsure
        return _YAML_FAILS
    return [_yaml_item(token) for token in tokens]


def _yaml_item(token: re.Match[str]) -> object:
    """What YAML reads one list item as."""
    if token["quoted"]:
        return token["double"] if token["double"] is not None else token["single"]
    if token["wiki"]:
        inner = token["inner"]
        if inner.endswith(" ") or " #" in inner or not _reads_as_text(inner):
            raise _Unsure
        return [[inner]]  # a list in a list, which the wiki link reading expects
    plain = token["plain"].rstrip()
    if not _reads_as_text(plain):
        raise _Unsure
    return plain


def _tokens(text: str) -> list[re.Match[str]] | None:
    """``text`` as comma-separated entries of the common forms, or None."""
    tokens: list[re.Match[str]] = []
    position, entry = 0, re.compile(_TOKEN)
    while (token := entry.match(text, position)) is not None:
        tokens.append(token)
        if not token["end"]:
            return tokens
        position = token.end()
    return None


def _plain_lines_before(text: str) -> bool:
    """True when every line above ``derived_from:`` is a ``key: value`` line, a comment, a
    blank or an indented line, none opening a quoted string, a bracket or a block scalar
    that may go on over lines: then YAML's error is the declaration's own, and the YAML
    path reads its lines."""
    end = 0 if text.startswith(_KEY) else text.find("\n" + _KEY)
    if end < 0:
        return False
    above = text[:end]
    top_line = re.compile(_TOP_LINE)
    if any(line[:1] != " " and not top_line.fullmatch(line) for line in above.splitlines()):
        return False
    return _OPENING.isdisjoint(above) or not any(map(re.compile(_SPANNING).search, above.splitlines()))


def _common_declaration(text: str) -> Declaration | None:
    """The declaration in the forms nearly every memory file writes (ASCII, no ``metadata:``,
    plain names and Markdown links as ``a, b``, ``[a, b]`` or ``- a`` lines), read in a few
    scans of the text with the decisions of the line reader; None for anything else."""
    if not text.isascii() or "metadata:" in text or not text.replace("\n", "").isprintable():
        return None  # without such characters, lines split on "\n" as ``splitlines`` splits them
    start = 0 if text.startswith(_KEY) else text.find(_LINE_KEY) + 1
    if not start and not text.startswith(_KEY):
        return None
    end = _line_end(text, start)
    written = text[start + len(_KEY) : end]
    if written[:1] not in ("", " "):
        return None
    items = _continued_items(text, end + 1)
    value = written.strip()
    if bool(value) == bool(items):
        return None  # both a value and lines under it, or neither
    entries = _common_value(value, text) if value else _common_block(items, text)
    return None if entries is None else Declaration(entries=entries, derived_at=_line_value(text.split("\n"), _AT_KEY))


def _line_end(text: str, start: int) -> int:
    end = text.find("\n", start)
    return len(text) if end < 0 else end


def _continued_items(text: str, position: int) -> list[str]:
    """The lines from ``position`` on that continue the ``derived_from:`` line, as
    ``_key_lines`` finds them (indented, ``-`` or blank), blank ones left out."""
    items: list[str] = []
    while position < len(text) and text[position] in " -\n":
        end = _line_end(text, position)
        line = text[position:end]
        if line.strip():
            items.append(line)
        position = end + 1
    return items


def _common_value(value: str, text: str) -> tuple[str, ...] | None:
    """``derived_from: a, b`` or ``derived_from: [a, b]``, entries of the common forms."""
    inline = value.startswith("[") and value.endswith("]")
    listed = value[1:-1] if inline else value
    if not _common_entries().fullmatch(listed):
        return None
    if "[" not in listed:  # plain names only, separated by commas: YAML reads them as they are
        entries = tuple([name.strip() for name in listed.split(",")])
        shown = entries if inline else (value,)
        return entries if all(map(_never_typed().search, shown)) else None
    entries = tuple([found.strip() for found in re.findall(_COMMON_ENTRY, listed)]) if inline else value_entries(value)
    if (inline or value.startswith("[")) and not _plain_lines_before(text):
        return None  # a value YAML refuses: the lines above decide how it is read
    return entries


def _common_block(items: list[str], text: str) -> tuple[str, ...] | None:
    """``- a`` lines at one indentation, entries of the common forms."""
    listed = _listed(_common_item(), [item.rstrip() for item in items])
    if listed is None:
        return None
    entries = tuple(entry.strip() for entry in listed)
    if all(entry[:1] != "[" for entry in entries):
        return entries if all(map(_never_typed().search, entries)) else None
    return entries if _plain_lines_before(text) else None


class _References(Exception):
    """The YAML holds an anchor, an alias or a merge key: it is not given to the loader."""


def _yaml_mapping(text: str) -> dict[object, object] | None:
    """``text`` as a YAML mapping, None when it is not one.  ``_References`` for anchors,
    aliases or merge keys: no declaration needs them, and some PyYAML releases expand
    them in time exponential in their nesting."""
    import yaml  # heavy: loaded only for a declaration in none of the common forms

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        if _references(yaml.parse(text, Loader=loader)):
            raise _References("YAML anchors, aliases and merge keys (<<) are not read")
        parsed = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except (yaml.YAMLError, RecursionError, ValueError, TypeError, OverflowError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _references(events: Iterable[object]) -> bool:
    """True at the first anchor, alias or plain ``<<`` scalar among YAML parser events
    (parsing is linear; only constructing follows references)."""
    import yaml  # heavy: loaded only once ``_yaml_mapping`` needs it

    for event in events:
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            return True
        if isinstance(event, yaml.ScalarEvent) and event.value == "<<" and event.implicit[0]:
            return True
    return False


def _entries_from_value(value: object, written: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return value_entries(value)
    if isinstance(value, list):
        return tuple(entry for item in value for entry in _item_entries(item, written))
    raise _NotStrings(_type_name(value))


def _item_entries(item: object, written: str) -> tuple[str, ...]:
    """A list item's entries: a string's (``value_entries``), or an unquoted ``[[name]]``
    that YAML read as a list in a list: a wiki link when the declaration holds that text."""
    if isinstance(item, str):
        return value_entries(item.strip(), item=True)
    inner = item[0] if isinstance(item, list) and len(item) == 1 and isinstance(item[0], list) else item
    if isinstance(inner, list) and len(inner) == 1 and isinstance(inner[0], str):
        link = f"[[{inner[0]}]]"
        if link in written:
            return (link,)
    raise _NotStrings(f"a list holding {_type_name(item)}")


def _type_name(value: object) -> str:
    names = {dict: "a mapping", list: "a list", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), f"a {type(value).__name__}")


def _entries_from_lines(key_lines: list[str]) -> tuple[str, ...]:
    """Read the value without YAML: scalar, inline list or block list."""
    value = _strip_comment(key_lines[0][len(_KEY) :]).strip()
    if re.fullmatch(_WIKI_ONLY, value):
        return split_entries(value)
    if _flow_list(value):
        return tuple(entry for item in split_entries(value[1:-1]) for entry in value_entries(item, item=True))
    if value:
        return value_entries(value)
    items = [line.strip()[1:] for line in key_lines[1:] if line.strip().startswith("-")]
    return tuple(entry for item in items for entry in value_entries(_unquote(_strip_comment(item).strip()), item=True))


def _flow_list(value: str) -> bool:
    """``[a, b]``: a value whose first bracket closes at its end (``[[a]] and [[b]]`` is none)."""
    depths = itertools.accumulate((char == "[") - (char == "]") for char in value)
    closed = next((index for index, depth in enumerate(depths) if depth < 1), 0)
    return closed > 0 and closed == len(value) - 1


def value_entries(value: str, item: bool = False) -> tuple[str, ...]:
    """The entries one written value (a scalar, or a list ``item``) declares: its wiki and
    Markdown links and the comma-separated parts that are file names, never the prose around
    them; without a link, a scalar's comma-separated parts or the item as written."""
    if "[" in value and re.search(_ANY_LINK, value) is not None:
        any_link, file_name = re.compile(_ANY_LINK), re.compile(_FILE_NAME)
        return tuple(
            found for part in split_entries(value) for found in any_link.findall(part) or file_name.findall(part)
        )
    return (value,) if item else split_entries(value)


def split_entries(value: str) -> tuple[str, ...]:
    """Split on commas that are not inside brackets, parentheses or quotes."""
    if not value.strip():
        return ()
    if _NESTING.isdisjoint(value):  # the common case: nothing to keep together
        return tuple(_unquote(part.strip()) for part in value.split(","))
    parts, start, depth, quote, started, looked = [], 0, 0, "", False, 0
    for match in re.finditer(_SPLIT_MARKS, value):  # only these characters change anything
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
