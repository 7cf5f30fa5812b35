"""Hostile frontmatter: huge, binary, invalid, unterminated, explosive YAML, wrong types,
tens of thousands of entries.  Each gives a problem or a plain result, never an
exception, never a hang, and only a bounded prefix of a file is ever read for it."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from provgraph import Memory, ProblemKind
from provgraph.declarations import FRONTMATTER_LIMIT, Declaration, read_declaration

from .helpers import NOW, CountingFiles, assert_clean, provgraph, watchdog, write

MB = 1024 * 1024


def _write_big(path: Path, head: bytes, filler: bytes, size: int) -> None:
    """``head`` then ``filler`` repeated up to ``size`` bytes, written a megabyte at a time."""
    chunk = filler * (MB // len(filler))
    with path.open("wb") as handle:
        handle.write(head)
        written = len(head)
        while written < size:
            handle.write(chunk)
            written += len(chunk)


def test_a_50_mb_frontmatter_that_never_closes_is_read_only_up_to_the_limit(root: Path, tmp_path: Path) -> None:
    _write_big(root / "huge.md", b"---\nderived_from: a.md\n", b"name: filler line\n", 50 * MB)
    write(root, "a.md", "a\n")
    files = CountingFiles(root)

    report = Memory(root, state=tmp_path / "state.json", files=files).refresh(now=NOW)

    assert files.bytes_read["huge.md"] <= FRONTMATTER_LIMIT + 1
    assert "huge.md" not in files.hashed
    problems = [p for p in report.problems if p.path == "huge.md"]
    assert [p.kind for p in problems] == [ProblemKind.BAD_FRONTMATTER]
    assert "KiB" in problems[0].detail
    assert report.derived == ()


def test_a_50_mb_source_is_hashed_without_being_held_in_memory(root: Path, tmp_path: Path) -> None:
    """A huge file can still be a source: it is hashed in chunks, never loaded whole."""
    _write_big(root / "huge.md", b"---\nname: never closed\n", b"x" * 64, 50 * MB)
    write(root, "digest.md", "---\nderived_from: huge.md\n---\n")
    memory = Memory(root, state=tmp_path / "state.json")

    tracemalloc.start()
    try:
        report = memory.refresh(now=NOW)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert [(edge.source, edge.status.value) for edge in report.edges] == [("huge.md", "clean")]
    assert peak < 16 * MB


LAUGHS = b"""---
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
derived_from: *i
---
"""

MERGES = (
    b"---\na0: &a0 {x0: 1}\n"
    + b"".join(b"a%d: &a%d {<<: [*a%d, *a%d], y%d: 1}\n" % (i, i, i - 1, i - 1, i) for i in range(1, 40))
    + b"derived_from: [*a39]\n---\n"
)

STRING_ALIASES = b'---\nx: &x "a.md"\nderived_from: [' + b", ".join([b"*x"] * 15_000) + b"]\n---\n"

NESTED_10000 = b"---\nderived_from: " + b"[" * 10_000 + b"]" * 10_000 + b"\n---\n"

MANY_DISTINCT = b"---\nderived_from: " + b",".join(b"%x" % i for i in range(10_000)) + b"\n---\n"

TOO_MANY = b"---\nderived_from: " + b", ".join(b"source-%d.md" % i for i in range(30_000)) + b"\n---\n"

DUPLICATES = b"---\nderived_from: " + b",".join([b"a"] * 30_000) + b"\n---\n"


HOSTILE = {
    "binary": (b"---\nderived_from: a.md\n\x00\x01\xff\xfe\x80\n---\n", ProblemKind.UNREADABLE),
    "invalid-utf8": (b"---\nderived_from: caf\xe9.md\n---\n", ProblemKind.UNREADABLE),
    "unterminated": (b"---\nderived_from: a.md\nname: x\n", ProblemKind.BAD_FRONTMATTER),
    "billion-laughs": (LAUGHS, ProblemKind.BAD_FRONTMATTER),
    "merge-bomb": (MERGES, ProblemKind.BAD_FRONTMATTER),
    "aliases-of-one-string": (STRING_ALIASES, ProblemKind.BAD_FRONTMATTER),
    "nested-list": (b"---\nderived_from: [[a.md, b.md], c.md]\n---\n", ProblemKind.BAD_FRONTMATTER),
    "block-nested": (b"---\nderived_from:\n  - a.md\n  - [b.md, [c.md]]\n---\n", ProblemKind.BAD_FRONTMATTER),
    "mapping": (b"---\nderived_from: {a.md: b.md}\n---\n", ProblemKind.BAD_FRONTMATTER),
    "number": (b"---\nderived_from: 12\n---\n", ProblemKind.BAD_FRONTMATTER),
    "boolean": (b"---\nderived_from: yes\n---\n", ProblemKind.BAD_FRONTMATTER),
    "null-item": (b"---\nderived_from: [a.md, null]\n---\n", ProblemKind.BAD_FRONTMATTER),
    "date-item": (b"---\nderived_from:\n  - 2024-01-01\n---\n", ProblemKind.BAD_FRONTMATTER),
    "too-many-entries": (TOO_MANY, ProblemKind.BAD_FRONTMATTER),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_frontmatter_is_a_problem_of_its_kind(name: str) -> None:
    content, kind = HOSTILE[name]
    with watchdog(30):
        declaration = read_declaration(content[:FRONTMATTER_LIMIT], len(content) > FRONTMATTER_LIMIT)
    assert declaration.entries == ()
    assert [problem_kind for problem_kind, _ in declaration.problems] == [kind]


@pytest.mark.parametrize(
    ("content", "entries"),
    [
        (DUPLICATES, {"a"}),
        (MANY_DISTINCT, {f"{i:x}" for i in range(10_000)}),
        (b"---\r\nderived_from: a.md, b.md\r\n---\r\n", {"a.md", "b.md"}),
        (b"\xef\xbb\xbf---\nderived_from:\n\t- a.md\n---\n", {"a.md"}),
    ],
    ids=["30000-duplicates", "10000-entries", "crlf", "bom-and-tab"],
)
def test_large_and_odd_but_valid_declarations_are_read(content: bytes, entries: set[str]) -> None:
    assert len(content) <= FRONTMATTER_LIMIT
    declaration = read_declaration(content)
    assert declaration.problems == ()
    assert set(declaration.entries) == entries


REFERENCES = {
    "merge-bomb": MERGES,
    "billion-laughs": LAUGHS,
    "alias": b'---\nx: &x "a.md"\nderived_from: [*x]\n---\n',
    "anchor-only": b"---\nderived_from: &list [a.md, 'b.md']\n---\n",
    "merge-key": b"---\nbase: {a: 1}\nderived_from: {<<: {a: 1}}\n---\n",
    "elsewhere": b"---\nname: &n x: y\nother: [*n]\nderived_from: ['a.md']\n---\n",
    "metadata-flow": b"---\nmetadata: {type: &t user, derived_from: [*t]}\n---\n",
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_yaml_anchors_aliases_and_merge_keys_never_reach_the_yaml_loader(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the PyYAML release (6.0.3 expands the merge bomb in exponential time),
    a frontmatter with references is never given to it to construct."""
    import yaml

    loaded: list[str] = []
    real_load = yaml.load

    def spy(stream: str, Loader: type) -> object:  # noqa: N803 - the PyYAML signature
        loaded.append(stream)
        return real_load(stream, Loader=Loader)

    monkeypatch.setattr(yaml, "load", spy)
    declaration = read_declaration(REFERENCES[name])
    assert not [text for text in loaded if "&" in text or "*" in text or "<<" in text]
    if name == "elsewhere":  # only derived_from matters: its own lines are still read
        assert declaration.entries == ("a.md",)
    else:
        assert declaration.entries == ()
        assert [kind for kind, _ in declaration.problems] == [ProblemKind.BAD_FRONTMATTER]


def test_yaml_tags_are_never_constructed(tmp_path: Path) -> None:
    """Frontmatter is read with a safe loader: a Python tag builds nothing and runs nothing."""
    target = tmp_path / "created-by-yaml"
    content = f'---\nname: x: y\nderived_from: !!python/object/apply:os.mkdir ["{target}"]\n---\n'.encode()
    declaration = read_declaration(content)
    assert isinstance(declaration, Declaration)
    assert not target.exists()


PATHOLOGICAL = {
    "quotes": b"---\nderived_from: a" + b"'" * 65_000 + b"\n---\n",
    "double-quotes": b"---\nname: a: b\nderived_from: a" + b'"' * 65_000 + b"\n---\n",
    "quotes-after-spaces": b"---\nderived_from: " + b" '" * 32_000 + b"\n---\n",
    "commas": b"---\nderived_from: " + b"," * 65_000 + b"\n---\n",
    "brackets": b"---\nderived_from: " + b"([<" * 21_000 + b"\n---\n",
    "links": b"---\nderived_from: " + b"[a](b " * 10_000 + b"\n---\n",
    "link-titles": b"---\nderived_from: [a](b" + b' "' * 32_000 + b"\n---\n",
    "hashes": b"---\nderived_from: a" + b" #'" * 21_000 + b"\n---\n",
    "blank-lines": b"---\n" + b"\n" * 65_000 + b"derived_from: a\n---\n",
    "block-items": b"---\nname: a: b\nderived_from:\n" + b"  - '\n" * 10_000 + b"---\n",
    "dashes": b"---\n" + b"-- \n" * 16_000 + b"derived_from: a\n",
}


def test_pathological_frontmatter_never_hangs() -> None:
    """Every 64 KiB input is read in one pass: a parser that rescans (quadratic) would take
    minutes over these inputs; one that reads once takes a fraction of a second."""
    with watchdog(30):
        for content in PATHOLOGICAL.values():
            declaration = read_declaration(content[:FRONTMATTER_LIMIT], len(content) > FRONTMATTER_LIMIT)
            assert all(isinstance(entry, str) for entry in declaration.entries)


def test_a_folder_of_hostile_frontmatter_gives_one_problem_per_file(root: Path) -> None:
    """The whole command line over all of the above: a clear problem per file, no traceback."""
    for name, (content, _) in HOSTILE.items():
        write(root, f"{name}.md", content)
    for name, content in PATHOLOGICAL.items():
        write(root, f"pathological/{name}.md", content)
    write(root, "nested-10000.md", NESTED_10000)
    write(root, "many.md", MANY_DISTINCT)
    write(root, "a.md", "a\n")

    done = provgraph("status", "--json", root)

    assert_clean(done, 0)
    status = json.loads(done.stdout)
    kinds = {}
    for problem in status["problems"]:
        kinds.setdefault(problem["path"], set()).add(problem["kind"])
    for name, (_, kind) in HOSTILE.items():
        assert kinds.get(f"{name}.md") == {kind.value}, name
    assert status["counts"]["files"] == len(HOSTILE) + len(PATHOLOGICAL) + 3
    (many,) = [entry for entry in status["stale"] if entry["path"] == "many.md"]
    assert len(many["causes"]) == 10_000
    assert {cause["kind"] for cause in many["causes"]} == {"missing"}
