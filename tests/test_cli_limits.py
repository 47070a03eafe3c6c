"""The command line never prints a traceback: every limit, bad value and closed pipe
ends with its exit status (0 ok, 1 validation failed, 2 bad input, 3 internal error)
and one clear line. In-process ``cli.main`` where possible; subprocesses only where
the process itself matters (tracebacks, broken pipes)."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest

import blockbuster
import blockbuster.frontend.workloads as workloads
from blockbuster import cli, memcheck
from blockbuster.dsl.loader import load_rules_text
from blockbuster.ir.depth import MAX_DEPTH, expr_depth
from blockbuster.rewrite.engine import Limits

SMALL = ["--size", "N=40", "--size", "D=8", "--backend", "reference"]


def usage_error(argv, capsys) -> str:
    """argparse refuses ``argv``: exit 2, the reason on one line."""
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1
    return err.strip()


# -- argument values ------------------------------------------------------------------

@pytest.mark.parametrize("argv,fragment", [
    (["run", "attention", "--seed", "-1"], "non-negative"),
    (["rules", "check", "x.bbr", "--seed", "-3"], "non-negative"),
    (["run", "attention", "--max-seconds", "nan"], "positive finite"),
    (["run", "attention", "--max-seconds", "inf"], "positive finite"),
    (["run", "attention", "--max-seconds", "-1"], "positive finite"),
    (["run", "attention", "--max-seconds", "0"], "positive finite"),
    (["run", "attention", "--max-steps", "0"], "positive integer"),
    (["run", "attention", "--max-nodes", "-5"], "positive integer"),
    (["rules", "check", "x.bbr", "--trials", "0"], "positive integer"),
])
def test_bad_numbers_are_refused_by_the_argument_parser(argv, fragment, capsys):
    line = usage_error(argv, capsys)
    assert line.startswith("error: ") and fragment in line and line.endswith("--help)")


def test_limits_refuse_nan_and_negative_values():
    for bad in ({"max_seconds": float("nan")}, {"max_seconds": -1.0}, {"max_steps": 0},
                {"max_nodes": 2.5}, {"max_depth": True}):
        with pytest.raises(blockbuster.UsageError, match="must be a"):
            Limits(**bad)


def test_a_seed_is_used_as_given(capsys):
    assert cli.main(["run", "attention", *SMALL, "--seed", "12345", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["seed"] == 12345


# -- sizes: checked against memory before anything is allocated -------------------------

@pytest.fixture
def no_allocation(monkeypatch):
    """Fail the test if the run gets as far as tuning, fusing or drawing inputs (tuning
    first: measured, it runs the real shapes; at N=1e8 even pricing its candidates took
    minutes before the size check was reached)."""
    def forbidden(*args, **kwargs):
        raise AssertionError("work started before the size check")
    monkeypatch.setattr("blockbuster.tuning.tune", forbidden)
    monkeypatch.setattr(blockbuster, "fuse", forbidden)
    monkeypatch.setattr("blockbuster.validate.random_inputs", forbidden)


@pytest.mark.parametrize("n", ["1000000000000", "100000"])
def test_sizes_too_big_for_memory_exit_2_before_any_work(n, capsys, no_allocation):
    assert cli.main(["run", "attention", "--size", f"N={n}", "--backend", "reference"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: attention with N=")
    assert "float64 oracle" in err[0] and "choose smaller --size" in err[0]


def test_modeled_bytes_add_up_the_inputs_outputs_and_oracle():
    # attention N=S=100, D=10: Q K V O are 100x10, the unfused program also stores
    # four 100x100 and two 100-vectors (scores, scaled, shifted, exp; max, sum, probs).
    p = blockbuster.workload("attention", N=100, D=10)
    every = sum(int(np.prod(p.shape(a.name))) for a in p.arrays)
    assert memcheck.modeled_bytes(p) == 4 * every + 8 * every + 8 * 100 * 10
    with pytest.raises(blockbuster.UsageError, match="needs about"):
        memcheck.check_fits_memory(p, available=memcheck.modeled_bytes(p))
    assert memcheck.check_fits_memory(p, available=10 * memcheck.modeled_bytes(p)) > 0


def test_workload_parameters_are_bounded(capsys, no_allocation):
    assert cli.main(["run", "llama_block", "--size", "layers=1000000"]) == 2
    err = capsys.readouterr().err
    assert err == "error: parameter layers: at most 64 for workload llama_block, got 1000000\n"


# -- output paths: refused before any work ----------------------------------------------

@pytest.mark.parametrize("flag,name,fragment", [
    ("--dot", "missing/dir/out.dot", "no such directory"),
    ("--dot", "rules.bbr", "refusing to overwrite"),
    ("--dot", ".", "is a directory"),
    ("--emit-source", "existing.py", "refusing to overwrite"),
    ("--emit-source", "missing/k.py", "no such directory"),
])
def test_output_paths_are_checked_before_any_work(flag, name, fragment, tmp_path,
                                                  monkeypatch, capsys, no_allocation):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "existing.py").write_text("# mine\n")
    assert cli.main(["run", "attention", *SMALL, flag, name]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and fragment in err and len(err.splitlines()) == 1
    assert (tmp_path / "existing.py").read_text() == "# mine\n"


# -- --json: exactly one JSON object on stdout -----------------------------------------

def test_json_with_explain_and_emit_source_is_one_object(capsys):
    status = cli.main(["run", "attention", "--size", "N=70", "--size", "D=16",
                       "--backend", "numba", "--json", "--explain", "--emit-source"])
    out = capsys.readouterr().out
    report = json.loads(out)              # the whole of stdout is one object
    assert status == 0 and report["validation"]["passed"]
    assert report["derivation"].startswith("== initial program")
    assert "== stop: saturated" in report["derivation"]
    assert "prange" in report["source"]


def test_json_errors_are_json_too(capsys):
    assert cli.main(["run", "nope", "--json"]) == 2
    out, err = capsys.readouterr()
    obj = json.loads(out)
    assert set(obj) == {"error", "exit_status"} and obj["exit_status"] == 2
    assert obj["error"].startswith("unknown workload 'nope'")
    assert err == f"error: {obj['error']}\n"


@pytest.mark.parametrize("bad", [["--seed", "-1"], ["--tune", "bogus"], ["--bogus"]])
def test_json_usage_errors_are_json_too(capsys, bad):
    """Malformed arguments (argparse's own errors, a subcommand's unknown option) with
    --json: stdout is the one JSON object as for every other error (it was empty)."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "attention", "--json", *bad])
    out, err = capsys.readouterr()
    obj = json.loads(out)
    assert exit_.value.code == 2 and obj["exit_status"] == 2
    assert err == f"error: {obj['error']}\n" and bad[0] in obj["error"]


# -- internal errors: exit 3, one line, a hint -------------------------------------------

def test_an_internal_error_is_one_line_with_a_hint_and_exit_3(monkeypatch, capsys):
    def bug(*args, **kwargs):
        raise ZeroDivisionError("division by zero")
    monkeypatch.setattr(workloads, "workload", bug)
    assert cli.main(["show", "attention"]) == 3
    err = capsys.readouterr().err
    assert err == ("internal error: ZeroDivisionError: division by zero; please report it "
                   "(rerun with --debug for the traceback)\n")
    with pytest.raises(ZeroDivisionError):          # --debug: the traceback, for a report
        cli.main(["--debug", "show", "attention"])
    with pytest.raises(ZeroDivisionError):          # where the hint's reader puts it
        cli.main(["show", "attention", "--debug"])
    assert cli.main(["show", "attention"]) == 3     # and without it, still one line


def test_a_recursion_error_is_an_internal_error_not_a_traceback(monkeypatch, capsys):
    def deep(*args, **kwargs):
        return deep()
    monkeypatch.setattr(workloads, "workload", deep)
    assert cli.main(["show", "attention"]) == 3
    assert capsys.readouterr().err.startswith("internal error: RecursionError")


# -- broken pipes end quietly -------------------------------------------------------------

class _ClosedPipe(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_stdout_ends_quietly_in_process(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert cli.main(["run", "attention", *SMALL, "--explain"]) == cli.EXIT_BROKEN_PIPE
    assert capsys.readouterr().err == ""


def test_a_closed_pipe_prints_no_traceback():
    # `run ... --explain | head -2`, made deterministic: the reader is gone before the
    # first byte is written.
    proc = subprocess.Popen([sys.executable, "-m", "blockbuster", "run", "attention", *SMALL,
                             "--explain"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == cli.EXIT_BROKEN_PIPE
    assert err == ""


# -- a term-growing rule stops at the depth limit ---------------------------------------

GROW = "rule grow: mul(s, a) => mul(s, mul(1.0, a))\n"


def test_a_term_growing_rule_stops_at_the_depth_limit(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path / "cache"))
    rules = tmp_path / "grow.bbr"
    rules.write_text(GROW)
    status = cli.main(["run", "attention", *SMALL, "--rules", str(rules), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report
    assert report["stop_reason"] == "depth_limit" and report["validation"]["passed"]
    assert "depth limit" in report["stop_message"]


def test_the_engine_never_returns_a_program_past_its_limits():
    rules = load_rules_text(GROW)
    program = blockbuster.workload("attention", N=40, D=8)
    result = blockbuster.fuse(program, rules=rules)
    assert result.stop_reason == "depth_limit"
    assert max(expr_depth(e) for e in result.program.exprs()) <= MAX_DEPTH
    small = blockbuster.fuse(program, rules=rules, limits=Limits(max_nodes=60))
    assert small.stop_reason == "node_limit"
    nodes = set()
    for e in small.program.exprs():
        nodes.update(e.walk())
    assert len(nodes) <= 60


# -- --max-steps / --max-seconds hold for the whole fusion --------------------------------

def test_max_steps_bounds_the_whole_candidate_selection():
    program = blockbuster.workload("llama_block", layers=2)     # 68 kernels: selection
    result = blockbuster.fuse(program, limits=Limits(max_steps=5), progress=False)
    assert result.stop_reason == "step_limit"
    # Identical layers reuse one cached fusion (the same Step objects): the engine
    # applied at most 5 rules in all, not 5 per candidate.
    assert len({id(s) for s in result.trace}) <= 5
    assert len(result.pieces) > 1


def test_a_spent_time_budget_leaves_the_rest_unfused():
    program = blockbuster.workload("llama_block", layers=2)
    result = blockbuster.fuse(program, limits=Limits(max_seconds=1e-9), progress=False)
    assert result.stop_reason == "time_limit" and result.trace == ()
    assert len(result.program.kernels) == len(program.kernels)


# -- read-only and non-contiguous inputs, every backend ----------------------------------

@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_read_only_and_non_contiguous_inputs_are_accepted(backend):
    from blockbuster.oracles import attention as oracle
    program = blockbuster.workload("attention", N=70, D=24, blocks={"N": 32, "D": 16})
    compiled = blockbuster.compile(program, backend=backend)
    rng = np.random.default_rng(3)
    base = {n: (30 * rng.standard_normal(program.shape(n))).astype(np.float32)
            for n in program.inputs}
    expected = oracle(**{n: a.astype(np.float64) for n, a in base.items()})["O"]
    read_only = {n: a.copy() for n, a in base.items()}
    for a in read_only.values():
        a.flags.writeable = False
    fortran = {n: np.asfortranarray(a) for n, a in base.items()}
    strided = {}
    for n, a in base.items():
        wide = np.zeros((a.shape[0], 2 * a.shape[1]), np.float32)
        wide[:, ::2] = a
        strided[n] = wide[:, ::2]
    for inputs in (read_only, fortran, strided):
        out = compiled(**inputs)["O"]
        scale = np.abs(expected).max()
        assert np.abs(out - expected).max() <= 1e-4 * scale
    assert not read_only["Q"].flags.writeable          # the caller's arrays untouched


def test_the_numba_module_itself_copies_read_only_inputs():
    # The compiled module is also reachable without the checks of CompiledProgram.
    from blockbuster.oracles import attention as oracle
    from blockbuster_numba.compiler import compile_module
    program = blockbuster.workload("attention", N=50, D=16, blocks={"N": 32, "D": 16})
    rng = np.random.default_rng(5)
    inputs = {n: (10 * rng.standard_normal(program.shape(n))).astype(np.float32)
              for n in program.inputs}
    expected = oracle(**{n: a.astype(np.float64) for n, a in inputs.items()})["O"]
    for a in inputs.values():
        a.flags.writeable = False
    out = compile_module(program, threads=2)(inputs)["O"]
    assert np.abs(out - expected).max() <= 1e-4 * np.abs(expected).max()


MLP = """program relu2_mlp
dim T = 37 block 16
dim E = 53 block 32
dim F = 101 block 32
input X[T, E]
weight W1[E, F]
weight W2[F, E]
output Y[T, E]
array A[T, F]
kernel A for t in T, f in F:
  A[t, f] = square(relu(sum(e in E: dot(X[t, e], W1[e, f]))))
kernel Y for t in T, e in E:
  Y[t, e] = sum(f in F: dot(A[t, f], W2[f, e]))
"""


def test_a_step_limit_short_of_fusion_is_named_as_the_cause(tmp_path, capsys):
    """``--max-steps 1``: the report said fusing 'did not pay (cost-model objective or
    per-call bytes grew ...)', blaming the cost where the limit stopped the run; the
    pieces were '1 kernels (A..A)'."""
    path = tmp_path / "mlp.bbp"
    path.write_text(MLP)
    assert cli.main(["run", str(path), "--max-steps", "1", "--backend", "reference"]) == 0
    out = capsys.readouterr().out
    assert "the whole-program run stopped (step_limit) after 1 step, short of a fusion " \
           "that pays" in out, out
    assert "did not pay" not in out
    assert "1 kernel (A) -> A" in out and "kernels (A..A)" not in out


def test_a_step_limit_that_never_worse_discards_reports_the_steps_kept(capsys):
    """The fusion line counts the steps of the program kept, and says so where the
    whole-program run (the step count the never-worse line gives) was discarded."""
    assert cli.main(["run", "attention", *SMALL, "--tune", "off", "--max-steps", "3"]) == 0
    out = capsys.readouterr().out
    fusion = next(line for line in out.splitlines() if line.startswith("fusion "))
    assert " steps kept, stopped: step_limit" in fusion
    assert "the whole-program run stopped (step_limit) after 3 steps" in out
    assert cli.main(["run", "attention", *SMALL, "--tune", "off"]) == 0   # nothing discarded
    fusion = next(line for line in capsys.readouterr().out.splitlines()
                  if line.startswith("fusion "))
    assert "kept" not in fusion and "stopped: saturated" in fusion
