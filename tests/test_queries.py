"""Lineage queries: what a file comes from, what derives from it, what to re-check."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import networkx as nx
import pytest

from provgraph import Memory, NodeStatus

DAY = datetime(2026, 11, 10, 9, 0, tzinfo=UTC)


def _write(root: Path, name: str, body: str, sources: tuple[str, ...] = ()) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    front = f"derived_from: {', '.join(sources)}\n" if sources else ""
    path.write_text(f"---\nname: {name}\n{front}---\n{body}\n", encoding="utf-8")


@pytest.fixture
def lineage(tmp_path: Path) -> Memory:
    """facts, prefs -> profile -> digest <- project;  facts -> timeline"""
    _write(tmp_path, "facts.md", "Lyon")
    _write(tmp_path, "prefs.md", "tea")
    _write(tmp_path, "work/project.md", "sync CLI")
    _write(tmp_path, "profile.md", "profile", ("facts.md", "prefs.md"))
    _write(tmp_path, "digest.md", "digest", ("profile.md", "work/project.md"))
    _write(tmp_path, "timeline.md", "timeline", ("facts.md",))
    memory = Memory(tmp_path)
    memory.refresh(now=DAY)
    return memory


def test_direct_and_transitive_sources_with_chains(lineage: Memory) -> None:
    report = lineage.refresh(now=DAY)
    direct = lineage.sources_of("digest.md", report=report)
    assert [(r.path, r.chain) for r in direct] == [
        ("profile.md", ("profile.md", "digest.md")),
        ("work/project.md", ("work/project.md", "digest.md")),
    ]
    every = lineage.sources_of("digest.md", transitive=True, report=report)
    assert [r.path for r in every] == ["profile.md", "work/project.md", "facts.md", "prefs.md"]
    assert {r.path: r.chain for r in every}["facts.md"] == ("facts.md", "profile.md", "digest.md")
    assert {r.path: r.distance for r in every}["prefs.md"] == 2


def test_what_derives_from_a_file(lineage: Memory) -> None:
    report = lineage.refresh(now=DAY)
    assert [r.path for r in lineage.derived_from("facts.md", report=report)] == ["profile.md", "timeline.md"]
    every = lineage.derived_from("facts.md", transitive=True, report=report)
    assert [(r.path, r.chain) for r in every] == [
        ("profile.md", ("facts.md", "profile.md")),
        ("timeline.md", ("facts.md", "timeline.md")),
        ("digest.md", ("facts.md", "profile.md", "digest.md")),
    ]
    assert all(r.status is NodeStatus.FRESH for r in every)
    assert lineage.derived_from("digest.md", transitive=True, report=report) == ()


def test_stale_after_editing_names_only_the_edited_files_descendants(lineage: Memory) -> None:
    root = lineage.root
    (root / "facts.md").write_text("---\nname: facts\n---\nParis\n", encoding="utf-8")
    (root / "work/project.md").write_text("---\nname: project\n---\nnew project\n", encoding="utf-8")
    report = lineage.refresh(now=DAY + timedelta(days=1))
    assert {entry.path for entry in report.stale} == {"profile.md", "digest.md", "timeline.md"}
    after_prefs = lineage.stale_after_editing("prefs.md", report=report)
    assert [entry.path for entry in after_prefs] == ["digest.md", "profile.md"]
    after_project = lineage.stale_after_editing("work/project.md", report=report)
    assert [entry.path for entry in after_project] == ["digest.md"]
    assert lineage.stale_after_editing("timeline.md", report=report) == ()


def test_graph_is_a_networkx_digraph_with_statuses(lineage: Memory) -> None:
    (lineage.root / "prefs.md").write_text("coffee\n", encoding="utf-8")
    report = lineage.refresh(now=DAY + timedelta(days=2))
    graph = lineage.graph(report)
    assert isinstance(graph, nx.DiGraph)
    assert set(graph.edges) == {(e.source, e.derived) for e in report.edges}
    assert graph.nodes["prefs.md"]["changed"] is True
    assert graph.nodes["profile.md"]["status"] == "stale"
    assert graph.nodes["timeline.md"]["status"] == "fresh"
    assert graph.edges["prefs.md", "profile.md"]["status"] == "changed"
    assert graph.edges["prefs.md", "profile.md"]["since"] is not None
    assert graph.edges["facts.md", "profile.md"]["stamped_at"] == DAY.timestamp()
    assert nx.ancestors(graph, "digest.md") == {"profile.md", "facts.md", "prefs.md", "work/project.md"}


def test_queries_on_a_cycle_terminate(tmp_path: Path) -> None:
    _write(tmp_path, "a.md", "a", ("b.md",))
    _write(tmp_path, "b.md", "b", ("a.md",))
    memory = Memory(tmp_path)
    report = memory.refresh(now=DAY)
    assert [r.path for r in memory.derived_from("a.md", transitive=True, report=report)] == ["b.md"]
    assert [r.path for r in memory.sources_of("a.md", transitive=True, report=report)] == ["b.md"]
