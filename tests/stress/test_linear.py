"""Memory goes with files, edges and causes, never with the length of chains.

Each cause keeps its next hop and shares the parent links of its origin's walk;
a chain is spelt out only for what is printed.  ``status --json`` (schema
version 2) gives each cause's next hop and depth, so its size is linear too.
Measured by peak allocation and output size at two sizes, never by time.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from provgraph import Memory, lineage
from provgraph.integrations import claude_code
from provgraph.lineage import propagate
from provgraph.model import Cause, Edge, EdgeStatus, Report
from provgraph.queries import EditContext
from provgraph.render import json_chain, prompt_block, status_document, status_json, status_text

NOW = datetime(2026, 11, 20, tzinfo=UTC)


def _chain(length: int) -> tuple[Edge, ...]:
    """f0 -> f1 -> ... -> f<length>, with the first edge changed: every file below is stale."""
    edges = [Edge("f0.md", "f1.md", EdgeStatus.CHANGED, 0.0, 1.0)]
    edges += [Edge(f"f{i}.md", f"f{i + 1}.md", EdgeStatus.CLEAN, 0.0, None) for i in range(1, length)]
    return tuple(edges)


def _many_missing(sources: int, below: int) -> tuple[Edge, ...]:
    """A file with ``sources`` missing sources and a chain of ``below`` files derived from it."""
    edges = [Edge(f"gone{i}.md", "d0.md", EdgeStatus.MISSING, 0.0, 1.0) for i in range(sources)]
    edges += [Edge(f"d{i}.md", f"d{i + 1}.md", EdgeStatus.CLEAN, 0.0, None) for i in range(below)]
    return tuple(edges)


def _peak(work: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        result = work()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result is not None
    return peak


def _report(edges: tuple[Edge, ...]) -> Report:
    return Report("/m", NOW, len(edges) + 1, edges, propagate(edges), (), ())


def test_propagation_memory_is_linear_in_the_length_of_a_chain() -> None:
    small, large = (_peak(lambda n=n: propagate(_chain(n))) for n in (2_000, 4_000))
    assert large < 2.5 * small, (small, large)  # the whole chain per file made it 4x


def test_status_json_is_linear_in_the_length_of_a_chain() -> None:
    small, large = (len(status_json(_report(_chain(n)))) for n in (2_000, 4_000))
    assert large < 2.2 * small, (small, large)


def test_status_json_of_a_deep_chain_gives_each_chain_back() -> None:
    document = status_document(_report(_chain(300)))
    (last,) = [entry for entry in document["stale"] if entry["path"] == "f300.md"]
    (cause,) = last["causes"]
    assert (cause["via"], cause["depth"]) == ("f299.md", 300)
    assert json_chain(document, "f300.md", cause) == [f"f{i}.md" for i in range(301)]


def test_a_file_with_many_missing_sources_costs_memory_per_cause_not_per_chain_step() -> None:
    small, large = (_peak(lambda n=n: propagate(_many_missing(300, n))) for n in (100, 200))
    assert large < 2.5 * small, (small, large)
    stale = propagate(_many_missing(300, 200))
    assert len(stale) == 201 and all(len(entry.causes) == 300 for entry in stale)
    (last,) = [entry for entry in stale if entry.path == "d200.md"]
    assert last.causes[0].via == ("gone0.md", *(f"d{i}.md" for i in range(201)))


def test_the_text_outputs_spell_out_only_what_they_print() -> None:
    report = _report(_chain(4_000))
    text = status_text(report)
    assert "f4000.md  since 1970-01-01  via f3999.md <- f3998.md <- f3997.md <- f3996.md <- … <- f0.md" in text
    block = prompt_block(report)
    assert len(block) < 12_000 and "- f1.md: source(s) changed since derived (1970-01-01): f0.md changed" in block


def _hub(root: Path, sources: int, below: int) -> Memory:
    """``hub.md`` derived from ``sources`` files since deleted, and ``below`` files derived from it."""
    names = [f"gone{i:04}.md" for i in range(sources)]
    for name in names:
        (root / name).write_text(name)
    (root / "hub.md").write_text(f"---\nderived_from: [{', '.join(names)}]\n---\nhub\n")
    for i in range(below):
        (root / f"d{i:04}.md").write_text("---\nderived_from: hub.md\n---\nd\n")
    memory = Memory(root)
    memory.refresh(now=NOW)
    for name in names:
        (root / name).unlink()
    return memory


def test_the_prompt_and_status_text_cost_what_they_show_not_sources_times_descendants(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = _hub(root, 300, 300)
    built: list[Cause] = []
    monkeypatch.setattr(lineage, "Cause", lambda *args, **fields: built.append(Cause(*args, **fields)) or built[-1])
    report = memory.refresh(now=NOW)
    block = prompt_block(report)
    text = status_text(report)
    hook = claude_code.session_start_output(report)
    notes = claude_code.post_tool_use_output(report, EditContext("gone0000.md", frozenset()))
    assert len(built) <= 4 * 301 + 200, len(built)  # three causes a line, one a note; 90,300 when made all
    assert len(report.stale) == 301 and all(len(entry.causes) == 300 for entry in report.stale)
    hub = "hub.md: source(s) changed since derived (2026-11-20): gone0000.md missing; gone0001.md missing; "
    assert f"- {hub}gone0002.md missing; and 297 more" in block.splitlines()
    via = "via hub.md <- gone0000.md (missing); via hub.md <- gone0001.md (missing); via hub.md <- gone0002.md"
    assert f"- d0000.md: source(s) changed since derived (2026-11-20): {via} (missing); and 297 more" in block
    assert f"  d0299.md  since 2026-11-20  {via} (missing); and 297 more" in text.splitlines()
    assert "- … and 281 more stale derived files" in block and hub in hook
    assert "d0000.md, via gone0000.md -> hub.md -> d0000.md" in notes
    document = status_document(report)  # lists every cause, as its schema says
    assert sum(len(entry["causes"]) for entry in document["stale"]) == 301 * 300
    (last,) = [entry for entry in document["stale"] if entry["path"] == "d0299.md"]
    assert last["causes"][299] == {
        "source": "gone0299.md",
        "kind": "missing",
        "changed_on": "2026-11-20",
        "via": "hub.md",
        "depth": 2,
    }
