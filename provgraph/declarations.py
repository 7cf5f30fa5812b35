"""Read ``derived_from`` and ``derived_at`` out of a memory file's frontmatter.

Pure functions: bytes in, a ``Declaration`` out.  The reader tries, in order:

1. a plain one-line value (``derived_from: a.md, b.md``), split directly;
   this is what most memory files hold and it needs no YAML at all;
2. the other common forms (Markdown links, quoted items, wiki links in a
   list, names beyond ASCII), read by a small exact reader that works out
   what the steps below would give and declines whatever it is not certain
   of; a property test holds it to their answer;
3. YAML on the ``derived_from`` lines alone, then on the whole frontmatter;
4. when the frontmatter is not valid YAML (an unquoted colon in a
   description, an unquoted Markdown link), the lines themselves, the way
   agent memory middlewares read frontmatter.

The body adds what it declares: Dataview-style inline fields
(``derived_from:: [[a]], [[b]]``) and, when asked for, the links under a
chosen heading (``## Sources``).  ``derived_from`` may also sit under a
top-level ``metadata:`` mapping.

Then each entry is resolved to a path relative to the memory root, or
refused with a problem.  Wiki links (``[[facts]]``) resolve the way Obsidian
does, which depends on the files that exist: ``Lookup`` carries them.
Nothing here opens a file.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from functools import cached_property
from typing import NamedTuple

from .model import Frozen, Problem, ProblemKind

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import AnyStr

__all__ = [
    "Declaration",
    "FRONTMATTER_LIMIT",
    "Lookup",
    "did_you_mean",
    "frontmatter_incomplete",
    "read_declaration",
    "resolve_entries",
]


class _CompiledOnFirstUse:
    """A regular expression compiled when it is first used.  Compiling the reader's 28
    patterns took longer than importing the rest of the module, on every run, though a
    folder in the common forms uses 11 of them at most (``_common_declaration``).  The
    first method looked up compiles the pattern and keeps its methods as attributes of
    this object, so that later calls find them as directly as on the pattern itself."""

    _METHODS = ("match", "fullmatch", "search", "findall", "finditer", "sub", "split")

    def __init__(self, pattern: str | bytes, flags: int = 0) -> None:
        self.pattern = pattern
        self._flags = flags

    def __getattr__(self, name: str) -> object:
        compiled = re.compile(self.pattern, self._flags)
        for method in self._METHODS:
            setattr(self, method, getattr(compiled, method))
        return getattr(compiled, name)


def _on_first_use(pattern: AnyStr, flags: int = 0) -> re.Pattern[AnyStr]:
    """A pattern to the type checker, compiled on its first use (``_CompiledOnFirstUse``)."""
    return _CompiledOnFirstUse(pattern, flags)  # type: ignore[return-value]


FRONTMATTER_LIMIT = 64 * 1024
"""Only this many leading bytes of a file are searched for frontmatter."""

_BOM = b"\xef\xbb\xbf"
_KEY = "derived_from:"
_AT_KEY = "derived_at:"
_PLAIN = _on_first_use(r"[A-Za-z0-9_./][A-Za-z0-9_ ./,\-]*")
_LINK = _on_first_use(r"\[[^\]]*\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+[\"'(].*)?\s*\)")
_URL = _on_first_use(r"^[A-Za-z][A-Za-z0-9+.\-]*:(//|[^/\\])")
_DRIVE = _on_first_use(r"^[A-Za-z]:[\\/]")
_NESTING = _on_first_use(r"[\"'\[\]()<>]")
_ITEM = _on_first_use(r"( *)- (.*)")
_SPLIT_MARKS = _on_first_use(r"[\"'\[\]()<>,]")
_WIKI = _on_first_use(r"!?\[\[([^\[\]\n]+)\]\]")
_WIKI_ONLY = _on_first_use(r"\[\[[^\[\]\n]+\]\](?:\s*,\s*\[\[[^\[\]\n]+\]\])*")
_INLINE = _on_first_use(r"[ \t]*(?:[-*+>][ \t]+)?([*~`]{0,2})derived_from\1::(.*)")
"""A whole-line field; Dataview lets Markdown emphasis wrap its key (``**derived_from**::``)."""
_FIELD = _on_first_use(r"derived_from[*~`]{0,2}::")
_FIELD_BYTES = _on_first_use(_FIELD.pattern.encode())
_BRACKETED = _on_first_use(r"[\[(]derived_from::")
_BODY_LINK = _on_first_use(r"\[\[[^\[\]\n]+\]\]|\[[^\[\]\n]*\]\([^()\n]*\)")
_FENCE = _on_first_use(r"[ \t]*(```|~~~)")
_HEADING = _on_first_use(r"(#{1,6})[ \t]")
_METADATA = _on_first_use(r"metadata:[ \t]*(#.*)?")
_FLOW_METADATA = _on_first_use(r"^metadata:[ \t]*\{", re.M)
_NEVER_TYPED = _on_first_use(r"[^0-9A-Za-z_.:+\- \t\r\n~<=!&*]|\.md$")
"""A character that no value YAML types implicitly (a number, a date, a boolean,
null) is written with, or the ``.md`` that none ends with.  A line break is not one:
YAML's patterns end in ``$``, which also matches before a last newline (``0\\n`` is 0)."""


class Declaration(NamedTuple):
    """What one file's frontmatter says about its derivation, before resolution.

    ``entries`` are the strings as written (Markdown links not yet unwrapped);
    ``problems`` are (kind, detail) pairs about the frontmatter itself.  A ``NamedTuple``,
    not a dataclass: ~0.1 ms to create against ~0.7, on every full run.
    """

    entries: tuple[str, ...] = ()
    derived_at: str | None = None
    problems: tuple[tuple[ProblemKind, str], ...] = ()


NOTHING = Declaration()


class _NotStrings(Exception):
    """``derived_from`` holds something other than a string or a list of strings."""


def read_declaration(head: bytes, truncated: bool = False, sources_heading: str | None = None) -> Declaration:
    """Parse the frontmatter at the start of ``head``, then what its body declares.

    ``truncated`` says that ``head`` is only the first ``FRONTMATTER_LIMIT``
    bytes of a longer file, so an unclosed block may just be too long.
    ``sources_heading`` (``## Sources``), when given, makes the links of the
    section under that heading sources too; off by default, since links in
    prose are not lineage unless the user says so.
    """
    if sources_heading is None and (b"_" not in head or b"derived_" not in head):
        return NOTHING  # most memory files, settled by a byte search (the first a memchr)
    if head.startswith(_BOM):
        head = head[len(_BOM) :]
    declared, body_start = _from_frontmatter(head, truncated)
    found = _from_body(head, body_start, sources_heading)
    if not found:
        return declared
    return Declaration(declared.entries + found, declared.derived_at, declared.problems)


def _from_frontmatter(head: bytes, truncated: bool) -> tuple[Declaration, int]:
    """The frontmatter's declaration and where the body after it starts."""
    if not head.startswith(b"---"):
        return NOTHING, 0
    found = _block(head)
    if found is None:
        if b"derived_" not in head:
            return NOTHING, len(head)
        why = (
            f"frontmatter is not closed within the first {FRONTMATTER_LIMIT // 1024} KiB"
            if truncated
            else "frontmatter block is never closed with a '---' line"
        )
        return Declaration(problems=((ProblemKind.BAD_FRONTMATTER, why),)), len(head)
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
    """True when ``head`` may be a file caught while it is being written: empty,
    part of the opening ``---`` line, or a frontmatter block that does not close.
    Such a reading says nothing about what the file declares."""
    head = head.removeprefix(_BOM)
    if len(head) <= 3:
        return b"---".startswith(head)
    return head.startswith(b"---") and _block(head) is None


def _block(head: bytes) -> tuple[bytes, int] | None:
    """The bytes between the opening ``---`` line and the closing one, and where the
    body after it starts; None when the block never closes.

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
    elif "metadata:" in text and _FLOW_METADATA.search(text):
        inner = _flow_metadata(text)
    else:
        return top
    return Declaration(
        top.entries + inner.entries,
        top.derived_at if top.derived_at is not None else inner.derived_at,
        top.problems + inner.problems,
    )


def _flow_metadata(text: str) -> Declaration:
    """``metadata: {type: user, derived_from: [a.md]}``: a flow mapping, which only YAML reads."""
    try:
        parsed = _yaml_mapping(text)
    except _References as error:
        return Declaration(problems=((ProblemKind.BAD_FRONTMATTER, f"metadata: {error}"),))
    metadata = parsed.get("metadata") if parsed is not None else None
    if not isinstance(metadata, dict):
        return NOTHING
    at = metadata.get("derived_at")
    derived_at = str(at) if at is not None and str(at) else None
    try:
        entries = _entries_from_value(metadata.get("derived_from"), text)
    except _NotStrings as error:
        return _wrong_type(error, derived_at)
    return Declaration(entries=entries, derived_at=derived_at)


def _metadata_lines(lines: list[str]) -> list[str] | None:
    """The lines of a top-level ``metadata:`` block, dedented; None without one."""
    for index, line in enumerate(lines):
        if _METADATA.fullmatch(line.rstrip()):
            block = []
            for inner in lines[index + 1 :]:
                if inner.strip() and inner[:1] not in (" ", "\t"):
                    break
                block.append(inner)
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
        return _wrong_type(error, derived_at)
    except _References as error:
        return Declaration(derived_at=derived_at, problems=((ProblemKind.BAD_FRONTMATTER, f"derived_from: {error}"),))
    return Declaration(entries=entries, derived_at=derived_at)


def _wrong_type(error: _NotStrings, derived_at: str | None) -> Declaration:
    detail = f"derived_from must be a string or a list of strings, not {error}"
    return Declaration(derived_at=derived_at, problems=((ProblemKind.BAD_FRONTMATTER, detail),))


def _from_body(head: bytes, start: int, sources_heading: str | None) -> tuple[str, ...]:
    """Entries the body (``head`` from ``start``) declares: ``derived_from::`` fields, and
    the links under ``sources_heading`` when one is given.  Code blocks declare nothing."""
    wanted = sources_heading.encode() if sources_heading else None
    fields = head.find(b"derived_from", start) >= 0 and _FIELD_BYTES.search(head, start) is not None
    if not fields and (wanted is None or head.find(wanted, start) < 0):
        return ()  # the common case, settled by a byte search far faster than the pattern's
    entries: list[str] = []
    section: int | None = None
    for line in _prose_lines(head[start:].decode("utf-8", "replace")):
        heading = _HEADING.match(line)
        if heading is not None:
            section = _section_after(len(heading.group(1)), line, section, sources_heading)
        elif "derived_from" in line and _FIELD.search(line):
            entries += _inline_entries(line)
        elif section is not None:
            entries += [link for link in _BODY_LINK.findall(line) if not _URL.match(_link_target(link))]
    return tuple(entry for entry in entries if entry)


def _prose_lines(body: str) -> Iterator[str]:
    """The lines of ``body`` outside fenced code blocks."""
    fenced = False
    for line in body.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield line


def _section_after(level: int, line: str, section: int | None, sources_heading: str | None) -> int | None:
    """The level of the sources section we are in after a heading line, or None: the
    section ends at the next heading of the same or a higher level."""
    if sources_heading and line.strip() == sources_heading.strip():
        return level
    return None if section is None or level <= section else section


def _inline_entries(line: str) -> list[str]:
    """``derived_from:: a, b`` as a whole line (after an optional list or quote mark),
    or Dataview's ``[derived_from:: a]`` and ``(derived_from:: a)`` anywhere in it."""
    whole = _INLINE.fullmatch(line)
    values = [whole.group(2)] if whole is not None else _bracketed_values(line)
    return [entry for value in values for entry in _split(value.strip())]


def _bracketed_values(line: str) -> list[str]:
    """The values of ``[derived_from:: ...]`` fields, up to the bracket that closes each.
    Each character is looked at once: a field inside a field is not searched again."""
    values, scanned = [], 0
    for match in _BRACKETED.finditer(line):
        if match.start() < scanned:
            continue
        end = _closing(line, match.end())
        if end < len(line) and line[end] == ("]" if match.group().startswith("[") else ")"):
            values.append(line[match.end() : end])
        scanned = end + 1
    return values


def _closing(line: str, start: int) -> int:
    """Where the bracket opened just before ``start`` closes (``len(line)`` if it never does)."""
    depth = 0
    for index in range(start, len(line)):
        char = line[index]
        if char in "[(":
            depth += 1
        elif char in "])":
            if not depth:
                return index
            depth -= 1
    return len(line)


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
    if len(key_lines) == 1 and (_is_plain_string(value) or _WIKI_ONLY.fullmatch(value)):
        return _split(value)
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
    """``[a, b]``, or ``- a`` lines at one indentation, of plain strings only: what YAML
    would read as exactly these strings, read without it.  None: let YAML decide."""
    if value:
        if not (value.startswith("[") and value.endswith("]")) or any(line.strip() for line in continued):
            return None
        items = [item.strip() for item in value[1:-1].split(",")]
    else:
        lines = [line for line in continued if line.strip()]
        matches = [match for line in lines if (match := _ITEM.fullmatch(line))]
        if not matches or len(matches) != len(lines) or len({match[1] for match in matches}) != 1:
            return None
        items = [match[2].strip() for match in matches]
    return tuple(items) if all(_is_plain_string(item) for item in items) else None


def _is_plain_string(value: str) -> bool:
    """True when YAML would read ``value`` as this very string (no quoting, no types)."""
    return _PLAIN.fullmatch(value) is not None and _reads_as_text(value)


def _reads_as_text(plain: str) -> bool:
    """True when YAML types the plain scalar ``plain`` as a string, not a number, date,
    boolean or null.  Those types are written with few characters (no ``/``, no
    ``#``, nothing beyond ASCII) and none ends with ``.md``, which settles almost
    every name without loading YAML's resolver."""
    if _NEVER_TYPED.search(plain):
        return True
    from yaml.nodes import ScalarNode
    from yaml.resolver import Resolver

    # PyYAML's stubs leave Resolver.resolve unannotated; it returns the tag, a str.
    tag: str = Resolver().resolve(ScalarNode, plain, (True, False))  # type: ignore[no-untyped-call]
    return tag == "tag:yaml.org,2002:str"


class _Unsure(Exception):
    """The reader without YAML cannot be certain of what YAML makes of a declaration."""


class _YamlFails:
    """A declaration that is certainly not valid YAML, where it stands: the YAML path
    then reads it line by line."""


_YAML_FAILS = _YamlFails()
_TOKEN = _on_first_use(
    r" *(?:(?P<wiki>\[\[(?P<inner>[\w./][\w./+|# -]*)\]\])"
    r"|(?P<link>\[[\w .,+/-]*\]\([\w./+#%-]*\))"
    r"|(?P<quoted>\"(?P<double>[^\"\\]*)\"|'(?P<single>[^']*)')"
    r"|(?P<plain>[\w./][\w./+ -]*)) *(?P<end>,|$)"
)
"""One entry as the common forms write it (a wiki link, a Markdown link, a quoted string,
a plain name) and the comma after it, if any."""
_NOT_PLAIN_START = frozenset("-?:,[]{}#&*!|>'\"%@`")
_TOP_LINE = _on_first_use(r"(?:#.*|\w[\w .-]*:(?: .*)?)?")
_SPANNING = _on_first_use(
    r"(?:^|[-?:]) *(?:[&!]\S* +)*"
    r"(?!(?:\"[^\"\\]*\"|'[^']*'|\[[^\[\]{}\"'#]*\]|\{[^\[\]{}\"'#]*\}) *(?:#.*)?$)[\"'\[{|>]"
)
"""A quoted string, a bracket or a block scalar that may go on over the next lines."""
_OPENING = _on_first_use(r"[\"'\[{|>]")


def _entries_without_yaml(value: str, key_lines: list[str], text: str) -> tuple[str, ...]:
    """What the YAML path reads from the forms the shortcuts above leave (Markdown links,
    quoted items, wiki links in a list, names beyond ASCII), worked out without YAML;
    ``_Unsure`` for anything else.  It must be the YAML path's answer to the letter,
    problems included, so only forms whose YAML reading is certain are taken."""
    if key_lines[0][len(_KEY) : len(_KEY) + 1] not in ("", " ") or _odd_characters(text):
        raise _Unsure
    continued = key_lines[1:]
    if value and any(line.strip() for line in continued):
        raise _Unsure  # a value that goes on over lines
    reading = _one_line_reading(value) if value else _block_reading(continued)
    if reading is _YAML_FAILS:
        _require_plain_lines_before(text)
        return _entries_from_lines(key_lines)
    return _entries_from_value(reading, "\n".join(key_lines))


def _odd_characters(text: str) -> bool:
    """True when ``text`` holds a tab, an odd line break or space, a control character,
    a byte order mark or anything else Python does not print: YAML has rules of its
    own for several, and no common declaration holds one."""
    return not text.replace("\r\n", "").replace("\n", "").isprintable()


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
    """``[a, b]``; ``"a, b"``; or a value that YAML reads as a bracket or a quoted string
    followed by more (``[A](a.md), b.md``, ``[[a]], b.md``, ``"a", b``): an error."""
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
    matches = [_ITEM.fullmatch(line) for line in continued if line.strip()]
    if not matches:
        return None
    if any(match is None for match in matches) or len({match[1] for match in matches if match}) != 1:
        raise _Unsure
    tokens = [_TOKEN.fullmatch(match[2]) for match in matches if match]
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
    """``text`` as comma-separated entries of the common forms; None when it is not."""
    tokens: list[re.Match[str]] = []
    position = 0
    while (token := _TOKEN.match(text, position)) is not None:
        tokens.append(token)
        if not token["end"]:
            return tokens
        position = token.end()
    return None


def _require_plain_lines_before(text: str) -> None:
    """``_Unsure`` unless every line above ``derived_from:`` is a ``key: value`` line, a
    comment, a blank line or an indented line, none opening a quoted string, a bracket
    or a block scalar that may go on over lines.  Then YAML reads the declaration where
    it stands, its error is the whole frontmatter's, and the YAML path reads the lines."""
    end = 0 if text.startswith(_KEY) else text.find("\n" + _KEY)
    if end < 0:
        raise _Unsure
    lines = text[:end].splitlines()
    if any(line[:1] != " " and not _TOP_LINE.fullmatch(line) for line in lines):
        raise _Unsure
    if _OPENING.search(text, 0, end) and any(_SPANNING.search(line) for line in lines):
        raise _Unsure


_LINE_KEY = "\n" + _KEY
_COMMON_ENTRY = r"(?:[A-Za-z0-9_./][A-Za-z0-9_./ -]*|\[[A-Za-z0-9_ .,+/-]*\]\([A-Za-z0-9_./+#%-]*\))"
_COMMON_ENTRIES = _on_first_use(rf" *{_COMMON_ENTRY}(?: *, *{_COMMON_ENTRY})* *")
_COMMON_ITEM = _on_first_use(rf"( *)- +({_COMMON_ENTRY})")
_FOUND_ENTRY = _on_first_use(_COMMON_ENTRY)


def _common_declaration(text: str) -> Declaration | None:
    """The declaration of a frontmatter in the forms nearly every memory file writes, read
    in a few scans of the text: ASCII, no ``metadata:``, and a ``derived_from`` whose
    entries are plain names and Markdown links, as a comma list, ``[a, b]`` or ``- a``
    lines.  It takes the very decisions of the reader above (the same shortcuts, the same
    test of the lines before a declaration that YAML refuses) in fewer steps; None for
    anything else, which that reader then reads."""
    if not text.isascii() or "metadata:" in text or not text.replace("\n", "").isprintable():
        # in ASCII, the characters that are not printable but for "\n" are those ``splitlines``
        # also splits on and ``_odd_characters`` rejects: without them, lines split on "\n"
        # alone, as ``splitlines`` would split them
        return None
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
    return None if entries is None else Declaration(entries=entries, derived_at=_common_derived_at(text))


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
    if not _COMMON_ENTRIES.fullmatch(listed):
        return None
    if "[" not in listed:  # plain names only, separated by commas: YAML reads them as they are
        entries = tuple([name.strip() for name in listed.split(",")])
        shown = entries if inline else (value,)
        return entries if all(map(_NEVER_TYPED.search, shown)) else None
    entries = tuple(found.strip() for found in _FOUND_ENTRY.findall(listed))
    if (inline or value.startswith("[")) and not _plain_lines_before(text):
        return None  # a value YAML refuses: the lines above decide how it is read
    return entries


def _common_block(items: list[str], text: str) -> tuple[str, ...] | None:
    """``- a`` lines at one indentation, entries of the common forms."""
    matches = [_COMMON_ITEM.fullmatch(item.rstrip()) for item in items]
    if any(match is None for match in matches) or len({match[1] for match in matches if match}) != 1:
        return None
    entries = tuple(match[2].strip() for match in matches if match)
    if all(entry[:1] != "[" for entry in entries):
        return entries if all(_NEVER_TYPED.search(name) for name in entries) else None
    return entries if _plain_lines_before(text) else None


def _plain_lines_before(text: str) -> bool:
    try:
        _require_plain_lines_before(text)
    except _Unsure:
        return False
    return True


def _common_derived_at(text: str) -> str | None:
    """``_line_value(lines, "derived_at:")`` for text whose lines end at ``\\n`` alone."""
    start = 0 if text.startswith(_AT_KEY) else text.find("\n" + _AT_KEY) + 1
    if not start and not text.startswith(_AT_KEY):
        return None
    value = _strip_comment(text[start + len(_AT_KEY) : _line_end(text, start)]).strip()
    return _unquote(value) or None


class _References(Exception):
    """The YAML holds an anchor, an alias or a merge key: it is not given to the loader."""


def _yaml_mapping(text: str) -> dict[object, object] | None:
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


def _references(events: Iterable[object]) -> bool:
    """True at the first anchor, alias or plain ``<<`` scalar among YAML parser events
    (parsing is linear; only constructing follows references)."""
    import yaml

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
        return _split(value)
    if isinstance(value, list):
        return tuple(_entry_from_item(item, written) for item in value)
    raise _NotStrings(_type_name(value))


def _entry_from_item(item: object, written: str) -> str:
    """A string, or an unquoted ``[[name]]`` that YAML read as a list in a list:
    a wiki link when the declaration holds exactly that text."""
    if isinstance(item, str):
        return item.strip()
    inner = item
    if isinstance(inner, list) and len(inner) == 1 and isinstance(inner[0], list):
        inner = inner[0]
    if isinstance(inner, list) and len(inner) == 1 and isinstance(inner[0], str):
        link = f"[[{inner[0]}]]"
        if link in written:
            return link
    raise _NotStrings(f"a list holding {_type_name(item)}")


def _type_name(value: object) -> str:
    names = {dict: "a mapping", list: "a list", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), f"a {type(value).__name__}")


def _entries_from_lines(key_lines: list[str]) -> tuple[str, ...]:
    """Read the value without YAML: scalar, inline list or block list."""
    value = _strip_comment(key_lines[0][len(_KEY) :]).strip()
    if _WIKI_ONLY.fullmatch(value):
        return _split(value)
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


class Lookup(Frozen):
    """What resolving an entry needs to know beyond the entry itself.

    ``files`` are the memory files that exist now (root-relative), which wiki
    links by bare name and the typo hints search; ``roots`` are the absolute
    paths under which the memory folder is known (its own, and the path an
    agent in a sandbox sees), so that an entry written with one of them means
    the file under the root.

    Equal only to itself, and shown by its address: a scan makes one, and nothing compares
    two (comparing would compare every file name) or prints one.  A ``Frozen`` class, not
    a dataclass: ~0.4 ms less to create on every full run.
    """

    files: Collection[str]
    roots: tuple[str, ...]

    def __init__(self, files: Collection[str] = frozenset(), roots: tuple[str, ...] = ()) -> None:
        super().__init__(files=files, roots=roots)

    @cached_property
    def stems(self) -> tuple[str, ...]:
        """The ``roots`` without their last ``/``: what a plain entry written from the root
        must not start with to be joined at once (``_joined_at_once``), made once a scan."""
        return tuple([root.rstrip("/") for root in self.roots])

    @cached_property
    def by_name(self) -> Mapping[str, tuple[str, ...]]:
        """File name -> the memory files of that name, anywhere under the root."""
        return _grouped(self.files, posixpath.basename)

    @cached_property
    def by_folded(self) -> Mapping[str, tuple[str, ...]]:
        """Path with case folded -> the memory files whose path folds to it."""
        return _grouped(self.files, str.casefold)

    @cached_property
    def by_folded_name(self) -> Mapping[str, tuple[str, ...]]:
        """File name with case folded -> the memory files of that name in any case."""
        return _grouped(self.files, lambda path: posixpath.basename(path).casefold())


def _grouped(paths: Iterable[str], key: Callable[[str], str]) -> dict[str, tuple[str, ...]]:
    groups: dict[str, list[str]] = {}
    for path in sorted(paths):
        groups.setdefault(key(path), []).append(path)
    return {name: tuple(found) for name, found in groups.items()}


NO_LOOKUP = Lookup()


def resolve_entries(
    declaring: str, entries: tuple[str, ...], lookup: Lookup = NO_LOOKUP
) -> tuple[tuple[str, ...], tuple[Problem, ...]]:
    """Resolve each entry to a root-relative POSIX path, or refuse it with a problem.

    Entries are relative to the declaring file's folder (Markdown link
    semantics); a leading ``/`` makes one relative to the root, unless it
    starts with one of ``lookup.roots``.  Wiki links are relative to the root.
    Duplicates collapse; the result is sorted so that entry order never matters.
    """
    sources: set[str] = set()
    problems: list[Problem] = []
    folder, prefix = _folder_and_prefix(declaring)
    stems = lookup.stems
    for entry in entries:
        path = _joined_at_once(prefix, entry, stems)
        if path is None and entry[:1] == "[":
            path = _link_joined_at_once(prefix, entry, stems)
        if path is not None:
            sources.add(path)  # most entries: joined, and nothing left to refuse
            continue
        resolved = _resolve(folder, entry, lookup)
        if isinstance(resolved, str):
            sources.add(resolved)
        else:
            problems.append(Problem(declaring, resolved[0], resolved[1]))
    return tuple(sorted(sources)), tuple(problems)


def _folder_and_prefix(declaring: str) -> tuple[str, str]:
    """The declaring file's folder (``posixpath.dirname``) and what a plain entry is joined
    to (the folder and its ``/``; nothing at the root).  A listed path ends its folder with
    one ``/``, which is then all ``dirname`` removes: cut at once, ~1 µs less a derived file
    (a first scan of 10,000 files resolves the entries of 3,000)."""
    cut = declaring.rfind("/") + 1
    prefix = declaring[:cut]
    if cut > 1 and prefix[-2] != "/":
        return prefix[:-1], prefix
    folder = posixpath.dirname(declaring)
    return folder, f"{folder}/" if folder[-1:] not in ("/", "") else folder


def _joined_at_once(prefix: str, entry: str, stems: tuple[str, ...]) -> str | None:
    """A plain path entry (``_RELATIVE_PATH``) joined to the declaring folder's ``prefix``,
    or to the root when it starts with ``/`` and with none of the root's own paths
    (``stems``, without their last ``/``); None for any other entry, or for a joined path
    that may be refused (leaving the root, naming it or provgraph's own state all start
    with ``.`` once normalised): the general way (``_resolve``) decides those.  Nine
    entries in ten in a large folder, and a first scan of 10,000 files resolves 9,000."""
    if entry[:1] == "/":
        if entry.startswith(stems):
            return None
        prefix, entry = "", entry[1:]
    if not _RELATIVE_PATH.fullmatch(entry):
        return None
    path = posixpath.normpath(prefix + entry)
    return path if path[0] != "." else None


def _link_joined_at_once(prefix: str, entry: str, stems: tuple[str, ...]) -> str | None:
    """A Markdown link to a plain path (``[text](../notes/a.md)``, ``_PLAIN_LINK``) joined as
    ``_joined_at_once`` joins its target; None for any other entry: the general way unwraps
    it (a title, ``<...>``, a ``#heading``, ``%20``) and decides.  One entry in seven in the
    benchmark's folder is such a link: resolving every entry of 10,000 files took 18 ms with
    this way, 22 without (medians, side by side)."""
    link = _PLAIN_LINK.fullmatch(entry)
    return None if link is None else _joined_at_once(prefix, link.group(1), stems)


_PLAIN_LINK = _on_first_use(r"\[[^\]]*\]\(([A-Za-z0-9_./-]+)\)")
"""A Markdown link (``_LINK``) with no title, no space and no ``<...>`` around its target,
made of plain path characters: its target is what ``_link_target`` finds in it, as written."""


def follows_listing(entries: tuple[str, ...]) -> bool:
    """Whether resolving ``entries`` depends on which files exist: only a wiki link's does
    (its bare name, its missing ``.md``, its case); every other entry resolves from its
    own text, the declaring file's folder and the root's names, so its resolution holds
    while the declaration does."""
    return any(entry.strip().startswith(("[[", "![[")) for entry in entries)


def _resolve(folder: str, entry: str, lookup: Lookup) -> str | tuple[ProblemKind, str]:
    entry = entry.strip()
    if _PLAIN_PATH.fullmatch(entry):  # most entries: nothing to unwrap or refuse before joining
        return _placed(folder, entry, entry, lookup.roots)
    target = _target(entry, lookup)
    if isinstance(target, tuple):
        return target
    if not target:
        return ProblemKind.BAD_ENTRY, f"empty entry {entry!r}" if entry.strip() else "empty entry"
    if "\x00" in target:
        return ProblemKind.BAD_ENTRY, f"entry contains a NUL character: {entry!r}"
    if _DRIVE.match(target) or target.startswith(("~", "\\\\", "//")):
        return ProblemKind.OUTSIDE_ROOT, entry
    if _URL.match(target):
        return ProblemKind.BAD_ENTRY, f"URL ignored: {entry}"
    return _placed(folder, entry, target, lookup.roots)


_RELATIVE_PATH = _on_first_use(r"[A-Za-z0-9_.-](?:[A-Za-z0-9_. /-]*[A-Za-z0-9_.-])?")
"""A plain path entry (``_PLAIN_PATH``) relative to a folder, with no space around it and
no ``/`` at either end: nothing to unwrap, and refused only for where it leads once joined."""

_PLAIN_PATH = _on_first_use(r"(?!//)[A-Za-z0-9_./-][A-Za-z0-9_. /-]*")
"""An entry that is its own target: no link to unwrap, and nothing (a scheme, a drive, a
``~``, a NUL) that refuses it before it is joined to the declaring folder."""


def _placed(folder: str, entry: str, target: str, roots: tuple[str, ...]) -> str | tuple[ProblemKind, str]:
    """``target`` (written as ``entry``) joined to ``folder``: a root-relative path, or refused."""
    if target.startswith("/"):
        target = _under_root(target, roots)
        joined = target.lstrip("/")
    else:
        joined = f"{folder}/{target}" if folder[-1:] not in ("/", "") else posixpath.join(folder, target)
    path = posixpath.normpath(joined) if joined else "."
    if path == ".." or path.startswith("../"):
        return ProblemKind.OUTSIDE_ROOT, entry
    if path == "." or target.endswith("/"):
        return ProblemKind.BAD_ENTRY, f"not a file: {entry}"
    if path == ".provgraph" or path.startswith(".provgraph/"):
        return ProblemKind.BAD_ENTRY, f"provgraph's own state is not a source: {entry}"
    return path


def _target(entry: str, lookup: Lookup) -> str | tuple[ProblemKind, str]:
    """What an entry points at, before it is joined to the declaring folder."""
    wiki = _WIKI.fullmatch(entry) if entry.startswith(("[[", "![[")) else None
    return _link_target(entry) if wiki is None else _wiki_target(wiki.group(1), lookup)


def _under_root(target: str, roots: tuple[str, ...]) -> str:
    """``/srv/agent/Memory/facts.md`` -> ``/facts.md`` when the root is known by that path."""
    for root in roots:
        if target == root or target.startswith(root.rstrip("/") + "/"):
            return "/" + target[len(root) :].lstrip("/")
    return target


def _wiki_target(inner: str, lookup: Lookup) -> str | tuple[ProblemKind, str]:
    """Where ``[[inner]]`` points, as Obsidian resolves it, written from the root (``/a/b.md``).

    The alias (``|text``) and the heading or block (``#...``) are dropped; the
    path is relative to the root; ``.md`` is added when the name has no
    extension; a bare name not found at the root is the one memory file of
    that name anywhere below it, and several such files are a problem.  Like
    Obsidian, a name that no file has exactly finds one whose name differs
    only in case."""
    name = inner.split("|", 1)[0].split("#", 1)[0].strip()
    if not name:
        return ""
    target = _under_root(name, lookup.roots) if name.startswith("/") else name
    path = posixpath.normpath(target.lstrip("/"))
    with_md = path if path.endswith(".md") else path + ".md"
    exact = [candidate for candidate in (path, with_md) if candidate in lookup.files]
    if exact:
        return "/" + exact[0]
    found = _candidates(path, with_md, bare="/" not in target.strip("/"), lookup=lookup)
    if len(found) > 1:
        return ProblemKind.BAD_ENTRY, f"[[{inner}]] matches several files: {', '.join(found)}"
    return "/" + (found[0] if found else _default(path))


def _candidates(path: str, with_md: str, *, bare: bool, lookup: Lookup) -> tuple[str, ...]:
    """The files a wiki link that names no file exactly may mean, best guess first: a bare
    name's namesakes anywhere, then the same path in another case, then (bare names only)
    namesakes in another case anywhere."""
    folded = lookup.by_folded.get(path.casefold(), ()) or lookup.by_folded.get(with_md.casefold(), ())
    if not bare:
        return folded
    name = posixpath.basename(with_md)
    return lookup.by_name.get(name, ()) or folded or lookup.by_folded_name.get(name.casefold(), ())


def _default(path: str) -> str:
    """The path a wiki link names when no memory file answers to it: ``.md`` added
    when the name has no extension."""
    return path if posixpath.splitext(path)[1] else path + ".md"


def did_you_mean(missing: str, lookup: Lookup) -> str | None:
    """A memory file that a missing source's name probably meant, or None.

    ``facts`` when ``facts.md`` exists; a name that differs only in case; the
    one memory file of that name (in any case) elsewhere under the root."""
    if not missing.endswith(".md") and missing + ".md" in lookup.files:
        return missing + ".md"
    for folded in (missing.casefold(), (missing + ".md").casefold()):
        found = [path for path in lookup.by_folded.get(folded, ()) if path != missing]
        if len(found) == 1:
            return found[0]
    name = posixpath.basename(missing)
    elsewhere = lookup.by_folded_name.get((name if name.endswith(".md") else name + ".md").casefold(), ())
    return elsewhere[0] if len(elsewhere) == 1 and elsewhere[0] != missing else None


def _link_target(entry: str) -> str:
    """``[text](target "title")`` -> ``target``; ``<target>`` -> ``target``; else the entry."""
    match = _LINK.fullmatch(entry)
    if match:
        target = match.group(1)
        if target.startswith("<") and target.endswith(">"):
            target = target[1:-1]
        target = target.split("#", 1)[0]
        if "%" in target:  # unquote leaves any other text as it is; urllib is not imported for it
            from urllib.parse import unquote

            target = unquote(target)
        return target.strip()
    if entry.startswith("<") and entry.endswith(">"):
        return entry[1:-1].strip()
    return entry
