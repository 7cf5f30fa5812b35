"""Questions asked of the lineage: why a file is stale, what it is derived from, what
derives from it, and what an agent should hear right after it writes a memory file.

Pure functions over a ``Report``; every answer is sorted, with the chain that connects
the two files.
"""

from __future__ import annotations

import posixpath
import re
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from .index import INDEX_NAME
from .lineage import Children, from_origin, node_statuses
from .model import Edge, EdgeStatus, Explanation, FileLineage, NodeStatus, Relative, Report, StaleEntry, column
from .render import (
    LINEAGE_MAX_CHARS,
    MORE_RESERVE,
    NAME_SHOWN,
    causes_text,
    chain_text,
    clip,
    fit_lines,
    moved_text,
    named,
    safe_name,
    stale_phrase,
)

__all__ = ["EDIT_NOTES_MAX_CHARS", "Advice", "EditContext", "FileLineage", "Relative", "derived_from", "edit_notes"]
__all__ += ["explain", "file_lineage", "missing_sources", "refusal_text", "sources_of", "stale_after_editing"]
__all__ += ["one_line", "page", "recorded_text", "stale_note", "stale_page", "suggested_line", "unescaped"]

_Item = TypeVar("_Item")


def explain(report: Report, path: str) -> Explanation:
    """What ``why`` prints: the file's sources, its causes and what derives from it."""
    statuses = node_statuses(report.edges, report.stale)
    sources = tuple(edge for edge in report.edges if edge.derived == path)
    return Explanation(
        problems=tuple(problem for problem in report.problems if problem.path == path),
        path=path,
        status=statuses.get(path),
        sources=sources,
        stale=report.entry(path),
        stale_sources=tuple(edge.source for edge in sources if statuses.get(edge.source) is NodeStatus.STALE),
        derived_from_it=tuple(Children(report.edges).get(path, ())),
        in_cycles=tuple(cycle for cycle in report.cycles if path in cycle),
    )


def _parents_of(report: Report) -> dict[str, list[str]]:
    parents: dict[str, set[str]] = defaultdict(set)
    for edge in report.edges:
        parents[edge.derived].add(edge.source)
    return {path: sorted(sources) for path, sources in parents.items()}


def _walk(neighbours: Mapping[str, list[str]], start: str, transitive: bool) -> dict[str, tuple[str, ...]]:
    """Shortest paths from ``start`` (excluded) to every reachable node, start first."""
    paths: dict[str, tuple[str, ...]] = {}
    queue: deque[tuple[str, tuple[str, ...]]] = deque([(start, (start,))])
    while queue:
        node, path = queue.popleft()
        for neighbour in neighbours.get(node, ()):
            if neighbour not in paths and neighbour != start:
                paths[neighbour] = (*path, neighbour)
                if transitive:
                    queue.append((neighbour, paths[neighbour]))
    return paths


def sources_of(report: Report, path: str, *, transitive: bool = False) -> tuple[Relative, ...]:
    """What ``path`` is derived from: its declared sources, or every ancestor."""
    return _relatives(report, _walk(_parents_of(report), path, transitive), upstream=True)


def derived_from(report: Report, path: str, *, transitive: bool = False) -> tuple[Relative, ...]:
    """What is derived from ``path``: directly, or through any number of levels."""
    return _relatives(report, _walk(Children(report.edges), path, transitive), upstream=False)


def _relatives(report: Report, found: dict[str, tuple[str, ...]], *, upstream: bool) -> tuple[Relative, ...]:
    """The files ``_walk`` found, nearest first, each chain read from source to derived file.
    Downstream, every file found is derived, so its status is read from the stale entries alone,
    without one for every file of the lineage."""
    if upstream:
        statuses: Mapping[str, NodeStatus] = node_statuses(report.edges, report.stale)
    else:
        stale = {entry.path for entry in report.stale}
        statuses = {path: NodeStatus.STALE if path in stale else NodeStatus.FRESH for path in found}
    return tuple(
        Relative(path, statuses[path], tuple(reversed(chain)) if upstream else chain)
        for path, chain in sorted(found.items(), key=lambda item: (len(item[1]), item[0]))
    )


def stale_after_editing(report: Report, source: str) -> tuple[StaleEntry, ...]:
    """The stale files downstream of ``source``: what to re-check after editing it.

    Right after an edit, refresh first: the report then marks everything the
    edit reached, and this narrows it to the edited file's descendants.
    """
    downstream = {relative.path for relative in derived_from(report, source, transitive=True)}
    return tuple(entry for entry in report.stale if entry.path in downstream)


def missing_sources(report: Report, path: str) -> tuple[Edge, ...]:
    """The declared sources of ``path`` that do not exist: the command line and the agent's tool
    refuse to stamp it while any is left, since nothing can be re-derived from a file that does
    not exist, and stamping the edge as absent would lose the hint of where its content went."""
    return tuple(edge for edge in report.edges if edge.derived == path and edge.status is EdgeStatus.MISSING)


def refusal_text(path: str, missing: tuple[Edge, ...], again: str) -> str:
    """Why nothing was recorded for ``path``: its ``missing_sources``, each with its rename
    hint, and what to do (``again``: how to record it once the entries are fixed)."""
    names = ", ".join(
        named(edge.source)
        + ("" if edge.moved_to is None else f" ({moved_text(edge.moved_to)}: fix the entry to that name)")
        for edge in missing
    )
    return clip(
        f"Nothing recorded for {named(path)}: it names sources that do not exist: {names}. Remove each such entry "
        f"from its derived_from, or fix it to the file's current name, then {again}.",
        LINEAGE_MAX_CHARS,
    )


def recorded_text(path: str, report: Report) -> str:
    """What an agent's record tool answers once ``path`` is stamped, from the stamp's ``report``."""
    count = sum(1 for edge in report.edges if edge.derived == path)
    sources = "its source as it is" if count == 1 else f"its {count} sources as they are"
    sources = sources if count else "the name, description and type of each file it lists, as they are"
    entry = report.entry(path)
    if entry is None:
        return f"Recorded: {named(path)} is now derived from {sources} now."
    return (
        f"Recorded for {named(path)}, but it stays marked because a file it is derived "
        f"from is itself stale ({causes_text(entry)}); re-derive that file first and record it too."
    )


NOTHING_STALE = "No derived memory file has changed sources."


def stale_note(entry: StaleEntry, mark: str = "Note:") -> str:
    """The line that marks a stale file in an agent's answer (``- `` opens a line of a page)."""
    return clip(f"{mark} {safe_name(entry.path)}: {stale_phrase(entry)}: {causes_text(entry)}")


def stale_page(stale: tuple[StaleEntry, ...], offset: int, *, max_lines: int, list_tool: str, advice: str) -> str:
    """One page of the ``stale`` files, from ``offset``: at most ``max_lines`` files and
    ``LINEAGE_MAX_CHARS`` characters, then where the next page starts (``list_tool``'s offset)."""
    if not stale:
        return NOTHING_STALE
    files = "1 derived memory file has" if len(stale) == 1 else f"{len(stale)} derived memory files have"
    head = f"{files} changed sources (a source changed after they were written)."
    return page(stale, partial(stale_note, mark="-"), offset, max_lines, head, clip(advice), list_tool)


def page(
    items: Sequence[_Item], line: Callable[[_Item], str], offset: int, max_lines: int, head: str, tail: str, tool: str
) -> str:
    """``head``, the ``line`` of each of ``items`` from ``offset`` (``max_lines`` at most, the
    answer ``LINEAGE_MAX_CHARS`` characters at most), where the next page starts (``tool``'s
    offset), then ``tail``."""
    total = len(items)
    start = min(max(0, offset), total)
    budget = LINEAGE_MAX_CHARS - len(head) - len(tail) - 2 - MORE_RESERVE
    lines = [line(item) for item in items[start : start + max(1, max_lines)]]
    shown = fit_lines(lines, max(1, max_lines), budget)
    end = start + len(shown)
    if end < total:
        where = f"Shown: {start + 1} to {end} of {total}; call `{tool}` with offset={end} for the next ones."
    elif shown:
        where = f"Shown: {start + 1} to {end} of {total}; that is all."
    else:
        where = f"Nothing past offset {start}: there are {total}; call `{tool}` with offset=0."
    return "\n".join([head, *shown, where, tail])


_ESCAPE = r"\\(?:\\|u([0-9a-fA-F]{4}))"


def unescaped(shown: str) -> str:
    """A name as ``safe_name`` showed it, back to the name itself: ``\\\\`` and ``\\uXXXX`` are undone,
    so that an agent may pass a name back as an answer showed it."""
    return re.sub(_ESCAPE, lambda match: chr(int(match[1], 16)) if match[1] else "\\", shown)


def one_line(error: Exception) -> str:
    """An error message as one safe line: a tool answer stays short and cannot inject anything."""
    return clip(safe_name(" ".join(str(error).split())), NAME_SHOWN) or type(error).__name__


def file_lineage(report: Report, explanation: Explanation, *, exists: bool) -> FileLineage:
    """The lineage of ``explanation.path`` in ``report``; ``exists`` comes from the folder,
    since a file that takes no part in any derivation is in no report."""
    descendants = derived_from(report, explanation.path, transitive=True)
    paths = {relative.path for relative in descendants}
    stale = {entry.path: entry for entry in report.stale if entry.path in paths}
    return FileLineage(explanation, descendants, stale, exists)


# -- the notes after a write: they go into the result of the write itself, while the sources
# are in mind (the prompt block comes only at the next model call).  Both agent integrations
# render through here; a write that touches no lineage gets no notes.

EDIT_NOTES_MAX_CHARS = 4000
"""Characters of the notes on one write at most, whatever the names and the folder's size."""
HEADING = "Memory lineage after this write (provgraph):"
_MORE_RESERVE = 120
_INDEX_NOTES = 5
"""Index problems noted after a write of the index at most."""
_SUGGESTION_LIMIT = 300
"""Characters of a suggested ``derived_from`` line at most (lines are clipped at 400)."""


@dataclass(frozen=True, slots=True)
class Advice:
    """How an integration tells the agent to act: AgentScope names its tools, the command line
    and Claude Code shell commands.  The notes and the lineage answer are the same otherwise.
    """

    record_file: Callable[[str], str]
    """The exact instruction for one file: "call `record_memory_rederivation` with `profile.md`"."""
    record_any: str
    """The instruction for any of several files: "call `record_memory_rederivation` with its path"."""
    list_all: Callable[[str], str]
    """How to see every file derived from a path: "call `memory_lineage` with `facts.md`"."""
    list_stale: str
    """How to list every stale file: "call `list_stale_derived_memories`"."""
    read_when: str = "before writing it, in this reply"
    """When the reads it names happened: AgentScope keeps a reply's, Claude Code a session's,
    each since the previous write."""
    print_index: str = "run `provgraph index` in the memory folder"
    """How to get the memory index as it should be: "call `print_memory_index`"."""


@dataclass(frozen=True, slots=True)
class EditContext:
    """One write of a memory file, as the integration saw it."""

    path: str
    """The file written, relative to the memory root (POSIX)."""
    reads: frozenset[str]
    """Memory files the agent read since its previous write in the same reply (or session), root-relative."""
    whole: bool = False
    """The write created the file or replaced all of it (a ``Write``, not an ``Edit``): only
    such a write can have been made from the files just read, so only it gets a suggestion."""
    known: frozenset[str] = frozenset()
    """Every memory file the agent read or wrote earlier in the reply (or session): a rewrite
    after the changed sources are all known to it may be their re-derivation."""


def edit_notes(
    report: Report, edit: EditContext, advice: Advice, *, max_lines: int = 20, max_chars: int = EDIT_NOTES_MAX_CHARS
) -> str:
    """The notes to append to the result of a write, or "" when nothing applies: the files
    now resting on the old content, a suggested ``derived_from`` line, the re-derivation hint.

    ``report`` must be taken after the write: it then holds the new declaration and marks
    what the write left resting on old content.
    """
    budget = max_chars - len(HEADING) - 1
    sections = []
    for lines in (
        _impact(report, edit.path, advice, max_lines, budget),
        _suggestion(report, edit, advice.read_when),
        _rederivation(report, edit, advice),
        _index_entry(report, edit.path, advice),
    ):
        lines = [clip(line) for line in lines]
        cost = sum(len(line) + 1 for line in lines)
        if lines and cost <= budget:
            sections += lines
            budget -= cost
    return "\n".join([HEADING, *sections]) if sections else ""


def _index_entry(report: Report, path: str, advice: Advice) -> list[str]:
    """What the write left wrong in the memory index about the file (no entry, or an outdated
    one), or, for a write of the index itself, its first problems."""
    found = [problem for problem in report.index_problems if problem.path == path or path == INDEX_NAME][:_INDEX_NOTES]
    lines = [f"- The memory index: {safe_name(p.path)}: {p.kind.value}: {safe_name(p.detail)}." for p in found]
    action = advice.print_index[:1].upper() + advice.print_index[1:]
    return [*lines, f"  {action} for the index as it should be, then write it."] if lines else []


def _impact(report: Report, path: str, advice: Advice, max_lines: int, budget: int) -> list[str]:
    """Derived files stale because of ``path``, each with the chain from it."""
    chains = _resting_on(report, path)
    if not chains:
        return []
    count = "1 memory file" if len(chains) == 1 else f"{len(chains)} memory files"
    verb = "rests" if len(chains) == 1 else "rest"
    head = f"- {count} derived from {safe_name(path)} now {verb} on its old content:"
    tail = f"  Update each from its sources; if one still holds as it is, {advice.record_any}."
    budget -= len(head) + len(tail) + 2 + _MORE_RESERVE
    shown: list[str] = []
    for derived, chain in chains[: max(0, max_lines)]:
        line = clip(f"  - {safe_name(derived)}" + (f", via {chain_text(chain)}" if len(chain) > 2 else ""))
        budget -= len(line) + 1
        if budget < 0:
            break
        shown.append(line)
    hidden = len(chains) - len(shown)
    more = [f"  - … and {hidden} more; to see them all, {advice.list_all(path)}."] if hidden else []
    return [head, *shown, *more, tail]


def _resting_on(report: Report, path: str) -> list[tuple[str, tuple[str, ...]]]:
    """(derived file, chain from ``path``) for each stale file with a cause that starts at
    ``path``, nearest first: the files to update before their own descendants."""
    found, stale = [], {entry.path: entry for entry in report.stale}
    for relative in derived_from(report, path, transitive=True):
        entry = stale.get(relative.path)
        chains = [cause.via for cause in from_origin(entry.causes, path)] if entry is not None else []
        if chains:
            found.append((relative.path, min(chains, key=len)))
    return sorted(found, key=lambda item: (len(item[1]), item[0]))


def _suggestion(report: Report, edit: EditContext, when: str) -> list[str]:
    """The ``derived_from`` line to add to a file written whole that declares none of the
    memory files read since the previous write.

    An edit of part of a file adds to it (a new fact, a correction): what was read
    before it is no source of the file, and a suggestion would invite false lineage.
    Neither the file itself nor a file derived from it can be a source of it.
    """
    if not edit.whole or edit.path == INDEX_NAME or not edit.path.endswith(".md"):
        return []
    pairs = zip(column(report.edges, "source"), column(report.edges, "derived"), strict=True)  # no edge made
    declared = sorted({source for source, derived in pairs if derived == edit.path})
    below = {relative.path for relative in derived_from(report, edit.path, transitive=True)}
    read = sorted(edit.reads - {edit.path, INDEX_NAME} - below)
    if not read or set(read) & set(declared):
        return []
    line = suggested_line(edit.path, [*declared, *read])
    if len(safe_name(line)) > _SUGGESTION_LIMIT:
        return []  # a line that cannot be shown whole is no exact suggestion; so many reads suggest no derivation
    names = ", ".join(safe_name(name) for name in read)
    if declared:
        situation = f"declares other sources, but not {names}, read {when}"
    else:
        situation = f"declares no sources, but you read {names} {when}"
    return [
        f"- {safe_name(edit.path)} {situation}. If it was written from them, put this line in its frontmatter "
        "(provgraph does not edit memory files):",
        f"  {safe_name(line)}",
    ]


def suggested_line(path: str, sources: Iterable[str]) -> str:
    """The frontmatter line that declares ``sources`` (root-relative) for the file at ``path``:
    each relative to the file's folder, or from the root (``/``) where it would climb out."""
    folder = posixpath.dirname(path)
    entries = []
    for source in sources:
        relative = posixpath.relpath(source, folder or ".")
        entries.append("/" + source if relative.startswith("../") else relative)
    return "derived_from: " + ", ".join(entries)


def _rederivation(report: Report, edit: EditContext, advice: Advice) -> list[str]:
    """The one call that records a re-derivation, when every changed source was read first."""
    entry = report.entry(edit.path)
    if entry is None:
        return []
    changed = sorted(
        edge.source for edge in report.edges if edge.derived == edit.path and edge.status is not EdgeStatus.CLEAN
    )
    if not changed or not set(changed) <= edit.reads | edit.known:
        return []
    names = ", ".join(safe_name(name) for name in changed)
    return [
        f"- You rewrote {safe_name(edit.path)} after reading what changed in its sources ({names}). "
        f"If it now reflects them, {advice.record_file(edit.path)} to record the re-derivation; "
        "until then it stays marked."
    ]
