"""Short answers about one file's lineage, for an agent's tool and for ``provgraph lineage``.

Pure: a ``FileLineage`` in, text or a JSON-ready dict out.  The text is what
an agent reads in a tool result, so it is bounded twice, in files listed
(``max_lines``) and in characters (``LINEAGE_MAX_CHARS``): a source with
thousands of derived files, or names thousands of characters long, still
gets a few lines the agent can act on.  The command line prints the very
same text, so a person sees what the agent saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .model import Edge, EdgeStatus, Explanation, FileLineage, NodeStatus, Relative, StaleEntry
from .render import causes_text, clip, day, explanation_document, safe_name, status_phrase

__all__ = [
    "LINEAGE_MAX_CHARS",
    "LIST_TOOL",
    "MORE_RESERVE",
    "NAME_SHOWN",
    "RECORD_TOOL",
    "fit_lines",
    "lineage_document",
    "lineage_text",
    "named",
    "stale_phrase",
]

RECORD_TOOL = "record_memory_rederivation"
"""The tool an agent calls to record a re-derivation; the answers name it."""
LIST_TOOL = "list_stale_derived_memories"
"""The tool that lists every stale file, page by page; a cut answer points to it."""
LINEAGE_MAX_CHARS = 4000
"""Characters of one lineage answer at most, whatever the names and the line cap."""
MORE_RESERVE = 200
"""Characters kept free for the closing lines of a bounded answer."""
NAME_SHOWN = 200
"""Characters of a name echoed in an answer at most: an answer never repeats a huge argument whole."""
_CHAIN_SHOWN = 6
_RECORD_ADVICE = (
    f"After you update a stale file from its sources, or check that it still holds, call `{RECORD_TOOL}` with its path."
)


def named(name: str) -> str:
    """A name as an answer shows it: escaped, and cut when it is huge."""
    return clip(safe_name(name), NAME_SHOWN)


def stale_phrase(entry: StaleEntry) -> str:
    return f"source(s) changed since derived ({day(entry.since)})"


def fit_lines(lines: list[str], max_lines: int, budget: int) -> list[str]:
    """The first lines that fit both caps: ``max_lines`` lines and ``budget`` characters, newlines included."""
    shown: list[str] = []
    for line in lines[: max(0, max_lines)]:
        budget -= len(line) + 1
        if budget < 0:
            break
        shown.append(line)
    return shown


def lineage_text(found: FileLineage, *, max_lines: int = 20, max_chars: int = LINEAGE_MAX_CHARS) -> str:
    """The file's status and sources, then what derives from it, stale first: a few lines the agent can act on."""
    explanation = found.explanation
    if explanation.status is None:
        return _uninvolved_text(explanation.path, found.exists)
    head = _head_lines(explanation)
    ordered = _stale_first(found.descendants)
    stale_count = sum(relative.status is NodeStatus.STALE for relative in ordered)
    if ordered:
        files = "1 memory file is" if len(ordered) == 1 else f"{len(ordered)} memory files are"
        head.append(f"{files} derived from it, directly or through others; {stale_count} stale:")
    else:
        head.append("No memory file is derived from it.")
    tail = [_RECORD_ADVICE] if stale_count or explanation.stale else []
    budget = max_chars - sum(len(line) + 1 for line in head + tail) - MORE_RESERVE
    shown = fit_lines([_descendant_text(relative, found.stale) for relative in ordered], max_lines, budget)
    more = _more_text(ordered[len(shown) :])
    return "\n".join(head + shown + more + tail)


def lineage_document(found: FileLineage) -> dict[str, Any]:
    """The same facts as data: ``why --json``'s object, whether the file exists, and every derived file.

    Unbounded: a program pages for itself.  Derived files come in the text's
    order, stale first, each with its status, the day its sources changed
    when stale, and its chain (upstream first).
    """
    return {
        **explanation_document(found.explanation),
        "exists": found.exists,
        "derived": [
            {
                "path": relative.path,
                "status": relative.status.value,
                "since": None if relative.path not in found.stale else day(found.stale[relative.path].since),
                "chain": list(relative.chain),
            }
            for relative in _stale_first(found.descendants)
        ],
    }


def _uninvolved_text(path: str, exists: bool) -> str:
    if not exists:
        return f"{named(path)} does not exist in the memory folder, and no memory file names it as a source."
    return (
        f"{named(path)} takes no part in any derivation: it declares no sources and no memory file is derived from it."
    )


def _head_lines(explanation: Explanation) -> list[str]:
    head = [clip(f"{safe_name(explanation.path)}: {_own_status(explanation)}")]
    if explanation.sources:
        head.append(clip("Sources: " + ", ".join(_source_text(explanation, edge) for edge in explanation.sources)))
    if explanation.in_cycles:
        cycle = explanation.in_cycles[0]
        head.append(clip("In a cycle (files derived from each other): " + _chain_text((*cycle, cycle[0]))))
    return head


def _stale_first(descendants: tuple[Relative, ...]) -> list[Relative]:
    return sorted(descendants, key=lambda relative: relative.status is not NodeStatus.STALE)


def _own_status(explanation: Explanation) -> str:
    if explanation.stale is not None:
        return f"stale: {stale_phrase(explanation.stale)}: {causes_text(explanation.stale)}"
    return status_phrase(explanation.status)


def _source_text(explanation: Explanation, edge: Edge) -> str:
    if edge.status is EdgeStatus.CLEAN:
        state = "unchanged, itself stale" if edge.source in explanation.stale_sources else "unchanged"
    else:
        state = f"{edge.status.value} since {day(edge.since or 0.0)}"
    return f"{safe_name(edge.source)} ({state})"


def _descendant_text(relative: Relative, stale: Mapping[str, StaleEntry]) -> str:
    entry = stale.get(relative.path)
    status = f"stale, {stale_phrase(entry)}" if entry is not None else relative.status.value
    return clip(f"- {safe_name(relative.path)}: {status}; chain: {_chain_text(relative.chain)}")


def _chain_text(chain: tuple[str, ...]) -> str:
    names = [safe_name(name) for name in chain]
    if len(names) > _CHAIN_SHOWN:
        names = names[: _CHAIN_SHOWN - 2] + ["…"] + names[-1:]
    return " -> ".join(names)


def _more_text(hidden: list[Relative]) -> list[str]:
    if not hidden:
        return []
    stale = sum(relative.status is NodeStatus.STALE for relative in hidden)
    if not stale:
        return [f"- … and {len(hidden)} more derived files, all fresh."]
    return [f"- … and {len(hidden)} more derived files ({stale} stale); call `{LIST_TOOL}` to list every stale file."]
