"""Two clones of one git repository share their stamps through ``provgraph.lock``,
with the ``.gitattributes`` and ``.gitignore`` lines the README gives."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from provgraph.store.lock import decode_lock

README = Path(__file__).resolve().parent.parent / "README.md"
START = datetime(2026, 11, 10, 9, 0, tzinfo=UTC)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _block(language: str) -> str:
    """The README's one code block in ``language``: what users are told to write."""
    (block,) = re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    return block


def git(where: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


class Clone:
    """A clone of the shared repository, with its memory folder ``memory/``."""

    def __init__(self, path: Path, run) -> None:
        self.path, self.memory, self._run = path, path / "memory", run
        git(path, "config", "user.name", "Clone " + path.name)
        git(path, "config", "user.email", f"{path.name}@example.com")
        git(path, "config", "pull.rebase", "false")

    def provgraph(self, *args: str, now: datetime) -> str:
        code, out, err = self._run(*args, cwd=self.path, now=now)
        assert code == 0, (args, code, err)
        return out

    def status(self, now: datetime) -> dict:
        document = json.loads(self.provgraph("status", "--json", "memory", now=now))
        document.pop("root")
        return document

    def commit(self, message: str) -> None:
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "-m", message)

    def write(self, name: str, text: str) -> None:
        (self.memory / name).write_text(text, encoding="utf-8")

    def stamps(self) -> dict[tuple[str, str], float]:
        read = decode_lock((self.memory / "provgraph.lock").read_bytes())
        return {key: record.stamp.stamped_at for key, record in read.records.items()}


@pytest.fixture
def clones(tmp_path: Path, run) -> tuple[Clone, Clone]:
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    git(tmp_path, "clone", "-q", str(origin), "a")
    a = Clone(tmp_path / "a", run)
    (a.path / ".gitattributes").write_text(_block("gitattributes"), encoding="utf-8")
    (a.path / ".gitignore").write_text(_block("gitignore"), encoding="utf-8")
    a.memory.mkdir()
    a.write("MEMORY.md", "- [profile](profile.md)\n")
    a.write("facts.md", "The user lives in Lyon.\n")
    a.write("prefs.md", "Short answers.\n")
    a.write("profile.md", "---\nderived_from: facts.md, prefs.md\n---\nA profile.\n")
    a.write("digest.md", "---\nderived_from: profile.md\n---\nA digest.\n")
    a.write("summary.md", "---\nderived_from: facts.md\n---\nA summary.\n")
    a.provgraph("status", "memory", now=START)
    a.commit("memory and its lock")
    git(a.path, "push", "-q", "origin", "HEAD")
    git(tmp_path, "clone", "-q", str(origin), "b")
    return a, Clone(tmp_path / "b", run)


def _edit_and_share(editor: Clone, other: Clone, name: str, text: str, now: datetime) -> None:
    """``editor`` edits a source, looks (recording when the change was first seen), commits
    and pushes; ``other`` pulls."""
    editor.write(name, text)
    editor.provgraph("status", "memory", now=now)
    editor.commit(f"{name} changed")
    git(editor.path, "push", "-q")
    git(other.path, "pull", "-q")


def test_the_lock_is_committed_and_the_cache_is_not(clones) -> None:
    a, b = clones
    tracked = git(a.path, "ls-files").split()
    assert "memory/provgraph.lock" in tracked and not any(".provgraph/" in path for path in tracked)
    assert (b.memory / "provgraph.lock").is_file() and not (b.memory / ".provgraph").exists()


def test_a_clone_that_pulls_a_stamp_reports_what_the_stamping_clone_reports(clones) -> None:
    a, b = clones
    a.write("facts.md", "The user moved to Paris.\n")
    a.provgraph("status", "memory", now=START + timedelta(days=1))
    a.provgraph("stamp", "memory/profile.md", now=START + timedelta(days=2))
    a.commit("facts moved; profile re-derived")
    git(a.path, "push", "-q")

    git(b.path, "pull", "-q")
    later = START + timedelta(days=3)
    assert b.status(later) == a.status(later)
    assert [entry["path"] for entry in b.status(later)["stale"]] == ["summary.md"]
    assert git(b.path, "status", "--porcelain") == ""  # reading the lock does not rewrite it


def test_check_and_why_work_from_a_plain_clone(clones, run) -> None:
    """CI: a fresh clone holds the lock and no cache; ``check`` fails on what is stale and
    ``why`` finds the memory root by its lock."""
    a, b = clones
    a.write("facts.md", "The user moved to Paris.\n")
    a.provgraph("status", "memory", now=START + timedelta(days=1))
    a.commit("facts moved")
    git(a.path, "push", "-q")
    git(b.path, "pull", "-q")
    (b.memory / "MEMORY.md").unlink()

    code, out, _ = run("why", "memory/summary.md", cwd=b.path, now=START + timedelta(days=2))
    assert code == 0 and "facts.md changed on 2026-11-11" in out
    code, out, _ = run("check", "memory", cwd=b.path, now=START + timedelta(days=2))
    assert code == 1 and "summary.md" in out and "profile.md" in out


def test_stamps_of_different_files_on_two_clones_merge_without_conflict(clones) -> None:
    a, b = clones
    _edit_and_share(a, b, "facts.md", "The user moved to Paris.\n", START + timedelta(days=1))

    a.provgraph("stamp", "memory/profile.md", now=START + timedelta(days=2))
    a.commit("profile re-derived")
    git(a.path, "push", "-q")
    b.provgraph("stamp", "memory/summary.md", now=START + timedelta(days=3))
    b.commit("summary re-derived")
    git(b.path, "pull", "-q", "--no-edit")  # a merge: both changed the lock

    merged = (b.memory / "provgraph.lock").read_bytes()
    assert b"<<<<<<<" not in merged and b">>>>>>>" not in merged
    stamps = b.stamps()
    assert stamps[("profile.md", "facts.md")] == (START + timedelta(days=2)).timestamp()
    assert stamps[("summary.md", "facts.md")] == (START + timedelta(days=3)).timestamp()
    assert b.status(START + timedelta(days=4))["stale"] == []
    b.commit("lock after the merge")
    git(b.path, "push", "-q")
    git(a.path, "pull", "-q")
    assert a.status(START + timedelta(days=4)) == b.status(START + timedelta(days=4))


def test_a_source_edited_on_one_clone_has_the_same_originating_date_on_both(clones) -> None:
    a, b = clones
    _edit_and_share(b, a, "prefs.md", "Long answers, with sources.\n", START + timedelta(days=5))

    later = START + timedelta(days=9)
    here, there = a.status(later), b.status(later)
    assert here == there
    assert {entry["path"]: entry["since"] for entry in here["stale"]} == {
        "profile.md": "2026-11-15",
        "digest.md": "2026-11-15",
    }
