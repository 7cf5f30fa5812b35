"""One rule for where a named file lands under the memory root, for the command line and the hooks."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pytest
from depth import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from provgraph.api import Memory, RootError
from provgraph.files import LocalFiles
from provgraph.integrations.claude_code import memory_path
from provgraph.paths import normalized, parts_under, relative_to


@pytest.fixture
def linked(tmp_path: Path) -> tuple[Path, Path]:
    """A memory root, and a symlinked folder through which it is seen too (as macOS's /tmp is /private/tmp)."""
    root = tmp_path / "real" / "Memory"
    (root / "notes").mkdir(parents=True)
    (root / "MEMORY.md").write_text("index\n")
    (root / "notes" / "facts.md").write_text("v1\n")
    (root / "profile.md").write_text("---\nderived_from: alias.md\n---\n")
    (root / "alias.md").symlink_to(root / "notes" / "facts.md")
    (tmp_path / "seen").symlink_to(tmp_path / "real")
    return root, tmp_path / "seen" / "Memory"


def test_a_file_named_through_a_symlinked_folder_is_the_file_under_the_root(linked) -> None:
    root, seen = linked

    assert parts_under(root, seen / "notes" / "facts.md") == ("notes", "facts.md")
    assert parts_under(seen, root / "notes" / "facts.md") == ("notes", "facts.md")
    assert memory_path(root, str(seen / "notes" / "facts.md")) == "notes/facts.md"
    assert parts_under(root, root.parent / "elsewhere.md") is None
    assert parts_under(root, root) is None


def test_a_symlinked_memory_file_keeps_its_own_name_everywhere(linked, run) -> None:
    root, seen = linked

    code, out, _ = run("lineage", "--json", "--root", root, seen / "alias.md", cwd=root.parent)

    assert memory_path(root, str(seen / "alias.md")) == "alias.md"
    assert code == 0
    assert json.loads(out)["derived_from_it"] == ["profile.md"]


def test_hidden_folders_are_never_memory_files_and_the_state_is_never_a_file_to_explain(linked, run) -> None:
    root, _ = linked
    (root / ".provgraph").mkdir(exist_ok=True)

    code, out, err = run("why", "--root", root, ".provgraph/state.json", cwd=root)

    assert memory_path(root, str(root / ".trash" / "old.md")) is None
    assert (code, out) == (2, "")
    assert err.startswith("provgraph: error: ") and "is not under the memory root" in err


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("profile.md", "profile.md"),
        ("/srv/agent/Memory/notes/facts.md", "notes/facts.md"),
        ("notes/../profile.md", "profile.md"),
        ("/etc/passwd", None),
        ("../outside.md", None),
        (".", None),
    ],
)
def test_a_sandbox_path_is_read_as_text_against_the_memory_folder(given: str, meant: str | None) -> None:
    assert relative_to("/srv/agent/Memory", given) == meant


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.sampled_from(["", ".", "..", "a", "b c", "~", "x.md"]), max_size=6), st.sampled_from(["", "/"]))
@example(["", "", "a"], "")  # a leading "//" is kept, as POSIX allows
@example(["", "", ""], "/")
def test_a_folder_is_spelt_as_pathlib_spells_it_without_pathlib(parts: list[str], trailing: str) -> None:
    text = "/".join(parts) + trailing
    assert normalized(text) == str(PurePosixPath(text))


def test_memory_gives_its_folders_as_paths_though_it_works_on_text(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "memory").mkdir()
    memory = Memory("~/memory//", state="kept//state/./")
    assert memory.root == tmp_path / "memory"
    assert memory.state_path == Path("kept/state") and memory.lock_path == Path("kept/state/provgraph.lock")
    default = Memory(tmp_path / "memory")
    assert default.state_path == tmp_path / "memory" / ".provgraph"
    assert default.lock_path == tmp_path / "memory" / "provgraph.lock"
    assert LocalFiles(f"{tmp_path}//memory/./").root == tmp_path / "memory"
    with pytest.raises(RootError) as missing:
        Memory(tmp_path / "elsewhere")
    assert missing.value.root == tmp_path / "elsewhere"
