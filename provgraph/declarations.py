"""What a memory file declares, and where each entry leads.

``read_declaration`` reads the frontmatter, then the body's Dataview fields
(``derived_from:: [[a]]``) and, when asked for, the links under a chosen heading.
``resolve_entries`` resolves each entry to a root-relative path or refuses it; wiki
links resolve as Obsidian does, against the files in ``Lookup``.  Nothing here opens a file.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from urllib.parse import unquote

from .frontmatter import (
    BOM,
    FRONTMATTER_LIMIT,
    NOTHING,
    Declaration,
    frontmatter_incomplete,
    read_frontmatter,
    value_entries,
)
from .model import Problem, ProblemKind

__all__ = [
    "FRONTMATTER_LIMIT",
    "NOTHING",
    "Declaration",
    "Lookup",
    "did_you_mean",
    "follows_listing",
    "frontmatter_incomplete",
    "read_declaration",
    "resolve_entries",
    "unfit_name",
]

_LINK = r"\[[^\]]*\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+[\"'(].*)?\s*\)"
_URL = r"^[A-Za-z][A-Za-z0-9+.\-]*:(//|[^/\\])"
_DRIVE = r"^[A-Za-z]:[\\/]"
_WIKI = r"!?\[\[([^\[\]\n]+)\]\]"
_INLINE = r"[ \t]*(?:[-*+>][ \t]+)?([*~`]{0,2})derived_from\1::(.*)"
"""A whole-line field; Dataview lets Markdown emphasis wrap its key (``**derived_from**::``)."""
_FIELD = r"derived_from[*~`]{0,2}::"
_BRACKETED = r"[\[(]derived_from::"
_BODY_LINK = r"\[\[[^\[\]\n]+\]\]|\[[^\[\]\n]*\]\([^()\n]*\)"
_FENCES = ("```", "~~~")
_HEADING = r"(#{1,6})[ \t]"
_CONFLICTED = Declaration(problems=((ProblemKind.BAD_FRONTMATTER, "unresolved merge conflict"),))
_SENTENCE_END = (".", "!", "?", ":", ";")
_EXTENSION = r"\.[A-Za-z0-9]{1,8}"
_PLAIN_PATH = r"(?!//)[A-Za-z0-9_./-][A-Za-z0-9_. /-]*"
"""An entry that is its own target: no link, scheme, drive, ``~`` or NUL."""


@functools.cache
def _conflict_marker() -> re.Pattern[bytes]:
    """A line git writes around the two sides of a conflict."""
    return re.compile(rb"^(<{7}|\|{7}|={7}|>{7})([ \t]|\r?$)", re.M)


@functools.cache
def _relative_path() -> re.Pattern[str]:
    """A plain path with no space and no ``/`` at either end: refused only for where it leads."""
    return re.compile(r"[A-Za-z0-9_.-](?:[A-Za-z0-9_. /-]*[A-Za-z0-9_.-])?")


@functools.cache
def _plain_link() -> re.Pattern[str]:
    """A Markdown link whose target is plain path characters, which ``_link_target`` keeps as written."""
    return re.compile(r"\[[^\]]*\]\(([A-Za-z0-9_./-]+)\)")


def read_declaration(head: bytes, truncated: bool = False, sources_heading: str | None = None) -> Declaration:
    """What ``head`` declares, in its frontmatter and its body.

    ``truncated``: ``head`` is the first ``FRONTMATTER_LIMIT`` bytes of a longer file.
    ``sources_heading`` (``## Sources``) makes the links under that heading sources too;
    links in prose are not lineage unless the user says so.
    """
    if sources_heading is None and (b"_" not in head or b"derived_" not in head):
        return NOTHING  # most memory files, settled by a byte search
    if head.startswith(BOM):
        head = head[len(BOM) :]
    declared, body_start = read_frontmatter(head, truncated)
    if _conflict_marker().search(head, 0, body_start) and b"derived_" in head[:body_start]:
        return _CONFLICTED  # two sides of a merge: neither is the whole declaration, so none is read
    entries = declared.entries
    if entries and (max(map(len, entries)) > 63 or " " in (joined := "".join(entries)) or "\x00" in joined):
        declared = _without_unfit(declared, head, body_start)  # else short names of a word each
    found, refused = _from_body(head, body_start, sources_heading)
    if not found and not refused:
        return declared
    return Declaration(declared.entries + found, declared.derived_at, declared.problems + refused)


_Refusals = tuple[tuple[ProblemKind, str], ...]


def _without_unfit(declared: Declaration, head: bytes, end: int) -> Declaration:
    """The frontmatter's declaration without the entries that cannot name a file
    (``unfit_name``), each one a ``bad-entry`` problem naming the line that holds it."""
    entries = declared.entries
    unfit = {entry: why for entry in entries if (why := unfit_name(entry))}
    if not unfit:
        return declared
    text = head[:end].decode("utf-8", "replace")
    key = max(text.find("derived_from"), 0)
    refused = tuple(_bad_entry(_line_at(text, entry, key), entry, why) for entry, why in unfit.items())
    kept = tuple(entry for entry in entries if entry not in unfit)
    return Declaration(kept, declared.derived_at, declared.problems + refused)


def _line_at(text: str, entry: str, key: int) -> int:
    """The number (from 1) of the line of ``text`` that holds ``entry`` after ``key`` (where
    ``derived_from`` starts), written as it is or with escapes; else the line of ``key``."""
    for written in (entry, entry.encode("unicode_escape").decode("ascii")):
        position = text.find(written, key)
        if position >= 0:
            return text.count("\n", 0, position) + 1
    return text.count("\n", 0, key) + 1


def _bad_entry(line: int, entry: str, why: str) -> tuple[ProblemKind, str]:
    shown = entry if len(entry) <= 60 else entry[:57] + "..."
    return ProblemKind.BAD_ENTRY, f"line {line}: {why}: {shown!r}"


def unfit_name(entry: str) -> str | None:
    """Why ``entry`` cannot name a file, or None when it may.

    No name holds a NUL, no path part is over 255 bytes (for a link, its target is the
    name).  An entry that is no link is a sentence, not a name, when it has two words or
    more and ends with ``.!?:;`` or holds ``": "`` or ``"; "``, or four words or more
    without an extension; names of a few words (``my facts.md``) stay names.
    """
    name = _named(entry)
    if len(entry) < 64 and "\x00" not in entry and (" " not in entry or name is not entry):
        return None  # nearly every entry: a short name of one word, or a short link
    if "\x00" in name:
        return "a NUL character, which no file name holds"
    if any(len(part.encode()) > 255 for part in name.split("/")):
        return "longer than any file name can be"
    if name is not entry:
        return None
    words = entry.split()
    if len(words) >= 2 and (entry.endswith(_SENTENCE_END) or ": " in entry or "; " in entry):
        return "a sentence, not a file name"
    if len(words) >= 4 and not re.fullmatch(_EXTENSION, posixpath.splitext(words[-1])[1]):
        return "a sentence, not a file name"
    return None


def _named(entry: str) -> str:
    """The name a link entry points at (``[[a|alias]]`` -> ``a``, ``[t](a.md)`` -> ``a.md``),
    or the entry itself."""
    if entry.startswith(("[[", "![[")) and entry.endswith("]]"):
        return entry.lstrip("!")[2:-2].split("|", 1)[0].split("#", 1)[0]
    if entry.startswith("[") and entry.endswith(")") and "](" in entry:
        return entry[entry.find("](") + 2 : -1]
    return entry


def _from_body(head: bytes, start: int, sources_heading: str | None) -> tuple[tuple[str, ...], _Refusals]:
    """Entries the body (``head`` from ``start``) declares: ``derived_from::`` fields, and
    the links under ``sources_heading`` when one is given; and the entries refused as no
    file name, with their lines.  Code blocks declare nothing."""
    wanted = sources_heading.encode() if sources_heading else None
    fields = head.find(b"derived_from", start) >= 0 and re.compile(_FIELD.encode()).search(head, start) is not None
    if not fields and (wanted is None or head.find(wanted, start) < 0):
        return (), ()  # the common case, settled by a byte search
    entries: list[str] = []
    refused: list[tuple[ProblemKind, str]] = []
    section: int | None = None
    first = head.count(b"\n", 0, start) + 1
    heading_line, field, body_link = re.compile(_HEADING), re.compile(_FIELD), re.compile(_BODY_LINK)
    for number, line in _prose_lines(head[start:].decode("utf-8", "replace")):
        heading = heading_line.match(line)
        if heading is not None:
            section = _section_after(len(heading.group(1)), line, section, sources_heading)
            continue
        if "derived_from" in line and field.search(line):
            found = _inline_entries(line)
        elif section is not None:
            found = [link for link in body_link.findall(line) if not re.match(_URL, _link_target(link))]
        else:
            continue
        for entry in found:
            why = unfit_name(entry) if entry else None
            if why:
                refused.append(_bad_entry(first + number, entry, why))
            elif entry:
                entries.append(entry)
    return tuple(entries), tuple(refused)


def _prose_lines(body: str) -> Iterator[tuple[int, str]]:
    """The lines of ``body`` outside fenced code blocks, each with its index."""
    fenced = False
    for number, line in enumerate(body.splitlines()):
        if line.lstrip(" \t").startswith(_FENCES):
            fenced = not fenced
        elif not fenced:
            yield number, line


def _section_after(level: int, line: str, section: int | None, sources_heading: str | None) -> int | None:
    """The level of the sources section we are in after a heading line, or None: the
    section ends at the next heading of the same or a higher level."""
    if sources_heading and line.strip() == sources_heading.strip():
        return level
    return None if section is None or level <= section else section


def _inline_entries(line: str) -> list[str]:
    """``derived_from:: a, b`` as a whole line (after an optional list or quote mark),
    or Dataview's ``[derived_from:: a]`` and ``(derived_from:: a)`` anywhere in it."""
    whole = re.fullmatch(_INLINE, line)
    values = [whole.group(2)] if whole is not None else _bracketed_values(line)
    return [entry for value in values for entry in value_entries(value.strip())]


def _bracketed_values(line: str) -> list[str]:
    """The values of ``[derived_from:: ...]`` fields, up to the bracket that closes each.
    Each character is looked at once: a field inside a field is not searched again."""
    values, scanned = [], 0
    for match in re.finditer(_BRACKETED, line):
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


class Lookup:
    """What resolving an entry needs beyond the entry: ``files``, the memory files that exist
    (root-relative), which wiki links and typo hints search; ``roots``, the absolute paths
    the folder is known by (its own, a sandbox's).  Equal only to itself: comparing two
    would compare every file name."""

    def __init__(self, files: Collection[str] = frozenset(), roots: tuple[str, ...] = ()) -> None:
        self.files = files
        self.roots = roots

    @functools.cached_property
    def stems(self) -> tuple[str, ...]:
        """The ``roots`` without their last ``/``, which ``_joined_at_once`` leaves alone."""
        return tuple([root.rstrip("/") for root in self.roots])

    @functools.cached_property
    def by_name(self) -> Mapping[str, tuple[str, ...]]:
        """File name -> the memory files of that name, anywhere under the root."""
        return _grouped(self.files, posixpath.basename)

    @functools.cached_property
    def by_folded(self) -> Mapping[str, tuple[str, ...]]:
        """Path with case folded -> the memory files whose path folds to it."""
        return _grouped(self.files, str.casefold)

    @functools.cached_property
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
    """Each entry as a root-relative POSIX path, sorted and without duplicates, or a problem.

    Entries are relative to the declaring file's folder; a leading ``/`` (not one of
    ``lookup.roots``) and a wiki link are relative to the root.
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
    """The declaring file's folder and what a plain entry is joined to (the folder and its
    ``/``; nothing at the root)."""
    cut = declaring.rfind("/") + 1
    prefix = declaring[:cut]
    if cut > 1 and prefix[-2] != "/":
        return prefix[:-1], prefix
    folder = posixpath.dirname(declaring)
    return folder, f"{folder}/" if folder[-1:] not in ("/", "") else folder


def _joined_at_once(prefix: str, entry: str, stems: tuple[str, ...]) -> str | None:
    """A plain path entry joined to ``prefix`` (to the root after a ``/`` that starts none of
    ``stems``); None for any other entry or a path that may be refused (one that starts with
    ``.`` once normalised): ``_resolve`` decides those."""
    if entry[:1] == "/":
        if entry.startswith(stems):
            return None
        prefix, entry = "", entry[1:]
    if not _relative_path().fullmatch(entry):
        return None
    path = posixpath.normpath(prefix + entry)
    return path if path[0] != "." else None


def _link_joined_at_once(prefix: str, entry: str, stems: tuple[str, ...]) -> str | None:
    """``[text](../a.md)`` joined as ``_joined_at_once`` joins its target; None for a link
    with a title, ``<...>``, a ``#heading`` or ``%20``, which ``_resolve`` unwraps."""
    link = _plain_link().fullmatch(entry)
    return None if link is None else _joined_at_once(prefix, link.group(1), stems)


def follows_listing(entries: tuple[str, ...]) -> bool:
    """Whether resolving ``entries`` depends on which files exist: only a wiki link's does."""
    return any(entry.strip().startswith(("[[", "![[")) for entry in entries)


def _resolve(folder: str, entry: str, lookup: Lookup) -> str | tuple[ProblemKind, str]:
    entry = entry.strip()
    if re.fullmatch(_PLAIN_PATH, entry):  # most entries: nothing to unwrap or refuse before joining
        return _placed(folder, entry, entry, lookup.roots)
    target = _target(entry, lookup)
    if isinstance(target, tuple):
        return target
    if not target:
        return ProblemKind.BAD_ENTRY, f"empty entry {entry!r}" if entry.strip() else "empty entry"
    if "\x00" in target:
        return ProblemKind.BAD_ENTRY, f"entry contains a NUL character: {entry!r}"
    if re.match(_DRIVE, target) or target.startswith(("~", "\\\\", "//")):
        return ProblemKind.OUTSIDE_ROOT, entry
    if re.match(_URL, target):
        return ProblemKind.BAD_ENTRY, f"URL ignored: {entry}"
    return _placed(folder, entry, target, lookup.roots)


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
    wiki = re.fullmatch(_WIKI, entry) if entry.startswith(("[[", "![[")) else None
    return _link_target(entry) if wiki is None else _wiki_target(wiki.group(1), lookup)


def _under_root(target: str, roots: tuple[str, ...]) -> str:
    """``/srv/agent/Memory/facts.md`` -> ``/facts.md`` when the root is known by that path."""
    for root in roots:
        if target == root or target.startswith(root.rstrip("/") + "/"):
            return "/" + target[len(root) :].lstrip("/")
    return target


def _wiki_target(inner: str, lookup: Lookup) -> str | tuple[ProblemKind, str]:
    """Where ``[[inner]]`` points, as Obsidian resolves it, written from the root (``/a/b.md``):
    no alias or heading, ``.md`` added to a name without extension, a bare name found
    anywhere below the root (several are a problem), else a name that differs in case."""
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
    if found:
        return "/" + found[0]
    return "/" + (path if posixpath.splitext(path)[1] else path + ".md")  # no file has the name


def _candidates(path: str, with_md: str, *, bare: bool, lookup: Lookup) -> tuple[str, ...]:
    """The files a wiki link that names no file exactly may mean, best guess first: a bare
    name's namesakes, the same path in another case, a bare name's namesakes in any case."""
    folded = lookup.by_folded.get(path.casefold(), ()) or lookup.by_folded.get(with_md.casefold(), ())
    if not bare:
        return folded
    name = posixpath.basename(with_md)
    return lookup.by_name.get(name, ()) or folded or lookup.by_folded_name.get(name.casefold(), ())


def did_you_mean(missing: str, lookup: Lookup) -> str | None:
    """A memory file that a missing source's name probably meant, or None: ``facts.md`` for
    ``facts``, a name that differs only in case, the one file of that name elsewhere."""
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
    match = re.fullmatch(_LINK, entry)
    if match:
        target = match.group(1)
        if target.startswith("<") and target.endswith(">"):
            target = target[1:-1]
        target = target.split("#", 1)[0]
        if "%" in target:
            target = unquote(target)
        return target.strip()
    if entry.startswith("<") and entry.endswith(">"):
        return entry[1:-1].strip()
    return entry
