"""The provgraph the benchmark times: a normal install of the checkout, as users have it.

An editable install runs the checkout through an import hook, and a checkout's
bytecode may be stale or missing; neither is what a user runs.  So the
benchmark builds a wheel of the checkout (a zip file, written here: no build
backend and no network needed), installs it with pip into a fresh virtual
environment and compiles its bytecode, then times that environment's
``provgraph`` console script.  The fresh environment reaches the
dependencies (networkx, orjson, PyYAML) of the current one through a ``.pth``
line naming its site-packages folders; the ``.pth`` files inside those
folders are not run, so an editable install there stays out of the way.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import re
import site
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent.parent
PACKAGE = "provgraph"


@dataclass(frozen=True)
class Interpreter:
    """What a timed process runs: the Python, the ``provgraph`` command, their environment."""

    python: str
    provgraph: tuple[str, ...]
    env: dict[str, str]
    description: str


def in_place() -> Interpreter:
    """The checkout's code in place, run by the current interpreter (``python -m provgraph``)."""
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    command = (sys.executable, "-m", PACKAGE)
    return Interpreter(sys.executable, command, env, f"the checkout in place ({_origin(sys.executable, env)})")


def installed(base: Path) -> Interpreter:
    """A fresh virtual environment in ``base`` with the checkout installed from a wheel, compiled."""
    wheel = build_wheel(REPOSITORY, base / "wheel")
    environment = base / "venv"
    venv.create(environment, symlinks=os.name != "nt", with_pip=importlib.util.find_spec("pip") is None)
    python = environment / "bin" / "python"
    purelib = Path(_query(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
    (purelib / "_current_environment.pth").write_text("\n".join(_site_folders()) + "\n", encoding="utf-8")
    env = _clean_environment()
    # --ignore-installed: pip sees the current environment's provgraph through the .pth line,
    # and would call the wheel installed already
    pip = [str(python), "-m", "pip", "--isolated", "--disable-pip-version-check", "install", "--no-deps", "--no-index"]
    pip.append("--ignore-installed")
    subprocess.run([*pip, "--quiet", str(wheel)], check=True, env=env, capture_output=True)
    subprocess.run([str(python), "-m", "compileall", "-q", str(purelib / PACKAGE)], check=True, env=env)
    origin = _origin(str(python), env)
    if not Path(origin).is_relative_to(environment):
        raise RuntimeError(f"the benchmark environment imports provgraph from {origin}, not from its install")
    script = environment / "bin" / PACKAGE
    return Interpreter(str(python), (str(script),), env, f"a wheel of the checkout installed in {environment}")


def build_wheel(source: Path, folder: Path) -> Path:
    """A pure-Python wheel of the package in ``source``: its files, metadata and entry points,
    from which pip writes the ``provgraph`` command, as for the wheel setuptools builds."""
    configuration = tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8"))
    project = configuration["project"]
    name, version = project["name"], _version(source / PACKAGE / "model.py")
    info = f"{name}-{version}.dist-info"
    members = {
        path.relative_to(source).as_posix(): path.read_bytes()
        for path in sorted((source / PACKAGE).rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }
    metadata = [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"]
    metadata += [f"Requires-Dist: {requirement}\n" for requirement in project.get("dependencies", ())]
    members[f"{info}/METADATA"] = "".join(metadata).encode()
    members[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: tests.bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    scripts = [f"{script} = {target}\n" for script, target in project.get("scripts", {}).items()]
    members[f"{info}/entry_points.txt"] = "".join(["[console_scripts]\n", *scripts]).encode()
    members[f"{info}/RECORD"] = _record(members, f"{info}/RECORD")
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    return wheel


def _version(init: Path) -> str:
    """The package's version (``model.VERSION``), which the build reads too (``[tool.setuptools.dynamic]``)."""
    found = re.search(r'^VERSION = "([^"]+)"$', init.read_text(encoding="utf-8"), re.M)
    if found is None:
        raise RuntimeError(f"no __version__ in {init}")
    return found.group(1)


def _record(members: dict[str, bytes], record: str) -> bytes:
    lines = []
    for member, data in members.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{member},sha256={digest},{len(data)}\n")
    return ("".join(lines) + f"{record},,\n").encode()


def _site_folders() -> list[str]:
    """The folders the current interpreter finds its installed packages in."""
    folders = [*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return list(dict.fromkeys(folder for folder in folders if os.path.isdir(folder)))


_NOT_PASSED = ("PYTHONPATH", "PYTHONHOME", "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")
"""What would point the timed Python at the checkout, or away from the install's bytecode."""


def _clean_environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key not in _NOT_PASSED}


def _origin(python: str, env: dict[str, str]) -> str:
    return _query(Path(python), f"import {PACKAGE}; print({PACKAGE}.__file__)", env or None)


def _query(python: Path, code: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True, env=env, cwd="/")
    return done.stdout.strip()
