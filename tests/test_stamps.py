"""Adoption: the first time a derived file is seen, each declared source is stamped with
what it holds now (contract §2), and the file is fresh.

Every derived file of a first scan is adopted, so ``stamps.reconcile`` takes a shorter way
for a file it has no record of; the property below holds that way to the comparison every
other file goes through.
"""

from __future__ import annotations

import pytest
from depth import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from provgraph import stamps
from provgraph.model import EdgeStatus, HashRule, Snapshot, SourceState, Stamp

_NAMES = st.sampled_from([f"{name}.md" for name in "abcdefg"])
_STATES = st.one_of(
    st.builds(SourceState, st.sampled_from(["1" * 64, "2" * 64, "3" * 64]), st.sampled_from([None, 5.0, 50.0])),
    st.just(SourceState(None)),
)
NOW = 100.0


@st.composite
def first_scans(draw: st.DrawFn) -> Snapshot[object]:
    """A scan of a folder seen for the first time: derived files, their sources (some
    missing, some refused for now) and what each source holds."""
    declarations = draw(st.dictionaries(_NAMES, st.lists(_NAMES, min_size=1, max_size=4).map(tuple), max_size=5))
    named = sorted({source for sources in declarations.values() for source in sources})
    refused = {source for source in named if draw(st.integers(0, 9)) == 0}
    states = {source: draw(_STATES) for source in named if source not in refused}
    withheld = {path: tuple(s for s in sources if s in refused) for path, sources in declarations.items()}
    kept = {path: tuple(sorted({s for s in sources if s not in refused})) for path, sources in declarations.items()}
    return Snapshot(
        files=tuple(sorted(set(named) | set(declarations))),
        declarations={path: sources for path, sources in kept.items() if sources},
        derived_at={path: draw(st.sampled_from([None, "2026-11-10"])) for path in declarations},
        sources=states,
        problems=(),
        seen={},
        withheld={path: sources for path, sources in withheld.items() if sources},
        contents={"1" * 64: ("g.md",)},
    )


@settings(max_examples=examples(300), deadline=None)
@given(first_scans(), st.booleans())
@example(Snapshot(("a.md", "b.md"), {"a.md": ("b.md",)}, {"a.md": None}, {"b.md": SourceState(None)}, (), {}), False)
def test_a_file_seen_for_the_first_time_is_adopted_as_the_comparison_of_every_stamp_says(
    snapshot: Snapshot[object], restamped: bool
) -> None:
    restamp = frozenset(snapshot.declarations) if restamped else frozenset()
    adopted = stamps.reconcile({}, snapshot, NOW, restamp)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stamps, "_adopted", lambda *_: None)
        compared = stamps.reconcile({}, snapshot, NOW, restamp)
    assert adopted == compared
    assert list(adopted[0]) == sorted(adopted[0])
    assert all(list(derivation.stamps) == sorted(derivation.stamps) for derivation in adopted[0].values())


def test_a_first_scan_stamps_every_source_with_what_it_holds_and_leaves_the_file_fresh() -> None:
    snapshot = Snapshot(
        files=("a.md", "b.md", "c.md"),
        declarations={"c.md": ("a.md", "b.md")},
        derived_at={"c.md": "2026-11-10"},
        sources={"a.md": SourceState("1" * 64, 5.0), "b.md": SourceState("2" * 64, 50.0)},
        problems=(),
        seen={},
    )
    records, edges = stamps.reconcile({}, snapshot, NOW)
    expected = {
        "a.md": Stamp("1" * 64, NOW, None, HashRule.MEANING),
        "b.md": Stamp("2" * 64, NOW, None, HashRule.MEANING),
    }
    assert records["c.md"] == stamps.Derivation("2026-11-10", expected)
    assert [(edge.source, edge.derived, edge.status, edge.stamped_at, edge.since) for edge in edges] == [
        ("a.md", "c.md", EdgeStatus.CLEAN, NOW, None),
        ("b.md", "c.md", EdgeStatus.CLEAN, NOW, None),
    ]
