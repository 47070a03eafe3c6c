"""`run PATH.bbp` and `run module.py:factory` (a factory returning a Program): the
user's own programs, validated against the reference interpreter in float64."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np

import blockbuster as bb


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "blockbuster", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


PROGRAM = """\
program scaled_softmax
dim R = 37 block 16
dim C = 45 block 32
input X[R, C]
weight g[C]
output Y[R, C]
array m[R]
array s[R]
kernel m for r in R:
  m[r] = max(c in C: rowmax(colscale(g[c], X[r, c])))
kernel s for r in R:
  s[r] = sum(c in C: rowsum(exp(rowshift(neg(m[r]), colscale(g[c], X[r, c])))))
kernel Y for r in R, c in C:
  Y[r, c] = rowscale(recip(s[r]), exp(rowshift(neg(m[r]), colscale(g[c], X[r, c]))))
"""


def _softmax_rows(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def test_run_a_program_file_fuses_and_validates(tmp_path):
    path = tmp_path / "scaled_softmax.bbp"
    path.write_text(PROGRAM)
    done = _cli("run", str(path), "--backend", "reference", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["kind"] == "program" and report["validation"]["passed"]
    assert report["after"]["kernels"] < report["before"]["kernels"]


def test_inputs_file_is_used_and_checked(tmp_path):
    path = tmp_path / "p.bbp"
    path.write_text(PROGRAM)
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((37, 45)) * 50).astype(np.float32)
    g = rng.random(45).astype(np.float32) + 0.5
    np.savez(tmp_path / "in.npz", X=x, g=g)
    done = _cli("run", str(path), "--backend", "reference", "--inputs",
                str(tmp_path / "in.npz"), "--json")
    assert done.returncode == 0, done.stderr
    # the fused program, run independently on the same inputs, is the softmax
    fused = bb.parse_program(json.loads(done.stdout)["fused_program"])
    out = bb.compile(fused)(X=x, g=g)["Y"]
    want = _softmax_rows(x.astype(np.float64) * g.astype(np.float64))
    assert np.max(np.abs(out - want)) < 1e-5
    np.savez(tmp_path / "bad.npz", Z=x)
    bad = _cli("run", str(path), "--inputs", str(tmp_path / "bad.npz"))
    assert bad.returncode == 2 and "Z is not an input" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_sizes_override_a_program_file(tmp_path):
    path = tmp_path / "p.bbp"
    path.write_text(PROGRAM)
    done = _cli("run", str(path), "--backend", "reference", "--size", "R=70",
                "--block", "C=16", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["sizes"]["R"] == 70 and report["blocks"]["C"] == 16
    bad = _cli("run", str(path), "--size", "Q=3")
    assert bad.returncode == 2 and "no dimension Q" in bad.stderr


def test_factory_returning_a_program(tmp_path):
    (tmp_path / "mine.py").write_text(textwrap.dedent("""
        import blockbuster as bb
        from blockbuster.frontend.builder import GraphBuilder

        def factory():
            b = GraphBuilder("mine")
            b.dim("T", 50, 16); b.dim("E", 24, 16)
            x = b.input("x", "T", "E")
            return b.build(b.unary("exp", b.binary("sub", x, b.row_reduce("max", x))))
    """))
    done = _cli("run", "mine.py:factory", "--backend", "reference", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["validation"]["passed"]
    for bad, msg in [("mine.py:nope", "no function nope()"), ("gone.py:f", "no such file"),
                     ("what.txt", "not a workload")]:
        r = _cli("run", bad, cwd=tmp_path)
        assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr
