"""Every text a person or an agent reads: status text and JSON, the prompt block, ``why``
and lineage, and the dot, Mermaid and node-link JSON pictures.

Pure: data in, strings out.  Every file name shown goes through ``safe_name`` first, so a
name holding a newline, an escape sequence or ``</system-reminder>`` cannot break out.
"""

from __future__ import annotations

import shlex
import unicodedata
from collections.abc import Mapping
from typing import Any

import orjson

from .index import INDEX_HEADING, block_lines
from .lineage import nearest, node_statuses, to_networkx
from .model import (
    INDEX_KINDS,
    Cause,
    Edge,
    EdgeStatus,
    Explanation,
    FileLineage,
    NodeStatus,
    Problem,
    Relative,
    Report,
    StaleEntry,
    as_text,
    day,
    derived_count,
)

__all__ = [
    "LINEAGE_MAX_CHARS",
    "LIST_TOOL",
    "MORE_RESERVE",
    "NAME_SHOWN",
    "RECORD_TOOL",
    "causes_text",
    "chain_text",
    "clip",
    "day",
    "dot",
    "explanation_text",
    "fit_lines",
    "graph_json",
    "json_chain",
    "lineage_document",
    "lineage_text",
    "mermaid",
    "named",
    "prompt_block",
    "repair_order",
    "safe_name",
    "stale_phrase",
    "uninvolved_text",
    "status_json",
    "status_text",
]

PROMPT_HEADING = "## Derived memories with changed sources"
PROMPT_LINE_LIMIT = 400
"""Characters of one prompt line at most: with the line cap, a hard bound on the block."""
_CHAIN_LIMIT = 6
_CAUSE_LIMIT = 3
_SAFE_ASCII = frozenset(chr(code) for code in range(0x20, 0x7F)) - frozenset("<>\\")
"""Printable ASCII but the angle brackets of a tag and the backslash that starts an escape."""
_RECOMMENDED_SCRIPTS = (
    (0x00C0, 0x024F),  # Latin-1 letters, Latin Extended-A and -B
    (0x0300, 0x052F),  # combining marks, Greek, Cyrillic
    (0x0531, 0x05FF),  # Armenian, Hebrew
    (0x0600, 0x06FF),  # Arabic
    (0x0750, 0x07BF),  # Arabic Supplement, Thaana
    (0x08A0, 0x08FF),  # Arabic Extended-A
    (0x0900, 0x0DFF),  # Devanagari, Bengali, Gurmukhi, Gujarati, Oriya, Tamil, Telugu, Kannada, Malayalam, Sinhala
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x0F00, 0x11FF),  # Tibetan, Myanmar, Georgian, Hangul Jamo
    (0x1200, 0x139F),  # Ethiopic
    (0x1780, 0x17FF),  # Khmer
    (0x1E00, 0x1FFF),  # Latin Extended Additional, Greek Extended
    (0x3041, 0x30FF),  # Hiragana, Katakana
    (0x3105, 0x318F),  # Bopomofo, Hangul Compatibility Jamo
    (0x3400, 0x4DBF),  # CJK Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xAC00, 0xD7A3),  # Hangul Syllables
    (0x20000, 0x323AF),  # CJK Extensions B to H
)
"""Scripts recommended for identifiers (UAX #31, table 5); letters of others, such as
Canadian syllabics ``ᐸ`` and ``ᐳ`` that pass for angle brackets, are escaped."""
_BRACKET_LIKE = frozenset({"Ps", "Pe", "Pi", "Pf", "Sm", "Sk"})
"""Where every lookalike of an angle bracket that is not a letter lives (``‹``, ``〈``, ``＜``)."""


def _shown(char: str) -> bool:
    """Whether ``char`` may reach a terminal or a prompt as itself: printable, and no angle
    bracket in any guise (a dash, an accent, an emoji or a CJK name reads as itself)."""
    if char in _SAFE_ASCII:
        return True
    if char.isascii() or not char.isprintable():  # controls, separators, format characters, private use
        return False
    category = unicodedata.category(char)
    if category[0] in "LMN":
        return any(low <= ord(char) <= high for low, high in _RECOMMENDED_SCRIPTS)
    normal = unicodedata.normalize("NFKC", char)
    return category not in _BRACKET_LIKE and "<" not in normal and ">" not in normal


def safe_name(name: str) -> str:
    """``name`` with every character that could pass for markup, break a line or hide
    itself written as ``\\uXXXX`` (``\\UXXXXXXXX``, ``\\\\``), so it reads back exactly.
    What is shown is decided by a rule (``_shown``), not a list of examples."""
    if name.isascii() and name.isprintable() and "<" not in name and ">" not in name and "\\" not in name:
        return name
    return "".join(char if _shown(char) else _escaped(char) for char in name)


def _escaped(char: str) -> str:
    if char == "\\":
        return "\\\\"
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def moved_text(moved_to: str | None) -> str:
    """The rename hint of a missing source, or "" when there is none."""
    return "" if moved_to is None else f"its stamped content is now at {safe_name(moved_to)}"


def hint_text(did_you_mean: str | None) -> str:
    """The typo hint of a missing source, or "" when there is none."""
    return "" if did_you_mean is None else f"did you mean {safe_name(did_you_mean)}?"


def _notes(moved_to: str | None, did_you_mean: str | None) -> list[str]:
    """The rename and typo hints of a missing source, those there are."""
    return [text for text in (moved_text(moved_to), hint_text(did_you_mean)) if text]


def _cut_chain(names: list[str]) -> list[str]:
    """A long chain keeps its first names and its last."""
    return names if len(names) <= _CHAIN_LIMIT else names[: _CHAIN_LIMIT - 2] + ["…"] + names[-1:]


def _cycle_text(cycle: tuple[str, ...]) -> str:
    return " -> ".join(safe_name(path) for path in (*cycle, cycle[0]))


def _cause_text(cause: Cause) -> str:
    notes = "; ".join(_notes(cause.moved_to, cause.did_you_mean))
    if len(cause.via) <= 2:
        return f"{safe_name(cause.source)} {cause.kind.value}" + (f" ({notes})" if notes else "")
    text = "via " + " <- ".join(_cut_chain([safe_name(name) for name in reversed(cause.via[:-1])]))
    if cause.kind is EdgeStatus.MISSING:
        text += f" (missing; {notes})" if notes else " (missing)"
    return text


def _cause_document(cause: Cause, *, whole_chain: bool = True) -> dict[str, Any]:
    """One cause as JSON: ``why`` spells out the whole chain; ``status`` gives the next hop
    and the chain's length, which keeps its output linear in the number of causes."""
    document: dict[str, Any] = {
        "source": cause.source,
        "kind": cause.kind.value,
        "changed_on": day(cause.since),
        "via": list(cause.via) if whole_chain else cause.hop,
    }
    if not whole_chain:
        document["depth"] = cause.depth
    if cause.moved_to is not None:
        document["moved_to"] = cause.moved_to
    if cause.did_you_mean is not None:
        document["did_you_mean"] = cause.did_you_mean
    return document


def causes_text(entry: StaleEntry) -> str:
    """The causes of one stale file in a few words each."""
    shown = [_cause_text(cause) for cause in entry.causes[:_CAUSE_LIMIT]]
    hidden = len(entry.causes) - len(shown)
    return "; ".join(shown) + (f"; and {hidden} more" if hidden else "")


def clip(line: str, limit: int = PROMPT_LINE_LIMIT) -> str:
    """``line`` cut to ``limit`` characters, ending in an ellipsis when cut: what keeps a block bounded."""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def prompt_block(
    report: Report,
    *,
    max_lines: int = 20,
    advice: str | None = None,
    more_hint: str | None = None,
    index_hint: str = "run `provgraph index` in the memory folder to print it as it should be, then write it",
) -> str:
    """The block appended to an agent's system prompt; empty when nothing is stale or wrong in an index.

    Files come in repair order, so the line cap cuts what derives from the files shown. ``advice`` is one
    more instruction line; ``more_hint`` says how to list the rest, ``index_hint`` how to print the index."""
    index = report.index_problems
    if not report.stale and not index:
        return ""
    lines = [PROMPT_HEADING if report.stale else INDEX_HEADING, "<system-reminder>"]
    if report.stale:
        lines += [
            "These memory files were written from other memory files that changed afterwards.",
            "Before relying on one, check it against its sources; update or delete it if it is wrong.",
        ]
        lines += [clip(safe_name(advice))] if advice else []
    shown = repair_order(report.stale)[: max(0, max_lines)]
    for entry in shown:
        line = f"- {safe_name(entry.path)}: source(s) changed since derived ({day(entry.since)}): {causes_text(entry)}"
        lines.append(clip(line))
    hidden = len(report.stale) - len(shown)
    if hidden:
        hint = more_hint or "run `provgraph status` in the memory folder to list them all"
        lines.append(clip(f"- … and {hidden} more stale derived files; {safe_name(hint)}."))
    lines += map(clip, block_lines(index, max(0, max_lines - len(shown)), safe_name(index_hint), safe_name))
    lines.append("</system-reminder>")
    return "\n".join(lines) + "\n"


def repair_order(stale: tuple[StaleEntry, ...]) -> tuple[StaleEntry, ...]:
    """Stale files in the order to repair them: nearest to a changed source first, then
    earliest change, then path, so the order never depends on the disk."""
    return tuple(sorted(stale, key=_repair_key))


def _repair_key(entry: StaleEntry) -> tuple[int, float, str]:
    distance = 1 if entry.direct else nearest(entry.causes)
    return distance, entry.since, entry.path


# -- status ------------------------------------------------------------------


def _counts(report: Report) -> dict[str, int]:
    return {
        "files": report.file_count,
        "derived": derived_count(report.edges),  # counted, not sorted
        "stale": len(report.stale),
        "cycles": len(report.cycles),
        "problems": len(report.problems),
    }


STATUS_SCHEMA = 2
"""A cause's ``via`` is its next hop upstream, with the chain's ``depth``."""


def status_document(report: Report) -> dict[str, Any]:
    """The ``status --json`` object (schema version ``STATUS_SCHEMA``)."""
    return {
        "version": STATUS_SCHEMA,
        "root": as_text(report.root),
        "scanned_at": report.scanned_at.isoformat(timespec="seconds"),
        "counts": _counts(report),
        "stale": [
            {
                "path": entry.path,
                "since": day(entry.since),
                "direct": entry.direct,
                "causes": [_cause_document(cause, whole_chain=False) for cause in entry.causes],
            }
            for entry in report.stale
        ],
        "cycles": [list(cycle) for cycle in report.cycles],
        "problems": [_problem_document(problem) for problem in report.problems],
        "hints": list(report.hints),
    }


def lineage_hints(forms: Mapping[str, int]) -> tuple[str, ...]:
    """One hint per form of lineage provgraph does not read, saying what would read it."""
    hints = []
    for form, count in sorted(forms.items()):
        files, one = _plural(count, "file"), count == 1
        if form.startswith("#"):
            option = "--sources-heading" if form == "## Sources" else f"--sources-heading={shlex.quote(form)}"
            hints.append(f'{files} list{"s" * one} sources under "{form}": run with {option} to read them')
            continue
        kind, read = ("field", "derived_from::") if form.endswith("::") else ("key", "derived_from:")
        verb = "has" if one else "have"
        hints.append(f"{files} {verb} a {form} {kind}; provgraph reads {read} (rename the {kind} to read them)")
    return tuple(hints)


def json_chain(document: dict[str, Any], path: str, cause: dict[str, Any]) -> list[str]:
    """The whole chain ``[origin, ..., path]`` of one cause of a ``status --json`` document:
    ``depth - 1`` times, the hop's own cause of the same origin gives the next hop."""
    entries = {entry["path"]: entry for entry in document["stale"]}
    chain = [path]
    for _ in range(cause["depth"] - 1):
        chain.append(cause["via"])
        same = (cause["source"], cause["kind"])
        cause = next(c for c in entries[cause["via"]]["causes"] if (c["source"], c["kind"]) == same)
    chain.append(cause["source"])
    return chain[::-1]


def _problem_document(problem: Problem) -> dict[str, str]:
    return {"path": problem.path, "kind": problem.kind.value, "detail": problem.detail}


def status_json(report: Report) -> str:
    return orjson.dumps(status_document(report), option=orjson.OPT_INDENT_2).decode() + "\n"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def summary_line(report: Report) -> str:
    counts = _counts(report)
    return (
        f"{_plural(counts['files'], 'memory file')}, {counts['derived']} derived, {counts['stale']} stale, "
        f"{_plural(counts['cycles'], 'cycle')}, {_plural(counts['problems'], 'problem')}"
    )


_DECLARED = "Problems (declarations that could not be honoured):"
_INDEXED = "Index problems (`provgraph index` prints the index as it should be):"


def status_text(report: Report) -> str:
    """What ``provgraph status`` prints for people."""
    lines = [summary_line(report), ""]
    if report.stale:
        width = min(40, max(len(safe_name(entry.path)) for entry in report.stale))
        lines.append("Stale derived files (a source changed after they were written):")
        for entry in report.stale:
            lines.append(f"  {safe_name(entry.path):<{width}}  since {day(entry.since)}  {causes_text(entry)}")
    else:
        lines.append("Nothing is stale: every derived file's sources hold what they were derived from.")
    if report.cycles:
        lines += ["", "Cycles (files derived from each other):"]
        lines += ["  " + _cycle_text(cycle) for cycle in report.cycles]
    declared = tuple(problem for problem in report.problems if problem.kind not in INDEX_KINDS)
    for heading, problems in ((_DECLARED, declared), (_INDEXED, report.index_problems)):
        if problems:
            lines += ["", heading, *(f"  {safe_name(p.path)}: {p.kind.value}: {safe_name(p.detail)}" for p in problems)]
    if report.hints:
        lines += ["", *(f"hint: {hint}" for hint in report.hints)]
    return "\n".join(lines) + "\n"


# -- why ---------------------------------------------------------------------


def explanation_text(explanation: Explanation) -> str:
    """What ``provgraph why FILE`` prints."""
    name = safe_name(explanation.path)
    if explanation.status is None and explanation.problems:
        return f"{name}: its declaration could not be honoured:\n" + "\n".join(_problem_lines(explanation)) + "\n"
    if explanation.status is None:
        return uninvolved_text(explanation.path, exists=True) + "\n"
    lines = [f"{name}: {_headline(explanation)}"]
    if explanation.problems:
        lines += ["", "Problems in its declaration:", *_problem_lines(explanation)]
    if explanation.sources:
        lines += ["", "Derived from:"]
        for edge in explanation.sources:
            lines.append(f"  {safe_name(edge.source)}: {_edge_text(edge, edge.source in explanation.stale_sources)}")
    if explanation.stale:
        lines += ["", "Root causes:"]
        for cause in explanation.stale.causes:
            moved = moved_text(cause.moved_to)
            hint = f"; {moved} (renamed? then update derived_from)" if moved else ""
            hint += f"; {hint_text(cause.did_you_mean)}" if cause.did_you_mean else ""
            lines.append(f"  {safe_name(cause.source)} {cause.kind.value} on {day(cause.since)}{hint}")
            lines.append("    " + " -> ".join(safe_name(path) for path in cause.via))
    if explanation.derived_from_it:
        lines += ["", "Derived from it:"]
        lines += [f"  {safe_name(path)}" for path in explanation.derived_from_it]
    for cycle in explanation.in_cycles:
        lines += ["", "In a cycle: " + _cycle_text(cycle)]
    return "\n".join(lines) + "\n"


def _problem_lines(explanation: Explanation) -> list[str]:
    return [f"  {problem.kind.value}: {safe_name(problem.detail)}" for problem in explanation.problems]


def _edge_text(edge: Edge, source_is_stale: bool) -> str:
    stamped = "" if edge.stamped_at is None else f" (stamped {day(edge.stamped_at)})"
    if edge.status is EdgeStatus.CLEAN:
        return f"unchanged{stamped}" + ("; itself stale" if source_is_stale else "")
    notes = "".join(f"; {note}" for note in _notes(edge.moved_to, edge.did_you_mean))
    return f"{edge.status.value} since {day(edge.since or 0.0)}{stamped}{notes}"


_STATUS_PHRASES = {
    NodeStatus.FRESH: "fresh: every source holds what it was derived from",
    NodeStatus.SOURCE: "a source; it is not derived from other memory files",
    NodeStatus.MISSING: "missing: declared as a source but does not exist",
    NodeStatus.STALE: "stale",
}


def status_phrase(status: NodeStatus | None) -> str:
    """A file's status in words, for a file that is not stale (or whose causes are told apart)."""
    return _STATUS_PHRASES[status or NodeStatus.SOURCE]


def _headline(explanation: Explanation) -> str:
    stale = explanation.stale
    if stale is not None:
        how = "a source of its own changed" if stale.direct else "a file it is derived from is stale"
        return f"stale: {stale_phrase(stale)}; {how}"
    return status_phrase(explanation.status)


def explanation_document(explanation: Explanation) -> dict[str, Any]:
    stale = explanation.stale
    return {
        "version": 1,
        "path": explanation.path,
        "status": None if explanation.status is None else explanation.status.value,
        "since": None if stale is None else day(stale.since),
        "direct": None if stale is None else stale.direct,
        "sources": [
            {
                "source": edge.source,
                "status": edge.status.value,
                "since": None if edge.since is None else day(edge.since),
                "stamped_on": None if edge.stamped_at is None else day(edge.stamped_at),
                "source_stale": edge.source in explanation.stale_sources,
                **({"moved_to": edge.moved_to} if edge.moved_to is not None else {}),
                **({"did_you_mean": edge.did_you_mean} if edge.did_you_mean is not None else {}),
            }
            for edge in explanation.sources
        ],
        "problems": [_problem_document(problem) for problem in explanation.problems],
        "causes": [] if stale is None else [_cause_document(cause) for cause in stale.causes],
        "derived_from_it": list(explanation.derived_from_it),
        "cycles": [list(cycle) for cycle in explanation.in_cycles],
    }


# -- lineage -------------------------------------------------------------------

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
_TAIL_RESERVE = PROMPT_LINE_LIMIT + 1
"""Characters kept for the closing instruction, whatever its words."""


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


def lineage_text(
    found: FileLineage,
    *,
    max_lines: int = 20,
    max_chars: int = LINEAGE_MAX_CHARS,
    record: str = f"call `{RECORD_TOOL}` with its path",
    list_stale: str = f"call `{LIST_TOOL}`",
) -> str:
    """The file's status and sources, then what derives from it, stale first, bounded in
    lines and characters.  ``record`` and ``list_stale`` name the agent's tools or commands."""
    explanation = found.explanation
    if explanation.status is None:
        return uninvolved_text(explanation.path, found.exists)
    head = _head_lines(explanation)
    ordered = _stale_first(found.descendants)
    stale_count = sum(relative.status is NodeStatus.STALE for relative in ordered)
    if ordered:
        files = "1 memory file is" if len(ordered) == 1 else f"{len(ordered)} memory files are"
        head.append(f"{files} derived from it, directly or through others; {stale_count} stale:")
    else:
        head.append("No memory file is derived from it.")
    advice = f"After you update a stale file from its sources, or check that it still holds, {record}."
    tail = [clip(advice)] if stale_count or explanation.stale else []
    budget = max_chars - sum(len(line) + 1 for line in head) - _TAIL_RESERVE - MORE_RESERVE
    shown = fit_lines([_descendant_text(relative, found.stale) for relative in ordered], max_lines, budget)
    more = _more_text(ordered[len(shown) :], list_stale)
    return "\n".join(head + shown + more + tail)


def lineage_document(found: FileLineage) -> dict[str, Any]:
    """The same facts as data, unbounded: ``why --json``'s object, whether the file exists,
    and every derived file in the text's order with its status, day and chain."""
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


def uninvolved_text(path: str, exists: bool) -> str:
    """What ``why`` and ``lineage`` say of a file that is part of no lineage."""
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
        head.append(clip("In a cycle (files derived from each other): " + chain_text((*cycle, cycle[0]))))
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
    return clip(f"- {safe_name(relative.path)}: {status}; chain: {chain_text(relative.chain)}")


def chain_text(chain: tuple[str, ...]) -> str:
    """``a -> b -> c``, names escaped; a long chain keeps its first files and its last."""
    return " -> ".join(_cut_chain([safe_name(name) for name in chain]))


def _more_text(hidden: list[Relative], list_stale: str) -> list[str]:
    if not hidden:
        return []
    stale = sum(relative.status is NodeStatus.STALE for relative in hidden)
    if not stale:
        return [f"- … and {len(hidden)} more derived files, all fresh."]
    return [clip(f"- … and {len(hidden)} more derived files ({stale} stale); {list_stale} to list every stale file.")]


# -- graph exports -----------------------------------------------------------

STATUS_COLOURS = {
    NodeStatus.SOURCE: "#cfe2f3",
    NodeStatus.FRESH: "#d9ead3",
    NodeStatus.STALE: "#f4cccc",
    NodeStatus.MISSING: "#eeeeee",
}
"""Fill colour of each status, shared by every picture of the lineage so they all read alike."""
_BROKEN = "#cc0000"
"""Outline of a file in a cycle and line of a changed or missing edge."""


def _broken_label(edge: Edge) -> str:
    """``changed 2026-11-17``: what broke the edge and its originating change date."""
    return f"{edge.status.value} {day(edge.since)}" if edge.since is not None else edge.status.value


def graph_json(report: Report) -> str:
    """Node-link JSON that ``networkx.node_link_graph(data, edges="edges")`` loads."""
    import networkx as nx  # heavy: only for this export

    graph = to_networkx(report.edges, report.stale, report.cycles)
    for _, attributes in graph.nodes(data=True):
        if attributes["since"] is not None:
            attributes["since_day"] = day(attributes["since"])
    graph.graph.update(root=as_text(report.root), scanned_at=report.scanned_at.isoformat(timespec="seconds"))
    data = nx.node_link_data(graph, edges="edges")
    return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"


def _dot_quote(text: str) -> str:
    return '"' + safe_name(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def dot(report: Report) -> str:
    """Graphviz source: sources at the top, summaries of summaries below, status as colour."""
    statuses = node_statuses(report.edges, report.stale)
    in_cycle = {path for cycle in report.cycles for path in cycle}
    changed = {edge.source for edge in report.edges if edge.status is not EdgeStatus.CLEAN}
    lines = [
        "digraph provgraph {",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
    ]
    for path, status in statuses.items():
        attributes = [f'fillcolor="{STATUS_COLOURS[status]}"', f'status="{status.value}"']
        if status is NodeStatus.MISSING:
            attributes.append('style="rounded,filled,dashed"')
        if path in in_cycle:
            attributes += [f'color="{_BROKEN}"', "peripheries=2", 'in_cycle="true"']
        if path in changed:
            attributes += ["penwidth=2.5", 'changed="true"']
        lines.append(f"  {_dot_quote(path)} [{', '.join(attributes)}];")
    for edge in report.edges:
        broken = f' [color="{_BROKEN}", penwidth=2, fontcolor="{_BROKEN}", label="{_broken_label(edge)}"]'
        style = "" if edge.status is EdgeStatus.CLEAN else broken
        lines.append(f"  {_dot_quote(edge.source)} -> {_dot_quote(edge.derived)}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"


_MERMAID_ENTITIES = {"#": "#35;", '"': "#quot;", "&": "#38;", "%": "#37;", "`": "#96;"}
"""Characters a quoted Mermaid label cannot hold as they are (a quote would end it, ``%%{``
start a directive), as Mermaid entity codes; ``safe_name`` has escaped ``<``, ``>``, breaks."""


def _mermaid_label(text: str) -> str:
    return "".join(_MERMAID_ENTITIES.get(char, char) for char in safe_name(text))


def mermaid(report: Report) -> str:
    """A Mermaid flowchart, top to bottom: each node has the class of its status, plus
    ``changed`` and ``cycle``; ``linkStyle`` indices count links in the order written."""
    statuses = node_statuses(report.edges, report.stale)
    ids = {path: f"n{index}" for index, path in enumerate(statuses)}
    lines = ["flowchart TD"]
    lines += [f'  {ids[path]}["{_mermaid_label(path)}"]' for path in statuses]
    broken = []
    for index, edge in enumerate(report.edges):
        arrow = "-->" if edge.status is EdgeStatus.CLEAN else f'-->|"{_broken_label(edge)}"|'
        lines.append(f"  {ids[edge.source]} {arrow} {ids[edge.derived]}")
        if edge.status is not EdgeStatus.CLEAN:
            broken.append(str(index))
    for status, colour in STATUS_COLOURS.items():
        dashes = ",stroke-dasharray:4 3" if status is NodeStatus.MISSING else ""
        lines.append(f"  classDef {status.value} fill:{colour},stroke:#555{dashes}")
    lines.append("  classDef changed stroke:#222,stroke-width:3px")
    lines.append(f"  classDef cycle stroke:{_BROKEN},stroke-width:3px")
    lines += _mermaid_classes(report, statuses, ids)
    if broken:
        lines.append(f"  linkStyle {','.join(broken)} stroke:{_BROKEN},stroke-width:2px")
    return "\n".join(lines) + "\n"


def _mermaid_classes(report: Report, statuses: dict[str, NodeStatus], ids: dict[str, str]) -> list[str]:
    """``class n0,n2 stale`` lines: one class per statement, since Mermaid reads ``a,b`` as a single class name."""
    members: dict[str, set[str]] = {status.value: set() for status in NodeStatus}
    for path, status in statuses.items():
        members[status.value].add(path)
    members["changed"] = {edge.source for edge in report.edges if edge.status is not EdgeStatus.CLEAN}
    members["cycle"] = {path for cycle in report.cycles for path in cycle}
    return [
        f"  class {','.join(ids[path] for path in ids if path in paths)} {name}"
        for name, paths in members.items()
        if paths
    ]
