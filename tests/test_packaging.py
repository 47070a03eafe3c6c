"""Packaging: the grammar and the rule sets ship inside the package, byte-identical to
the repository's only copies (grammar/, rulesets/), and a built wheel contains them
and every module of the package."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[1]
# What setuptools ships from rulesets/ (pyproject.toml's package-data).
RULESET_PATTERNS = ("*.bbr", "*.md")


def _repo_rulesets(root: Path = REPO) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for pattern in RULESET_PATTERNS
            for p in (root / "rulesets").glob(pattern)}


def test_installed_grammar_is_the_repository_grammar():
    installed = resources.files("blockbuster.grammar") / "bbr.lark"
    assert installed.read_bytes() == (REPO / "grammar" / "bbr.lark").read_bytes()


def test_installed_rulesets_are_the_repository_rulesets():
    installed = {f.name: f.read_bytes() for f in resources.files("blockbuster.rulesets").iterdir()
                 if f.is_file() and not f.name.endswith((".py", ".pyc"))}
    repo = _repo_rulesets()
    assert installed == repo


def test_grammar_loader_reads_the_shipped_grammar():
    from blockbuster.ir.grammar import grammar_text
    assert grammar_text() == (REPO / "grammar" / "bbr.lark").read_text()


def _can_build_without_isolation() -> bool:
    """setuptools new enough for pyproject.toml, with bdist_wheel built in (70.1+) or
    from the wheel package; otherwise pip must fetch a build environment."""
    import setuptools
    version = tuple(int(x) for x in setuptools.__version__.split(".")[:2])
    has_bdist_wheel = version >= (70, 1) or importlib.util.find_spec("wheel") is not None
    return version >= (68, 0) and has_bdist_wheel


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Iterator[tuple[zipfile.ZipFile, Path]]:
    """The wheel and the snapshot of the repository it was built from.

    Built from a copy so the build never writes build/ or *.egg-info into the
    working tree, and compared with that copy so an edit made meanwhile is no race."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in ("blockbuster", "grammar", "rulesets"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)]
    if _can_build_without_isolation():
        cmd.insert(4, "--no-build-isolation")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    (path,) = out.glob("blockbuster-*.whl")
    with zipfile.ZipFile(path) as z:
        yield z, src


def test_wheel_contains_the_grammar(built):
    wheel, src = built
    shipped = wheel.read("blockbuster/grammar/bbr.lark")
    assert shipped == (src / "grammar" / "bbr.lark").read_bytes()


def test_wheel_contains_the_rulesets(built):
    wheel, src = built
    rulesets = _repo_rulesets(src)
    assert rulesets, "no rule set in rulesets/"
    for name, data in rulesets.items():
        assert wheel.read(f"blockbuster/rulesets/{name}") == data


def test_wheel_contains_every_module(built):
    # A subpackage missing from pyproject.toml's package list would be left out.
    wheel, src = built
    names = set(wheel.namelist())
    modules = sorted(p.relative_to(src).as_posix() for p in (src / "blockbuster").rglob("*.py"))
    missing = [m for m in modules if m not in names]
    assert not missing, f"not in the wheel: {missing}"


def test_wheel_registers_the_reference_backend_and_the_script(built):
    wheel, _ = built
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "[blockbuster.backends]" in text
    assert "reference = blockbuster.backends.reference:backend" in text
    assert "blockbuster = blockbuster.cli:main" in text
