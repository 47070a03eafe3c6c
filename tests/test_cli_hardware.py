"""Every CLI path fuses with the chosen backend's hardware, and says which one.

``show --fused``, ``run`` (with ``--verify-steps`` and ``--rules``) and ``rules check``
take ``--backend``; without it they use the registry's default backend, the one
``run`` compiles with. A fake backend with a small local tier (the reference
interpreter priced on a 64 KiB cache) shows that the choice changes the fused
program; the real Numba backend shows that ``show`` and ``run`` agree.
"""

from __future__ import annotations

import json
import pytest

import blockbuster
from blockbuster import cli
from blockbuster.backends import registry
from blockbuster.backends.base import Backend
from blockbuster.backends.reference import compile_program
from blockbuster.cost import DEFAULT_HARDWARE, Hardware

SMALL_CACHE = Hardware("small-cache", cores=2, local_capacity_bytes=64 << 10,
                       global_bandwidth_bytes_per_s=40e9, local_bandwidth_bytes_per_s=200e9,
                       peak_flops=200e9)
# Ragged sizes where a 64 KiB local tier cannot hold the output row and 1 MiB can.
LAYERNORM = ["layernorm_matmul", "--size", "M=100", "--size", "K=90", "--size", "N=200",
             "--block", "M=32", "--block", "K=32", "--block", "N=32"]


@pytest.fixture
def small_cache(monkeypatch):
    """A registered backend ``small-cache``: the reference interpreter, priced on
    ``SMALL_CACHE``; and a record of the hardware every fusion got."""
    fake = Backend(name="small-cache", description="reference on a small cache",
                   compile_fn=compile_program, hardware=SMALL_CACHE)
    real_get = registry.get_backend
    monkeypatch.setattr(registry, "get_backend",
                        lambda name: fake if name == "small-cache" else real_get(name))
    seen = []
    import blockbuster.select.selection as selection
    real_fuse = selection.fuse_program

    def fuse_program(program, *args, hardware, **kwargs):
        seen.append(hardware)
        return real_fuse(program, *args, hardware=hardware, **kwargs)

    monkeypatch.setattr(selection, "fuse_program", fuse_program)
    return seen


def shown(capsys, *args) -> tuple[str, str]:
    """(the header comment, the program text) that ``show`` printed."""
    assert cli.main(["show", *args]) == 0
    out = capsys.readouterr().out
    header, _, text = out.partition("\n")
    assert header.startswith("# fused for backend ")
    assert blockbuster.parse_program(out) is not None      # the comment still parses
    return header, text


def test_show_fused_fuses_for_the_chosen_backend(small_cache, capsys):
    header, small = shown(capsys, *LAYERNORM, "--fused", "--backend", "small-cache")
    assert "small-cache (2 cores, local 64 KiB/core" in header
    ref_header, ref = shown(capsys, *LAYERNORM, "--fused", "--backend", "reference")
    assert "generic-cpu-2core (2 cores, local 1 MiB/core" in ref_header
    assert small_cache == [SMALL_CACHE, DEFAULT_HARDWARE]
    assert "kernel Y for m in M, n in N:" in small      # one output tile at a time
    assert "kernel Y for m in M:" in ref                 # the output row held


def test_show_fused_without_backend_uses_the_default_backend(small_cache, capsys, monkeypatch):
    monkeypatch.setattr(registry, "default_backend_name", lambda: "small-cache")
    header, _ = shown(capsys, *LAYERNORM, "--fused")
    assert header.startswith("# fused for backend small-cache: ")
    assert small_cache == [SMALL_CACHE]


def test_show_backend_without_fused_is_a_usage_error(capsys):
    assert cli.main(["show", *LAYERNORM, "--backend", "reference"]) == 2
    assert "--backend: only with --fused" in capsys.readouterr().err


def test_run_fuses_and_reports_with_the_chosen_backend(small_cache, capsys):
    assert cli.main(["run", *LAYERNORM, "--backend", "small-cache", "--verify-steps",
                     "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["backend"] == "small-cache"
    assert report["hardware"] == SMALL_CACHE.as_dict()
    assert report["verified_steps"] > 0 and report["validation"]["passed"]
    # The checked small copy (and the real sizes, for rules only they apply) and the
    # real run all fused for the backend's hardware.
    assert len(small_cache) >= 2 and all(h == SMALL_CACHE for h in small_cache)
    assert "kernel Y for m in M, n in N:" in report["fused_program"]
    # The text report names the hardware too.
    assert cli.main(["run", *LAYERNORM, "--backend", "small-cache"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("hardware"))
    assert line.split(None, 1)[1] == SMALL_CACHE.summary()


def test_rules_check_fuses_its_action_states_for_the_chosen_backend(small_cache, capsys,
                                                                  tmp_path, monkeypatch):
    from blockbuster.checks import soundness
    got = []
    real = soundness.action_states

    def action_states(*args, hardware, **kwargs):
        got.append(hardware)
        return real(*args, hardware=hardware, **kwargs)

    monkeypatch.setattr(soundness, "action_states", action_states)
    path = tmp_path / "inline.bbr"
    path.write_text("rule inline_all: apply inline(X) if intermediate(X)\n")
    assert cli.main(["rules", "check", str(path), "--trials", "2", "--backend", "small-cache",
                     "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "small-cache" and out["hardware"] == SMALL_CACHE.as_dict()
    assert got == [SMALL_CACHE]


def test_show_and_run_fuse_the_same_for_numba(capsys, tmp_path, monkeypatch):
    """The real plugin: ``show --fused --backend numba`` prints the program
    ``run --backend numba`` compiles."""
    monkeypatch.chdir(tmp_path)
    args = ["layernorm_matmul", "--size", "M=200", "--size", "K=100", "--size", "N=300"]
    assert cli.main(["show", *args, "--fused", "--backend", "numba"]) == 0
    show = capsys.readouterr().out
    assert cli.main(["run", *args, "--backend", "numba", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    hardware = registry.get_backend("numba").hardware
    assert report["hardware"] == hardware.as_dict()
    assert show.splitlines()[0] == f"# fused for backend numba: {hardware.summary()}"
    assert show.split("\n", 1)[1] == report["fused_program"]
