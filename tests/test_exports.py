"""``provgraph graph --format json|dot|mermaid``: every file's status survives the export.

One memory folder holds every kind of node: sources, a changed source, a
deleted one, stale files one and two levels down, fresh derived files and two
files derived from each other.  Each export is read back (networkx for JSON, a
statement-by-statement reader for dot and Mermaid, pydot and Graphviz when they
are installed) and compared with what the folder means.  Hostile file names
(quotes, newlines, ``<``, ``>``, ``#``, brackets, directives) must not break out
of a statement.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta

import networkx as nx
import pytest

from provgraph import Edge, EdgeStatus, Report
from provgraph.cli import cli
from provgraph.lineage import find_cycles, propagate
from provgraph.render import dot, graph_json, mermaid, safe_name

STATUSES = {
    "facts.md": "source",
    "prefs.md": "source",
    "project.md": "source",
    "notes/old.md": "missing",
    "profile.md": "stale",
    "digest.md": "stale",
    "archive.md": "stale",
    "ideas/a.md": "fresh",
    "ideas/b.md": "fresh",
    "weekly.md": "fresh",
}
EDGES = {
    ("facts.md", "profile.md"): "changed",
    ("prefs.md", "profile.md"): "clean",
    ("profile.md", "digest.md"): "clean",
    ("project.md", "digest.md"): "clean",
    ("notes/old.md", "archive.md"): "missing",
    ("ideas/b.md", "ideas/a.md"): "clean",
    ("prefs.md", "ideas/a.md"): "clean",
    ("ideas/a.md", "ideas/b.md"): "clean",
    ("ideas/a.md", "weekly.md"): "clean",
}
CYCLE = {"ideas/a.md", "ideas/b.md"}
ORIGINS = {"facts.md", "notes/old.md"}
HOSTILE = (
    'say "hi".md',
    "two\nlines.md",
    "</system-reminder>.md",
    "a<b>c.md",
    "#35;hash#.md",
    "[link](x).md",
    "node]--> n0[pwned",
    "%%{init: {'theme': 'dark'}}%%.md",
    "`tick`",
    "semi;colon|pipe&amp;.md",
    "back\\slash\\u000a.md",
    "café ünïcode 📝.md",
    "rtl\u202eevil.md",
    'end"]\nclassDef x fill:red',
)


@pytest.fixture
def report(memory, clock) -> Report:
    """The folder described by STATUSES and EDGES, the scan after facts.md changed and notes/old.md went."""
    for source in ("facts.md", "prefs.md", "project.md", "notes/old.md"):
        memory.write(source, f"{source}\n")
    memory.write("profile.md", derived_from=["facts.md", "prefs.md"])
    memory.write("digest.md", derived_from=["profile.md", "project.md"])
    memory.write("archive.md", derived_from="notes/old.md")
    memory.write("ideas/a.md", derived_from=["b.md", "../prefs.md"])
    memory.write("ideas/b.md", derived_from=["a.md"])
    memory.write("weekly.md", derived_from="ideas/a.md")
    opened = memory.open()
    opened.refresh(now=clock.now)
    memory.write("facts.md", "facts changed\n", mtime=clock.advance(days=2))
    memory.path("notes/old.md").unlink()
    return opened.refresh(now=clock.advance(days=1))


def hostile_report() -> Report:
    """The hostile names in one chain of derivations, each derived from the next: a changed edge in the middle
    (stale above it, fresh below), the first file also derived from itself, and a missing source elsewhere."""
    names = HOSTILE
    edges = [Edge(names[i + 1], names[i], EdgeStatus.CLEAN, 1.0, None) for i in range(len(names) - 1)]
    edges[3] = Edge(names[4], names[3], EdgeStatus.CHANGED, 1.0, 2.0)
    edges.append(Edge(names[0], names[0], EdgeStatus.CLEAN, 1.0, None))
    edges.append(Edge("gone\n<b>.md", "orphan]\n.md", EdgeStatus.MISSING, 1.0, 3.0))
    ordered = tuple(sorted(edges, key=lambda edge: (edge.derived, edge.source)))
    return Report(
        root="/memory",
        scanned_at=datetime(2026, 11, 17, tzinfo=UTC),
        file_count=len(names) + 1,
        edges=ordered,
        stale=propagate(ordered),
        cycles=find_cycles(ordered),
        problems=(),
    )


def expected_statuses(report: Report) -> dict[str, str]:
    """What each node is, from the report itself: the contract the exports must carry."""
    stale = {entry.path for entry in report.stale}
    statuses = {edge.derived: "stale" if edge.derived in stale else "fresh" for edge in report.edges}
    for edge in report.edges:
        statuses.setdefault(edge.source, "missing" if edge.status is EdgeStatus.MISSING else "source")
    return statuses


# -- JSON -------------------------------------------------------------------


def test_json_export_loads_with_networkx_and_carries_each_status(report, capsys, monkeypatch, clock):
    monkeypatch.setenv("PROVGRAPH_NOW", clock.iso)
    assert cli("graph", report.root, "--format", "json") == 0
    graph = nx.node_link_graph(json.loads(capsys.readouterr().out), edges="edges")

    assert graph.is_directed()
    assert dict(graph.nodes(data="status")) == STATUSES
    assert {path for path, flag in graph.nodes(data="in_cycle") if flag} == CYCLE
    assert {path for path, flag in graph.nodes(data="changed") if flag} == ORIGINS
    assert {(source, derived): status for source, derived, status in graph.edges(data="status")} == EDGES


def test_json_export_dates_each_stale_file_and_broken_edge(report, clock):
    graph = nx.node_link_graph(json.loads(graph_json(report)), edges="edges")

    edited = (clock.now - timedelta(days=1)).date().isoformat()
    scanned = clock.day
    assert graph.nodes["profile.md"]["since_day"] == edited
    assert graph.nodes["digest.md"]["since_day"] == edited
    assert graph.nodes["archive.md"]["since_day"] == scanned
    assert "since_day" not in graph.nodes["weekly.md"]
    assert graph.graph["scanned_at"] == clock.now.isoformat(timespec="seconds")
    broken = {(source, derived) for source, derived, since in graph.edges(data="since") if since is not None}
    assert broken == {edge for edge, status in EDGES.items() if status != "clean"}


def test_json_export_round_trips_the_python_graph(report, memory):
    exported = nx.node_link_graph(json.loads(graph_json(report)), edges="edges")
    direct = memory.open().graph(report)

    assert set(exported.edges) == set(direct.edges)
    for path, attributes in direct.nodes(data=True):
        assert {key: exported.nodes[path][key] for key in attributes} == attributes
    for source, derived, attributes in direct.edges(data=True):
        assert exported.edges[source, derived] == attributes


def test_json_export_keeps_hostile_names_verbatim():
    report = hostile_report()
    graph = nx.node_link_graph(json.loads(graph_json(report)), edges="edges")

    assert dict(graph.nodes(data="status")) == expected_statuses(report)
    assert set(graph.edges) == {(edge.source, edge.derived) for edge in report.edges}


# -- dot --------------------------------------------------------------------

_DOT_STRING = r'"((?:[^"\\\n]|\\.)*)"'
_DOT_ATTRIBUTES = r"(?: \[(.*)\])?;"
_DOT_NODE = re.compile(rf"  {_DOT_STRING}{_DOT_ATTRIBUTES}")
_DOT_EDGE = re.compile(rf"  {_DOT_STRING} -> {_DOT_STRING}{_DOT_ATTRIBUTES}")
_DOT_ATTRIBUTE = re.compile(r'(\w+)=(?:"((?:[^"\\]|\\.)*)"|([^,\s]+))')


def _dot_unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def read_dot(text: str) -> tuple[dict[str, dict[str, str]], dict[tuple[str, str], dict[str, str]]]:
    """Nodes and edges with their attributes; fails on any line that is not one whole statement."""
    lines = text.splitlines()
    assert lines[0] == "digraph provgraph {" and lines[-1] == "}"
    nodes: dict[str, dict[str, str]] = {}
    edges: dict[tuple[str, str], dict[str, str]] = {}
    for line in lines[1:-1]:
        if line.startswith(("  rankdir=", "  node [", "  edge [")):
            continue
        if match := _DOT_EDGE.fullmatch(line):
            key = (_dot_unquote(match[1]), _dot_unquote(match[2]))
            assert key not in edges, f"edge declared twice: {key}"
            edges[key] = _dot_attributes(match[3])
        elif match := _DOT_NODE.fullmatch(line):
            name = _dot_unquote(match[1])
            assert name not in nodes, f"node declared twice: {name!r}"
            nodes[name] = _dot_attributes(match[2])
        else:
            raise AssertionError(f"not a dot statement: {line!r}")
    return nodes, edges


def _dot_attributes(text: str | None) -> dict[str, str]:
    return {key: quoted if bare == "" else bare for key, quoted, bare in _DOT_ATTRIBUTE.findall(text or "")}


def test_dot_declares_every_node_once_with_its_status(report):
    nodes, edges = read_dot(dot(report))

    assert {name: attributes["status"] for name, attributes in nodes.items()} == STATUSES
    assert {name for name, attributes in nodes.items() if attributes.get("in_cycle") == "true"} == CYCLE
    assert {name for name, attributes in nodes.items() if attributes.get("changed") == "true"} == ORIGINS
    fills = {(status, nodes[name]["fillcolor"]) for name, status in STATUSES.items()}
    assert len(fills) == len({fill for _, fill in fills}) == 4, "one fill colour per status, each its own"
    assert "dashed" in nodes["notes/old.md"]["style"] and "filled" in nodes["notes/old.md"]["style"]
    assert set(edges) == set(EDGES)


def test_dot_styles_and_dates_the_broken_edges(report, clock):
    _, edges = read_dot(dot(report))

    styled = {edge for edge, attributes in edges.items() if "color" in attributes}
    assert styled == {edge for edge, status in EDGES.items() if status != "clean"}
    edited = (clock.now - timedelta(days=1)).date().isoformat()
    assert edges[("facts.md", "profile.md")]["label"] == f"changed {edited}"
    assert edges[("notes/old.md", "archive.md")]["label"] == f"missing {clock.day}"


def test_dot_keeps_hostile_names_inside_their_quotes():
    report = hostile_report()
    nodes, edges = read_dot(dot(report))

    statuses = expected_statuses(report)
    assert {name: attributes["status"] for name, attributes in nodes.items()} == {
        safe_name(path): status for path, status in statuses.items()
    }
    assert set(edges) == {(safe_name(edge.source), safe_name(edge.derived)) for edge in report.edges}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pydot's grammar uses old pyparsing names
@pytest.mark.parametrize("which", ["folder", "hostile"])
def test_dot_parses_with_pydot(which, request):
    pydot = pytest.importorskip("pydot")
    report = request.getfixturevalue("report") if which == "folder" else hostile_report()
    (graph,) = pydot.graph_from_dot_data(dot(report))

    names = {node.get_name() for node in graph.get_nodes()} - {"node", "edge"}
    assert len(names) == len(expected_statuses(report))
    assert len(graph.get_edges()) == len(report.edges)


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
@pytest.mark.parametrize("which", ["folder", "hostile"])
def test_dot_renders_with_graphviz_without_a_warning(which, request):
    report = request.getfixturevalue("report") if which == "folder" else hostile_report()
    done = subprocess.run(["dot", "-Tsvg"], input=dot(report), capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.count('class="node"') == len(expected_statuses(report))


# -- Mermaid ----------------------------------------------------------------

_MERMAID_NODE = re.compile(r'  (n\d+)\["([^"\n]*)"\]')
_MERMAID_EDGE = re.compile(r'  (n\d+) -->(?:\|"([^"\n]*)"\|)? (n\d+)')
_MERMAID_CLASS_DEF = re.compile(r"  classDef (\w+) [\w#:,.%\- ]+")
_MERMAID_CLASS = re.compile(r"  class (n\d+(?:,n\d+)*) (\w+)")
_MERMAID_LINK_STYLE = re.compile(r"  linkStyle (\d+(?:,\d+)*) [\w#:,.\- ]+")
_MERMAID_ENTITIES = {"#35;": "#", "#quot;": '"', "#38;": "&", "#37;": "%", "#96;": "`", "#lt;": "<", "#gt;": ">"}


class Flowchart:
    """A Mermaid flowchart read back statement by statement; any other line fails the test."""

    def __init__(self, text: str) -> None:
        lines = text.splitlines()
        assert lines[0] == "flowchart TD"
        self.labels: dict[str, str] = {}
        self.links: list[tuple[str, str, str | None]] = []
        self.defined: set[str] = set()
        self.classes: dict[str, set[str]] = {}
        self.link_styles: list[int] = []
        for line in lines[1:]:
            self._read(line)

    def _read(self, line: str) -> None:
        if match := _MERMAID_NODE.fullmatch(line):
            assert match[1] not in self.labels, f"node declared twice: {line!r}"
            self.labels[match[1]] = _mermaid_decode(match[2])
        elif match := _MERMAID_EDGE.fullmatch(line):
            self.links.append((match[1], match[3], match[2]))
        elif match := _MERMAID_CLASS_DEF.fullmatch(line):
            self.defined.add(match[1])
        elif match := _MERMAID_CLASS.fullmatch(line):
            for node in match[1].split(","):
                self.classes.setdefault(node, set()).add(match[2])
        elif match := _MERMAID_LINK_STYLE.fullmatch(line):
            self.link_styles += [int(index) for index in match[1].split(",")]
        else:
            raise AssertionError(f"not a Mermaid statement: {line!r}")

    def by_name(self) -> dict[str, set[str]]:
        return {self.labels[node]: self.classes.get(node, set()) for node in self.labels}


def _mermaid_decode(label: str) -> str:
    assert "%%" not in label and "`" not in label and "<" not in label and ">" not in label
    return re.sub(r"#\w+;", lambda match: _MERMAID_ENTITIES.get(match[0], match[0]), label)


def test_mermaid_gives_each_node_the_class_of_its_status(report):
    chart = Flowchart(mermaid(report))
    classes = chart.by_name()

    statuses = set(STATUSES.values())
    assert {name: (found & statuses) for name, found in classes.items()} == {
        name: {status} for name, status in STATUSES.items()
    }
    assert {name for name, found in classes.items() if "cycle" in found} == CYCLE
    assert {name for name, found in classes.items() if "changed" in found} == ORIGINS
    assert set().union(*classes.values()) <= chart.defined


def test_mermaid_link_styles_point_at_the_broken_edges(report, clock):
    chart = Flowchart(mermaid(report))
    name = chart.labels

    links = [(name[source], name[derived]) for source, derived, _ in chart.links]
    assert set(links) == set(EDGES) and len(links) == len(EDGES)
    broken = [index for index, link in enumerate(links) if EDGES[link] != "clean"]
    assert sorted(chart.link_styles) == broken
    labels = {(name[source], name[derived]): label for source, derived, label in chart.links if label}
    edited = (clock.now - timedelta(days=1)).date().isoformat()
    assert labels == {
        ("facts.md", "profile.md"): f"changed {edited}",
        ("notes/old.md", "archive.md"): f"missing {clock.day}",
    }


def test_mermaid_keeps_hostile_names_inside_their_labels():
    report = hostile_report()
    chart = Flowchart(mermaid(report))

    statuses = expected_statuses(report)
    assert {label: found & set(statuses.values()) for label, found in chart.by_name().items()} == {
        safe_name(path): {status} for path, status in statuses.items()
    }
    assert {label for label, found in chart.by_name().items() if "cycle" in found} == {
        safe_name(path) for cycle in report.cycles for path in cycle
    }
    assert len(chart.links) == len(report.edges)
    assert len(chart.link_styles) == sum(edge.status is not EdgeStatus.CLEAN for edge in report.edges)
