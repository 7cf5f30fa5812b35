"""The no-change rule's vocabulary (``provgraph.nochange``): what looking at a source found.

``Sight`` is written out rather than an ``enum.Enum`` (the command's quick answer would
pay for importing ``enum``); it must behave as the enum did wherever provgraph uses it.
"""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provgraph.model import ProblemKind
from provgraph.nochange import (
    RACY_WINDOW_NS,
    Conditions,
    InOrder,
    LockSeal,
    Look,
    Sight,
    Watched,
    decode_watched,
    encode_watched,
    holds,
    holds_in_order,
    listing_key,
)

MEMBERS = {"FILE": "file", "MISSING": "missing", "OUTSIDE_ROOT": "outside-root", "NOT_REGULAR": "bad-entry"}


@pytest.mark.parametrize(("name", "value"), sorted(MEMBERS.items()))
def test_a_sight_is_found_by_its_value_and_is_that_very_member(name: str, value: str) -> None:
    member = getattr(Sight, name)
    assert Sight(value) is member
    assert (member.name, member.value, repr(member)) == (name, value, f"Sight.{name}")
    assert copy.deepcopy(member) is member and pickle.loads(pickle.dumps(member)) is member
    assert len({Sight.FILE, Sight.MISSING, Sight.OUTSIDE_ROOT, Sight.NOT_REGULAR, member}) == len(MEMBERS)


def test_the_refusals_are_the_problem_kinds_a_scan_reports() -> None:
    assert Sight.OUTSIDE_ROOT.value == ProblemKind.OUTSIDE_ROOT.value
    assert Sight.NOT_REGULAR.value == ProblemKind.BAD_ENTRY.value


@pytest.mark.parametrize("value", ["FILE", "unreadable", "", "file "])
def test_a_value_of_no_sight_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="is not a valid Sight"):
        Sight(value)


def test_a_sight_cannot_be_changed() -> None:
    with pytest.raises(AttributeError):
        Sight.FILE.value = "missing"  # type: ignore[misc]
    assert Sight("file") is Sight.FILE and Sight.FILE.value == "file"


def test_watched_sources_read_back_as_the_cache_writes_them() -> None:
    watched = (
        Watched("data.txt", Sight.FILE, (12, 1_700_000_000_000_000_000, 1_700_000_000_000_000_001, 42)),
        Watched("gone.md", Sight.MISSING),
        Watched("away.md", Sight.OUTSIDE_ROOT),
        Watched("folder", Sight.NOT_REGULAR),
    )
    rows = encode_watched(watched)
    assert rows[1:] == [["gone.md", None], ["away.md", "outside-root"], ["folder", "bad-entry"]]
    assert decode_watched(rows) == watched
    with pytest.raises(ValueError):
        decode_watched([["away.md", "elsewhere"]])


_NOW = 10 * RACY_WINDOW_NS
_TIMES = st.sampled_from([0, _NOW - RACY_WINDOW_NS - 1, _NOW - RACY_WINDOW_NS, _NOW + 5])
_METAS = st.tuples(st.integers(0, 3), _TIMES, _TIMES, st.integers(0, 3))
_LISTINGS = st.dictionaries(st.sampled_from(["a.md", "b.md", "n/c.md", "n/d.md"]), _METAS, max_size=4)
_ROWS = st.lists(st.sampled_from([("n", "unreadable", "denied"), ("x.md", "outside-root", "link")]), max_size=2)


@given(
    listing=_LISTINGS,
    recorded=_LISTINGS,
    rows=_ROWS.map(tuple),
    recorded_rows=_ROWS.map(tuple),
    lock_holds=st.booleans(),
    seen=st.sampled_from([None, Watched("s.txt", Sight.MISSING)]),
    settings=st.sampled_from(["[null]", '["## Sources"]']),
)
def test_the_quick_answers_first_look_applies_the_very_rule_a_refresh_applies(
    listing, recorded, rows, recorded_rows, lock_holds, seen, settings
) -> None:
    """The command's quick answer looks at a walk's paths and numbers in the walk's order,
    and the rule's cheapest part first; it must hold exactly when the refresh's rule holds.
    A file just written (a change run) is seen before the lock, a large one, is read."""
    seal = LockSeal((1, 2, 3, 4), "0" * 64, _NOW)
    watched = (Watched("s.txt", Sight.MISSING),)
    conditions = Conditions(seal, _NOW, tuple(recorded_rows), listing_key(recorded), watched, "[null]")
    paths = list(listing)
    numbers = [number for path in paths for number in listing[path]]
    looked: list[LockSeal | None] = []

    def lock(given_seal: LockSeal | None) -> bool:
        looked.append(given_seal)
        return lock_holds

    def sight(path: str) -> Watched | None:
        return seen

    in_order = holds_in_order(conditions, InOrder(paths, numbers, tuple(rows), settings), lock, sight)
    racy = any(max(meta[1], meta[2]) >= _NOW - RACY_WINDOW_NS for meta in listing.values())
    assert not (racy and looked)
    expected = holds(conditions, Look(listing, tuple(rows), settings), lock, sight)
    assert in_order == expected
    assert expected == (
        listing == recorded
        and not racy
        and tuple(rows) == tuple(recorded_rows)
        and settings == "[null]"
        and lock_holds
        and seen == watched[0]
    )
