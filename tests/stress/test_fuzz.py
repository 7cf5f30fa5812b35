"""Fuzzing: the frontmatter reader never raises on any bytes, entries never resolve out of
the root, and whole memory folders under random edits scan to the same result as a
replay that reads every file every time, reporting only real cycles."""

from __future__ import annotations

import posixpath
from datetime import timedelta
from pathlib import Path

import networkx as nx
from depth import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scratch import scratch_folder

from provgraph import Memory, NotDerived, ProblemKind, Report
from provgraph.declarations import FRONTMATTER_LIMIT, Declaration, read_declaration, resolve_entries

from .helpers import NOW, OldFiles, watchdog

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _assert_declaration(declaration: object) -> None:
    assert isinstance(declaration, Declaration)
    assert isinstance(declaration.entries, tuple) and all(isinstance(entry, str) for entry in declaration.entries)
    assert declaration.derived_at is None or isinstance(declaration.derived_at, str)
    for kind, detail in declaration.problems:
        assert isinstance(kind, ProblemKind) and isinstance(detail, str)
    broken = [kind for kind, _ in declaration.problems if kind != ProblemKind.BAD_ENTRY]
    assert not (declaration.entries and broken)  # a broken frontmatter declares nothing; a bad entry only itself


@settings(FUZZ, max_examples=examples(400))
@given(
    content=st.binary(max_size=3000),
    opening=st.sampled_from([b"", b"---\n", b"\xef\xbb\xbf---\r\n"]),
    cut=st.booleans(),
)
def test_any_bytes_give_a_declaration(content: bytes, opening: bytes, cut: bool) -> None:
    _assert_declaration(read_declaration(opening + content, cut))


_YAMLISH = st.sampled_from(
    [
        "a.md",
        "sub/b.md",
        "../up.md",
        "/rooted.md",
        "[Link](a.md)",
        "[L](<with space.md>)",
        "<a.md>",
        "https://x.y/z",
        "",
        " ",
        "~",
        "null",
        "yes",
        "12",
        "1e3",
        "2024-01-01",
        "&anchor a.md",
        "*anchor",
        "!!str a.md",
        "!!python/name:os.system",
        "'quoted'",
        '"double"',
        "'",
        '"',
        "[",
        "]",
        "{",
        "}",
        ",",
        ": ",
        " #comment",
        "#",
        "|",
        ">",
        "-",
        "- ",
        "? ",
        "\t",
        "\\",
        "%",
        "@",
        "`",
        "\u202e",
        "\x00",
        "\x85",
        "\u2028",
        "é",
        "---",
        "...",
        "a, b",
        "[a, [b]]",
        "{a: b}",
    ]
)
_VALUE = st.lists(_YAMLISH, max_size=6).map("".join)


def _block_list(items: list[str]) -> str:
    return "\n" + "".join(f"{indent}- {item}\n" for indent, item in items)


_DERIVED_FROM = st.one_of(
    _VALUE.map(lambda value: f"derived_from: {value}\n"),
    st.lists(_VALUE, max_size=5).map(lambda items: "derived_from: [" + ", ".join(items) + "]\n"),
    st.lists(st.tuples(st.sampled_from(["  ", "\t", "", "    "]), _VALUE), max_size=5).map(
        lambda items: "derived_from:" + _block_list(items)
    ),
)
_OTHER = st.one_of(
    _VALUE.map(lambda value: f"derived_at: {value}\n"),
    _VALUE.map(lambda value: f"description: {value}\n"),
    st.sampled_from(["name: x: y\n", "---\n", "\n", "  indented: 1\n", "anchor: &anchor [a.md]\n", "- stray\n"]),
)


@settings(FUZZ, max_examples=examples(400))
@given(
    lines=st.lists(st.one_of(_DERIVED_FROM, _OTHER), max_size=8),
    newline=st.sampled_from(["\n", "\r\n"]),
    closed=st.booleans(),
)
def test_weird_frontmatter_gives_a_declaration_and_entries_stay_in_the_root(
    lines: list[str], newline: str, closed: bool
) -> None:
    text = "---\n" + "".join(lines) + ("---\nbody\n" if closed else "")
    declaration = read_declaration(text.replace("\n", newline).encode("utf-8", "surrogatepass")[:FRONTMATTER_LIMIT])
    _assert_declaration(declaration)
    _assert_resolved("notes/file.md", declaration.entries)


def _assert_resolved(declaring: str, entries: tuple[str, ...]) -> None:
    sources, problems = resolve_entries(declaring, entries)
    for source in sources:
        assert source == posixpath.normpath(source) and not source.startswith("/")
        assert ".." not in source.split("/") and source not in ("", ".")
        assert "\x00" not in source and not (source == ".provgraph" or source.startswith(".provgraph/"))
    assert all(problem.path == declaring for problem in problems)
    assert list(sources) == sorted(set(sources))


@settings(FUZZ, max_examples=examples(400))
@given(
    declaring=st.sampled_from(["a.md", "sub/b.md", "sub/deeper/c.md"]),
    entries=st.lists(st.text(alphabet=st.sampled_from("ab./\\~:[]()<>#% \x00é"), max_size=12), max_size=6),
)
def test_entries_never_resolve_out_of_the_root(declaring: str, entries: list[str]) -> None:
    _assert_resolved(declaring, tuple(entries))


# -- whole folders under random edits -------------------------------------------------------------

POOL = ["a.md", "b.md", "sub/c.md", "notes.txt"]
BAD_ENTRIES = ["../../etc/passwd", "https://example.com/a.md", "", "sub/", "/..", "~/x.md"]


def _entry_for(declaring: str, source: str) -> str:
    """``source`` as ``declaring`` may write it: relative to its folder, or from the root."""
    return posixpath.relpath(source, posixpath.dirname(declaring) or ".")


_EDIT = st.one_of(
    st.tuples(
        st.just("declare"),
        st.sampled_from(POOL[:-1]),
        st.lists(st.sampled_from(POOL), max_size=4, unique=True),
        st.lists(st.sampled_from(BAD_ENTRIES), max_size=2),
        st.sampled_from([None, "2026-01-01", "2026-02-02"]),
        st.sampled_from(["block", "inline", "scalar"]),
    ),
    st.tuples(st.just("raw"), st.sampled_from(POOL), st.binary(max_size=200)),
    st.tuples(st.just("plain"), st.sampled_from(POOL), st.text(max_size=30)),
    st.tuples(st.just("delete"), st.sampled_from(POOL)),
    st.tuples(st.just("stamp"), st.sampled_from(POOL[:-1])),
    st.just(("nothing",)),
)


class _Folder:
    """The memory folder under test; every new content of a path is longer than all its
    previous ones, so that a rewrite is always visible in the file's metadata."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.longest: dict[str, int] = {}

    def put(self, path: str, content: bytes) -> None:
        length = max(len(content), self.longest.get(path, -1) + 1)
        content += b"\n" * (length - len(content))
        self.longest[path] = length
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)

    def remove(self, path: str) -> None:
        (self.root / path).unlink(missing_ok=True)


def _declaration(path: str, sources: list[str], bad: list[str], derived_at: str | None, form: str) -> bytes:
    entries = [_entry_for(path, source) for source in sources] + bad
    if form == "block" or any("," in entry or not entry for entry in entries):
        value = "".join(f'\n  - "{entry}"' for entry in entries)
    elif form == "inline":
        value = " [" + ", ".join(f'"{entry}"' for entry in entries) + "]"
    else:
        value = " " + ", ".join(entries)
    at = f"derived_at: {derived_at}\n" if derived_at else ""
    return f"---\nname: {path}\nderived_from:{value}\n{at}---\nbody of {path}\n".encode()


def _apply(folder: _Folder, edit: tuple) -> str | None:
    """Change the folder; returns the file to stamp, if the edit is a stamp."""
    kind = edit[0]
    if kind == "declare":
        _, path, sources, bad, derived_at, form = edit
        folder.put(path, _declaration(path, sources, bad, derived_at, form))
    elif kind == "raw":
        folder.put(edit[1], edit[2])
    elif kind == "plain":
        folder.put(edit[1], edit[2].encode("utf-8", "surrogatepass"))
    elif kind == "delete":
        folder.remove(edit[1])
    elif kind == "stamp":
        return edit[1]
    return None


def _run(memory: Memory, stamp: str | None, now: object) -> Report | str:
    try:
        return memory.stamp([stamp], now=now) if stamp else memory.refresh(now=now)  # type: ignore[arg-type]
    except NotDerived as error:
        return f"not derived: {error.paths}"


def _assert_real_cycles(report: Report) -> None:
    """Every reported cycle is a closed walk along declared edges, one per knot of files."""
    edges = {(edge.source, edge.derived) for edge in report.edges}
    graph = nx.DiGraph(list(edges))
    knots = [c for c in nx.strongly_connected_components(graph) if len(c) > 1 or graph.has_edge(*[min(c)] * 2)]
    assert len(report.cycles) == len(knots)
    for cycle in report.cycles:
        assert all((cycle[i], cycle[(i + 1) % len(cycle)]) in edges for i in range(len(cycle)))
        assert len(set(cycle)) == len(cycle)
        assert sum(1 for knot in knots if set(cycle) <= knot) == 1


@settings(FUZZ, max_examples=examples(200))
@given(edits=st.lists(_EDIT, min_size=1, max_size=14))
def test_random_edits_scan_like_a_replay_that_reads_everything(edits: list[tuple]) -> None:
    """Two states go through the same edits and scans: one uses the stat cache and the
    no-change fast path (file times reported as old, so both are used), the other reads
    every file on every scan.  Their reports must be identical at every step."""
    with scratch_folder() as temporary, watchdog(120):
        root = Path(temporary) / "memory"
        root.mkdir()
        folder = _Folder(root)
        cached = Memory(root, state=Path(temporary) / "cached.json", files=OldFiles(root))
        replay = Memory(root, state=Path(temporary) / "replay.json", files=OldFiles(root, trusts_stat=False))
        for step, edit in enumerate(edits):
            stamp = _apply(folder, edit)
            now = NOW + timedelta(hours=step)
            first, second = _run(cached, stamp, now), _run(replay, stamp, now)
            assert first == second, (step, edit)
            if isinstance(first, Report):
                _assert_real_cycles(first)
                again = cached.refresh(now=now)  # nothing changed: the fast path must agree
                assert again == first
