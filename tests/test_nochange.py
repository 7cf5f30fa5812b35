"""The no-change rule's vocabulary (``provgraph.nochange``): what looking at a source found.

``Sight`` is written out rather than an ``enum.Enum`` (the command's quick answer would
pay for importing ``enum``); it must behave as the enum did wherever provgraph uses it.
"""

from __future__ import annotations

import copy
import pickle

import pytest

from provgraph.model import ProblemKind
from provgraph.nochange import Sight, Watched, decode_watched, encode_watched

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
