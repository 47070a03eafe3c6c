"""The command line: exit statuses 0/1/2, the run report, and one-line errors.

Most tests run ``python -m blockbuster`` in a subprocess, as a user would; the
validation-failure test calls ``blockbuster.cli.main`` in-process so it can break
the oracle with monkeypatch instead of shipping a fake in the package.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import blockbuster
from blockbuster import cli, oracles
from blockbuster.errors import SourceError


def bb(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "blockbuster", *args], capture_output=True,
                          text=True, timeout=60, cwd=cwd)


# -- run ------------------------------------------------------------------------------

def test_run_json_report(tmp_path):
    # 200 is not a multiple of the 64-blocks: ragged last blocks.
    r = bb("run", "attention", "--size", "N=200", "--size", "D=32", "--block", "N=64",
           "--backend", "reference", "--seed", "7", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)       # exactly one JSON object on stdout
    assert report["workload"] == "attention" and report["backend"] == "reference"
    assert report["sizes"] == {"N": 200, "S": 200, "D": 32}
    assert report["blocks"]["N"] == 64 and report["seed"] == 7
    before, after = report["before"], report["after"]
    for side in (before, after):
        assert {"kernels", "global_bytes", "intermediates"} <= set(side)
    assert before["kernels"] == 8 and len(before["intermediates"]) == 7
    program = blockbuster.workload("attention", N=200, D=32)
    fused = blockbuster.fuse(program).program
    # "after" describes the fused program, "before" the unfused one.
    assert after["kernels"] == len(fused.kernels) <= before["kernels"]
    assert after["global_bytes"] == blockbuster.cost(fused).global_bytes
    assert before["global_bytes"] == blockbuster.cost(program).global_bytes
    assert report["compulsory_bytes"] == blockbuster.cost(program).compulsory_bytes
    assert report["compulsory_bytes"] <= after["global_bytes"] <= before["global_bytes"]
    assert isinstance(report["stop_reason"], str) and report["stop_reason"]
    v = report["validation"]
    assert v["passed"] is True and 0 <= v["max_abs_error"] and 0 <= v["max_rel_error"] < 2e-3
    assert set(report["timings"]) >= {"build", "fuse", "compile", "run"}
    assert all(isinstance(t, float) and t >= 0 for t in report["timings"].values())


@pytest.mark.parametrize("name,sizes", [
    ("layernorm_matmul", ["M=100", "K=70", "N=30"]),
    ("rmsnorm_ffn_swiglu", ["M=20", "D=70", "H=100"]),
])
def test_run_text_report(name, sizes):
    args = [a for s in sizes for a in ("--size", s)]
    r = bb("run", name, *args, "--block", "K=32" if name == "layernorm_matmul" else "D=32")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith(f"workload        {name}")
    for label in ("backend", "kernels", "global traffic", "compulsory", "intermediates",
                  "validation      passed", "timings", "build", "fuse", "compile", "run"):
        assert label in out
    assert "Traceback" not in r.stderr


def test_validation_failure_exits_1(monkeypatch, capsys):
    def wrong(Q, K, V):
        return {"O": np.full((Q.shape[0], V.shape[1]), 1e3)}
    monkeypatch.setitem(oracles.ORACLES, "attention", wrong)
    status = cli.main(["run", "attention", "--size", "N=40", "--size", "D=8",
                       "--backend", "reference", "--json"])
    assert status == 1
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["validation"]["passed"] is False
    assert report["validation"]["max_rel_error"] > 0.5
    assert err.startswith("error: validation failed")


def test_non_finite_outputs_still_give_strict_json(monkeypatch, capsys):
    monkeypatch.setitem(oracles.ORACLES, "attention",
                        lambda Q, K, V: {"O": np.zeros((Q.shape[0], V.shape[1]))})
    from blockbuster.backends.base import Backend
    real_compile = Backend.compile

    def nan_compile(self, program, **options):
        run = real_compile(self, program, **options)
        return lambda **arrays: {k: v * np.nan for k, v in run(**arrays).items()}
    monkeypatch.setattr(Backend, "compile", nan_compile)
    assert cli.main(["run", "attention", "--size", "N=10", "--size", "D=4", "--json",
                     "--backend", "reference"]) == 1
    report = json.loads(capsys.readouterr().out)   # no bare NaN/Infinity tokens
    assert report["validation"]["max_abs_error"] is None


# -- bad usage: exit 2, one line on stderr, no traceback ---------------------------

@pytest.mark.parametrize("args,fragment", [
    (["run", "nope"], "unknown workload 'nope'"),
    (["run", "attention", "--backend", "nope"], "unknown backend 'nope'"),
    (["run", "attention", "--size", "X=3"], "no dimension 'X'"),
    (["run", "attention", "--size", "N=0"], "dimension N"),
    (["run", "attention", "--size", "N=-4"], "dimension N"),
    (["run", "attention", "--size", "N=abc"], "'abc' is not an integer"),
    (["run", "attention", "--size", "N"], "expects DIM=INT"),
    (["run", "attention", "--size", "N=4", "--size", "N=5"], "given twice"),
    (["show", "attention", "--block", "N=0"], "dimension N"),
    (["show", "layernorm_matmul", "--block", "Q=8"], "no dimension 'Q'"),
])
def test_bad_input_exits_2_with_one_line(args, fragment):
    r = bb(*args)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and fragment in lines[0]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [[], ["run"], ["frobnicate"], ["run", "attention", "--seed", "x"]])
def test_argparse_usage_errors_exit_2(args):
    r = bb(*args)
    assert r.returncode == 2
    assert r.stderr.startswith("error: ") and len(r.stderr.splitlines()) == 1
    assert "(usage: blockbuster" in r.stderr
    assert "Traceback" not in r.stderr



@pytest.mark.parametrize("args, usage", [
    (["show", "attention", "--json"], "(usage: blockbuster show --help)"),
    (["workloads", "--fused"], "(usage: blockbuster workloads --help)"),
])
def test_an_option_the_subcommand_lacks_points_to_its_help(args, usage):
    """`show --json` used to say `(usage: blockbuster --help)`, whose help does not
    list the subcommand's options."""
    r = bb(*args)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith("error: unrecognized arguments: ") and usage in r.stderr

def test_source_error_prints_its_excerpt(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise SourceError("unexpected ')'", "rules.bbr", 3, 7, "rule x: f(a))")
    import blockbuster.frontend.workloads as workloads
    monkeypatch.setattr(workloads, "workload", broken)
    assert cli.main(["show", "attention"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["rules.bbr:3:7: unexpected ')'", "    rule x: f(a))", "          ^"]


# -- show, workloads, backends ---------------------------------------------------------

def test_show_prints_a_parseable_program():
    r = bb("show", "attention", "--size", "N=200", "--block", "N=32")
    assert r.returncode == 0, r.stderr
    program = blockbuster.parse_program(r.stdout)
    assert program == blockbuster.workload("attention", N=200, blocks={"N": 32})
    assert "dim N = 200 block 32" in r.stdout


def test_show_fused_prints_the_fused_program():
    r = bb("show", "layernorm_matmul", "--size", "M=100", "--fused", "--backend", "reference")
    assert r.returncode == 0, r.stderr
    shown = blockbuster.parse_program(r.stdout)
    # Fused at the blocks tuning chose for the backend's machine (printed in the
    # text), with that machine's pricing.
    blocks = {d.name: d.block for d in shown.dims}
    fused = blockbuster.fuse(blockbuster.workload("layernorm_matmul", blocks=blocks, M=100),
                             hardware="reference").program
    assert shown == fused


def test_workloads_lists_dims_with_defaults():
    r = bb("workloads")
    assert r.returncode == 0
    lines = {line.split()[0]: line for line in r.stdout.splitlines()[1:]}
    assert set(lines) == {"attention", "layernorm_matmul", "rmsnorm_ffn_swiglu", "paper_figure",
                          "llama_block"}
    assert "N=256 S=N D=64" in lines["attention"] and "softmax" in lines["attention"]
    assert "M=128 D=256 H=512" in lines["rmsnorm_ffn_swiglu"]
    data = json.loads(bb("workloads", "--json").stdout)
    assert data["attention"]["derived"] == {"S": "N"}


def test_backends_lists_reference_ok(capsys):
    r = bb("backends")
    assert r.returncode == 0
    rows = {line.split()[0]: line.split()[1] for line in r.stdout.splitlines()
            if line and not line.startswith(" ")}
    assert rows["reference"] == "ok"
    # --json in this process: the same command and registry, without a second
    # interpreter importing every plugin again
    capsys.readouterr()
    assert cli.main(["backends", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ref = [b for b in data["backends"] if b["name"] == "reference"]
    assert ref and ref[0]["status"] == "ok" and ref[0]["description"]
    assert data["default"] in {b["name"] for b in data["backends"]}


def test_backends_shows_the_error_of_a_broken_plugin(monkeypatch, capsys):
    from blockbuster.backends import registry
    records = [registry.BackendInfo("reference", "NumPy", "ok"),
               registry.BackendInfo("numba", "(entry point x:y)", "broken",
                                    "ImportError: no module named numba_plugin")]
    monkeypatch.setattr(registry, "list_backends", lambda: records)
    monkeypatch.setattr(registry, "default_backend_name", lambda: "reference")
    assert cli.main(["backends"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["reference", "ok"] and out[0].endswith("(default)")
    assert out[1].split()[:2] == ["numba", "broken"]
    assert out[2].strip() == "error: ImportError: no module named numba_plugin"


def test_version():
    r = bb("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"blockbuster {blockbuster.__version__}"


def test_emit_source_prints_the_generated_kernels(tmp_path):
    import subprocess
    import sys
    out_file = tmp_path / "attention_kernels.py"
    done = subprocess.run([sys.executable, "-m", "blockbuster", "run", "attention",
                           "--size", "N=100", "--backend", "numba", "--emit-source",
                           str(out_file)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    source = out_file.read_text()
    assert "prange" in source and "def " in source
    # The same file again is refused: nothing the user has is overwritten.
    again = subprocess.run([sys.executable, "-m", "blockbuster", "run", "attention",
                            "--size", "N=100", "--backend", "numba", "--emit-source",
                            str(out_file)], capture_output=True, text=True)
    assert again.returncode == 2 and "refusing to overwrite" in again.stderr
    assert out_file.read_text() == source


def test_emit_source_needs_a_generating_backend():
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "blockbuster", "run", "attention",
                           "--size", "N=50", "--backend", "reference", "--emit-source"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "does not generate source" in done.stderr
    assert "Traceback" not in done.stderr
