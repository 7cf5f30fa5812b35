"""The command walks a changed folder once: its full run takes over the quick answer's walk.

The quick answer (``replay``) walks the folder to apply the no-change rule; when the rule
does not hold, the full run of the same command uses that walk instead of walking again.
A file written between that walk and the scan is read again by the next run: the scan
records the walk's beginning as its own, so its metadata then differs from the recorded one.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import provgraph.files
from provgraph import Memory
from provgraph.cli import cli
from provgraph.replay import answer
from provgraph.state import StateStore


def write(root: Path, path: str, text: str, seconds_ago: int) -> None:
    (root / path).write_text(text, encoding="utf-8")
    then = time.time_ns() - seconds_ago * 10**9
    os.utime(root / path, ns=(then, then))


def test_the_full_run_takes_over_the_quick_answers_walk_and_the_next_run_sees_a_later_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "fact.md", "The first fact.\n", 3600)
    write(tmp_path, "profile.md", "---\nderived_from: fact.md\n---\nA profile.\n", 3600)
    assert cli("status", "--json", str(tmp_path)) == 0
    write(tmp_path, "fact.md", "The fact, edited.\n", 60)
    before_the_walk = time.time_ns()
    assert answer(["status", "--json", str(tmp_path)]) is None  # a change: it walked, then gave up
    after_the_walk = time.time_ns()
    write(tmp_path, "fact.md", "The fact, edited again after the walk.\n", 30)
    walks = []
    real_walk = provgraph.files.walk_in_order
    monkeypatch.setattr(provgraph.files, "walk_in_order", lambda *args: walks.append(args) or real_walk(*args))
    capsys.readouterr()

    assert cli("status", "--json", str(tmp_path)) == 0
    assert '"stale": 1' in capsys.readouterr().out
    assert walks == []
    store = StateStore(tmp_path)
    with store.locked():
        assert before_the_walk <= store.load().scan_started_ns <= after_the_walk

    write(tmp_path, "fact.md", "The first fact.\n", 10)  # back to what the profile was derived from
    assert Memory(tmp_path).refresh().stale == ()
    assert len(walks) == 1
