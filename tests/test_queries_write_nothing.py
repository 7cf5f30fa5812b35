"""Queries do not write: they answer from the report they are given; only refresh and stamp save."""

from __future__ import annotations

import pytest

from provgraph import Memory

QUERIES = {
    "explain": lambda memory, report: memory.explain("profile.md", report),
    "lineage": lambda memory, report: memory.lineage("facts.md", report),
    "graph": lambda memory, report: memory.graph(report),
    "sources_of": lambda memory, report: memory.sources_of("profile.md", report=report),
    "derived_from": lambda memory, report: memory.derived_from("facts.md", report=report, transitive=True),
    "stale_after_editing": lambda memory, report: memory.stale_after_editing("facts.md", report=report),
}


def _state(root) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in root.rglob("*") if path.is_file()}


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_queries_answer_from_the_report_they_are_given_and_write_nothing(memory, clock, query):
    memory.write("facts.md", "v1\n")
    memory.write("profile.md", derived_from="facts.md")
    api = Memory(memory.root)
    report = api.refresh(now=clock.now)
    memory.write("facts.md", "v2\n")  # a refresh now would see it and rewrite the state
    before = _state(memory.root)
    QUERIES[query](api, report)
    assert _state(memory.root) == before


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_a_query_without_a_report_is_refused(memory, query):
    with pytest.raises(TypeError):
        _without_report(query, Memory(memory.root))


def _without_report(query: str, memory: Memory) -> None:
    calls = {
        "explain": lambda: memory.explain("profile.md"),  # type: ignore[call-arg]
        "lineage": lambda: memory.lineage("facts.md"),  # type: ignore[call-arg]
        "graph": lambda: memory.graph(),  # type: ignore[call-arg]
        "sources_of": lambda: memory.sources_of("profile.md"),  # type: ignore[call-arg]
        "derived_from": lambda: memory.derived_from("facts.md"),  # type: ignore[call-arg]
        "stale_after_editing": lambda: memory.stale_after_editing("facts.md"),  # type: ignore[call-arg]
    }
    calls[query]()
