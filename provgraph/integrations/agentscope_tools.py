"""AgentScope: the three tools ``ProvenanceMiddleware`` gives the agent, and the words they answer in.

``record_memory_rederivation`` records that a file was re-derived,
``list_stale_derived_memories`` pages through the stale files and
``memory_lineage`` tells what derives from a file (the very answer of
``provgraph lineage``, built in ``provgraph.render``).  A tool answers in
words and never raises into the agent loop; every answer is bounded, and
every name it shows is accepted back.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import FunctionTool, ToolBase

from ..api import Memory, NotDerived
from ..clock import pinned_now as _now
from ..model import Edge, EdgeStatus, FileLineage, Report, StaleEntry
from ..paths import relative_to
from ..render import LINEAGE_MAX_CHARS, LIST_TOOL, RECORD_TOOL, causes_text, clip, lineage_text, safe_name
from ..render import MORE_RESERVE as _MORE_RESERVE
from ..render import NAME_SHOWN as _NAME_SHOWN
from ..render import fit_lines as _fit
from ..render import named as _named
from ..render import stale_phrase as _stale_phrase

__all__ = ["ADVICE", "LINEAGE_TOOL", "MORE_HINT", "ProvenanceTools", "relative_to", "tools_of", "unescaped"]

_T = TypeVar("_T")

LINEAGE_TOOL = "memory_lineage"

ADVICE = (
    f"After you update one of them from its sources, or check that it still holds, "
    f"call `{RECORD_TOOL}` with its path as listed here. "
    f"Before or after editing a memory file, `{LINEAGE_TOOL}` shows what derives from it."
)
MORE_HINT = f"call `{LIST_TOOL}` to list them all"
_NOTHING_STALE = "No derived memory file has changed sources."


class ProvenanceTools:
    """The tools of ``ProvenanceMiddleware``, which mixes them in and gives them its folder and its worker.

    Each tool is a method: AgentScope reads its docstring as the tool's
    description for the model.
    """

    memory_path: str
    max_lines: int

    if TYPE_CHECKING:

        async def refresh(self) -> Report: ...

        async def _in_worker(self, action: Callable[[Memory], _T]) -> _T: ...

    async def record_memory_rederivation(self, path: str) -> str:
        """Record that a derived memory file was just re-derived from its current sources.

        Call it after you updated a file listed under "Derived memories with
        changed sources" from its sources, or checked that it still holds;
        its marker then goes away. The file itself is not changed.

        Args:
            path (`str`):
                The file's path inside the memory folder, as listed (e.g. `profile.md`).
        """
        candidates = self._candidates(path)
        if not candidates:
            return (
                f"Nothing recorded: {_named(path)} is not a path inside the memory folder {_named(self.memory_path)}."
            )
        for relative in candidates:
            try:
                report, missing = await self._in_worker(partial(_record, path=relative))
            except NotDerived:
                continue
            except Exception as error:  # a tool answers in words; it never raises into the agent loop
                return f"Could not record the re-derivation of {_named(relative)}: {_one_line(error)}"
            return _missing_sources(relative, missing) if missing else _recorded(relative, report)
        return (
            f"Nothing recorded: {_named(candidates[0])} is not a derived memory file "
            "(it does not exist, or its frontmatter has no derived_from)."
        )

    async def memory_lineage(self, path: str) -> str:
        """Show what derives from a memory file and which of those are stale; call it before or after editing one.

        Answers with the file's own status (and its sources when it is
        derived from other memory files), then every file derived from it,
        directly or through others, with the chain and, for a stale one, the
        date its sources changed.  Nothing is changed.

        Args:
            path (`str`):
                The file's path inside the memory folder (e.g. `user-facts.md`), or its full path.
        """
        candidates = self._candidates(path)
        if not candidates:
            folder = _named(self.memory_path)
            return f"No lineage: {_named(path)} is not a path inside the memory folder {folder}."
        try:
            found = await self._in_worker(lambda memory: _look_up_first(memory, candidates))
        except Exception as error:  # a tool answers in words; it never raises into the agent loop
            return f"Could not check the lineage of {_named(candidates[0])}: {_one_line(error)}"
        return lineage_text(found, max_lines=self.max_lines)

    async def list_stale_derived_memories(self, offset: int = 0) -> str:
        """List the derived memory files whose sources changed since they were derived, with the cause, page by page.

        Args:
            offset (`int`):
                How many stale files to skip: 0 for the first page; each answer gives the offset of the next one.
        """
        try:
            report = await self.refresh()
        except Exception as error:  # a tool answers in words; it never raises into the agent loop
            return f"Could not check the memory folder: {_one_line(error)}"
        return _stale_page(report, offset, max_lines=max(self.max_lines, _PAGE_LINES))

    def _candidates(self, path: str) -> list[str]:
        """The memory-folder-relative paths the agent may mean, likeliest first.

        Names are shown escaped (``\\u003c`` for ``<``, ``\\\\`` for a backslash), and
        the agent passes them back as shown: the unescaped name comes first,
        then the text exactly as given.
        """
        relatives = (relative_to(self.memory_path, name) for name in (unescaped(path), path))
        return list(dict.fromkeys(relative for relative in relatives if relative is not None))


def tools_of(middleware: ProvenanceTools) -> tuple[ToolBase, ...]:
    allow = PermissionDecision(
        behavior=PermissionBehavior.ALLOW,
        message="provgraph only records stamps in its own state; memory files are not touched.",
    )
    # FunctionTool takes a function that returns text and wraps it in a ToolChunk; its type hint
    # names ToolChunk results only, hence the ignores.
    return (
        FunctionTool(middleware.record_memory_rederivation, name=RECORD_TOOL, permission=allow),  # type: ignore[arg-type]
        FunctionTool(
            middleware.list_stale_derived_memories,  # type: ignore[arg-type]
            name=LIST_TOOL,
            is_read_only=True,
            permission=allow,
        ),
        FunctionTool(middleware.memory_lineage, name=LINEAGE_TOOL, is_read_only=True, permission=allow),  # type: ignore[arg-type]
    )


# -- the lineage tool's answer -------------------------------------------------------


def _look_up_first(memory: Memory, candidates: list[str]) -> FileLineage:
    """The lineage of the first candidate that is a memory file or a declared source, else of the first."""
    report = memory.refresh(now=_now())
    found = [memory.lineage(path, report) for path in candidates]
    return next((one for one in found if one.exists), found[0])


def _recorded(path: str, report: Report) -> str:
    count = sum(1 for edge in report.edges if edge.derived == path)
    sources = "its source as it is" if count == 1 else f"its {count} sources as they are"
    entry = report.entry(path)
    if entry is None:
        return f"Recorded: {_named(path)} is now derived from {sources} now."
    return (
        f"Recorded for {_named(path)}, but it stays marked because a file it is derived "
        f"from is itself stale ({causes_text(entry)}); re-derive that file first and record it too."
    )


def _record(memory: Memory, path: str) -> tuple[Report, tuple[Edge, ...]]:
    """Stamp ``path`` again, unless a source it names does not exist: the report and those sources.

    Nothing can be re-derived from a file that does not exist, and stamping
    it as absent would lose the hint of where its content went.
    """
    before = memory.refresh(now=_now())
    missing = tuple(edge for edge in before.edges if edge.derived == path and edge.status is EdgeStatus.MISSING)
    if missing:
        return before, missing
    return memory.stamp([path], now=_now()), ()


def _missing_sources(path: str, missing: tuple[Edge, ...]) -> str:
    """What the agent can do about a source that does not exist: nothing can be re-derived from it."""
    named = ", ".join(map(_missing_text, missing))
    return clip(
        f"Nothing recorded for {_named(path)}: it names sources that do not exist: "
        f"{named}. Remove each such entry from its derived_from, or fix it to the file's "
        f"current name, then call `{RECORD_TOOL}` again.",
        LINEAGE_MAX_CHARS,
    )


def _missing_text(edge: Edge) -> str:
    if edge.moved_to is None:
        return _named(edge.source)
    return f"{_named(edge.source)} (its stamped content is now at {_named(edge.moved_to)}: fix the entry to that name)"


_PAGE_LINES = 20
"""Stale files on a page of ``list_stale_derived_memories`` at least, when the block lists fewer."""

_ESCAPE = re.compile(r"\\(?:\\|u([0-9a-fA-F]{4}))")


def unescaped(shown: str) -> str:
    """A name as ``safe_name`` showed it, back to the name itself: ``\\\\`` and ``\\uXXXX`` are undone."""
    return _ESCAPE.sub(lambda match: chr(int(match[1], 16)) if match[1] else "\\", shown)


def _stale_page(report: Report, offset: int, *, max_lines: int, max_chars: int = LINEAGE_MAX_CHARS) -> str:
    """One page of the stale files, from ``offset``: at most ``max_lines`` files and ``max_chars`` characters."""
    total = len(report.stale)
    if not total:
        return _NOTHING_STALE
    start = min(max(0, offset), total)
    files = "1 derived memory file has" if total == 1 else f"{total} derived memory files have"
    head = [f"{files} changed sources (a source changed after they were written)."]
    tail = [clip(ADVICE)]
    budget = max_chars - sum(len(line) + 1 for line in head + tail) - _MORE_RESERVE
    lines = [_stale_line(entry) for entry in report.stale[start : start + max(1, max_lines)]]
    shown = _fit(lines, max(1, max_lines), budget)
    end = start + len(shown)
    if end < total:
        where = f"Shown: {start + 1} to {end} of {total}; call `{LIST_TOOL}` with offset={end} for the next ones."
    elif shown:
        where = f"Shown: {start + 1} to {end} of {total}; that is all."
    else:
        where = f"Nothing past offset {start}: there are {total}; call `{LIST_TOOL}` with offset=0."
    return "\n".join(head + shown + [where] + tail)


def _stale_line(entry: StaleEntry) -> str:
    return clip(f"- {safe_name(entry.path)}: {_stale_phrase(entry)}: {causes_text(entry)}")


def _one_line(error: Exception) -> str:
    """An error message as one safe line: a tool answer stays short and cannot inject anything."""
    return clip(safe_name(" ".join(str(error).split())), _NAME_SHOWN) or type(error).__name__
