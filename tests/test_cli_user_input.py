"""A new user's own files and odd command lines: every mistake is one clear line
(``FILE:LINE:COL`` where there is a place to point at), exit status 2, no traceback,
and nothing the user wrote is overwritten. In-process ``cli.main``: fast."""

from __future__ import annotations

import numpy as np
import pytest

from blockbuster import cli

PROGRAM = """\
program p
dim N = 100 block 32
input A[N]
output Y[N]
kernel Y for n in N:
  Y[n] = exp(A[n])
"""


def _fails(argv, capsys, status=2) -> str:
    assert cli.main(argv) == status
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err
    return err


def test_a_program_file_that_is_not_utf8_is_a_located_error(tmp_path, capsys):
    path = tmp_path / "bad.bbp"
    path.write_bytes(PROGRAM.encode().replace(b"exp", b"\xffxp"))
    err = _fails(["run", str(path), "--backend", "reference"], capsys)
    assert err.startswith(f"{path}:6:1: not a text file (invalid UTF-8")
    path.write_bytes(b"program p\n\0\n")
    err = _fails(["show", str(path)], capsys)
    assert err.startswith(f"{path}:1:1: not a text file (it contains NUL bytes)")


def test_a_number_out_of_float_range_is_a_located_error(tmp_path, capsys):
    path = tmp_path / "big.bbp"
    path.write_text(PROGRAM.replace("exp(A[n])", "mul(A[n], 1e999)"))
    err = _fails(["run", str(path), "--backend", "reference"], capsys)
    assert err.splitlines()[0] == (f"{path}:6:20: number 1e999 is out of the float range "
                                   "(write inf or -inf for an infinity)")
    rules = tmp_path / "big.bbr"
    rules.write_text("rule r: mul(a, -2e400) => neg(a)\n")
    err = _fails(["rules", "check", str(rules)], capsys)
    assert err.startswith(f"{rules}:1:16: number -2e400 is out of the float range")
    path.write_text(PROGRAM.replace("exp(A[n])", "mul(A[n], -inf)"))   # written inf: fine
    assert cli.main(["show", str(path)]) == 0
    assert "mul(A[n], -inf)" in capsys.readouterr().out


def test_a_program_without_outputs_is_refused(tmp_path, capsys):
    path = tmp_path / "none.bbp"
    path.write_text(PROGRAM.replace("output Y[N]", "array Y[N]"))
    err = _fails(["run", str(path), "--backend", "reference"], capsys)
    assert err == (f"error: {path}: program p has no outputs (declare what it computes "
                   "with `output NAME[...]`)\n")


def test_sizes_that_break_a_program_file_name_the_file_and_the_sizes(tmp_path, capsys):
    """The unfused llama_block text at another head size: a run-time error of the
    reference backend, with no file ("relabel: a block with 16 columns cannot take 8
    positions"); the verifier names the file, the sizes and the kernel now."""
    path = tmp_path / "llama.bbp"
    assert cli.main(["show", "llama_block"]) == 0
    path.write_text(capsys.readouterr().out)
    err = _fails(["run", str(path), "--size", "HD=8", "--backend", "reference"], capsys)
    assert err.startswith(f"error: {path} with --size HD=8: kernel '")
    assert "relabel: blocks of QD (16 columns) cannot be taken as HD (blocks of 8)" in err


@pytest.mark.parametrize("text", ["", "# only a comment\n\n"])
def test_a_rule_file_without_rules_is_refused(text, tmp_path, capsys):
    path = tmp_path / "empty.bbr"
    path.write_text(text)
    for argv in (["rules", "check", str(path)], ["rules", "list", str(path)],
                 ["run", "attention", "--size", "N=40", "--backend", "reference",
                  "--rules", str(path)]):
        err = _fails(argv, capsys)
        assert err == f"error: {path}: no rules in this file (a rule set with no rules fuses nothing)\n"


def test_including_a_directory_says_so(tmp_path, capsys):
    (tmp_path / "sub").mkdir()
    path = tmp_path / "inc.bbr"
    path.write_text('include "sub"\nrule r: neg(neg(a)) => a\n')
    err = _fails(["rules", "list", str(path)], capsys)
    assert err.splitlines()[0] == f"{path}:1:9: included sub is a directory, not a rule file"


def test_verify_steps_says_what_it_verified(capsys):
    assert cli.main(["run", "attention", "--size", "N=40", "--size", "D=8",
                     "--backend", "reference", "--verify-steps"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines()
             if ln.startswith("verified steps")]
    assert len(lines) == 1
    count = int(lines[0].split()[2])
    assert count > 5 and "left the outputs unchanged" in lines[0]


def test_verify_steps_checks_a_rule_the_small_copy_never_applies(tmp_path, capsys):
    """The small copy of attention has another head size, so another 1/√D constant:
    a rule matching the real one (0.125 at D = 64) never applied to the copy, and
    every checked step passed while the real fusion was wrong. Such steps are now
    checked at the real sizes."""
    rules = tmp_path / "scale.bbr"
    rules.write_text('include "default.bbr"\n'
                     "rule bad_scale: mul(a, 0.125) => mul(a, 0.25)\n"
                     "phase tidy: bad_scale\n"
                     "schedule: tidy, fuse, algebra, safety, merge, cancel, hold, "
                     "interchange, remerge, prepare\n")
    err = _fails(["run", "attention", "--size", "N=40", "--rules", str(rules),
                  "--trust-rules", "--verify-steps", "--tune", "off",
                  "--backend", "reference"], capsys, status=1)
    assert err.startswith("error: step 1: rule 'bad_scale'") and "changed output O" in err


SMALL = ["attention", "--size", "N=40", "--size", "D=8", "--backend", "reference"]


@pytest.mark.parametrize("flag,name", [("--dot", "prog.bbp"), ("--dot", "x.npz"),
                                       ("--dot", "notes.txt"), ("--dot", "hand.dot"),
                                       ("--emit-source", "x.npz"),
                                       ("--save-outputs", "earlier.npz")])
def test_outputs_never_overwrite_a_users_file(flag, name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text("mine\n")
    err = _fails(["run", *SMALL, flag, name], capsys)
    assert err == f"error: refusing to overwrite {flag} {name}: it exists; choose a new file name\n"
    assert (tmp_path / name).read_text() == "mine\n"


def test_run_saves_the_fused_outputs_by_name(tmp_path, monkeypatch, capsys):
    # Ragged N (100 in blocks of 32), outputs up to 5e34: the saved array is the fused
    # program's, checked against NumPy.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.bbp").write_text(PROGRAM)
    a = np.linspace(-80.0, 80.0, 100).astype(np.float32)
    np.savez(tmp_path / "in.npz", A=a)
    assert cli.main(["run", "p.bbp", "--backend", "reference", "--inputs", "in.npz",
                     "--save-outputs", "out.npz", "--json"]) == 0
    assert '"saved_outputs": "out.npz"' in capsys.readouterr().out
    saved = np.load(tmp_path / "out.npz")
    assert list(saved) == ["Y"] and saved["Y"].shape == (100,)
    np.testing.assert_allclose(saved["Y"], np.exp(a.astype(np.float64)), rtol=1e-6)
    # The report says where the inputs came from, not only the seed.
    assert cli.main(["run", "p.bbp", "--backend", "reference", "--inputs", "in.npz"]) == 0
    assert "inputs from in.npz, seed 0 for any not in it)" in capsys.readouterr().out


@pytest.mark.parametrize("name,fragment", [("out.txt", "the file name must end in .npz"),
                                           ("in.npz", "that is the --inputs file")])
def test_saved_outputs_go_to_a_new_npz_file_only(name, fragment, tmp_path, monkeypatch,
                                                 capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.bbp").write_text(PROGRAM)
    np.savez(tmp_path / "in.npz", A=np.ones(100, np.float32))
    before = (tmp_path / "in.npz").read_bytes()
    err = _fails(["run", "p.bbp", "--backend", "reference", "--inputs", "in.npz",
                  "--save-outputs", name], capsys)
    assert fragment in err and err.count("\n") == 1
    assert (tmp_path / "in.npz").read_bytes() == before
    assert not (tmp_path / "out.txt").exists()


def test_the_dot_output_is_not_the_program_it_reads(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.bbp").write_text(PROGRAM)
    _fails(["run", "p.bbp", "--backend", "reference", "--dot", "p.bbp"], capsys)
    assert (tmp_path / "p.bbp").read_text() == PROGRAM


def test_a_dot_file_of_an_earlier_run_is_replaced(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", *SMALL, "--dot", "a.dot"]) == 0
    first = (tmp_path / "a.dot").read_text()
    assert first.startswith(cli.DOT_PREFIX)
    (tmp_path / "a.dot").write_text(first + "// stale\n")
    assert cli.main(["run", *SMALL, "--dot", "a.dot"]) == 0
    assert (tmp_path / "a.dot").read_text() == first


@pytest.mark.parametrize("out,weights,fragment", [
    ("model.txt", None, "-o model.txt: the file name must end in .bbp"),
    ("model.npz", "model.npz", "-o model.npz: the file name must end in .bbp"),
    ("mine.bbp", None, "refusing to overwrite -o mine.bbp: it exists"),
    ("new.bbp", "mine.npz", "refusing to overwrite --weights mine.npz: it exists"),
])
def test_import_refuses_bad_or_existing_outputs(out, weights, fragment, tmp_path,
                                                monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f.py").write_text("def factory():\n    raise SystemExit('not reached')\n")
    (tmp_path / "mine.bbp").write_text("mine\n")
    (tmp_path / "mine.npz").write_text("mine\n")
    argv = ["import", "f.py:factory", "-o", out] + (["--weights", weights] if weights else [])
    err = _fails(argv, capsys)
    assert err.startswith(f"error: {fragment}") and len(err.splitlines()) == 1
    assert (tmp_path / "mine.bbp").read_text() == "mine\n"
    assert (tmp_path / "mine.npz").read_text() == "mine\n"
    assert not (tmp_path / "model.txt").exists() and not (tmp_path / "new.bbp").exists()


def test_import_of_a_program_factory_with_weights_writes_nothing(tmp_path, monkeypatch, capsys):
    # A factory that returns a Program has no parameter values: --weights would write
    # an empty archive, so the command is refused before either file is written.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f.py").write_text("import blockbuster as bb\n"
                                   "def factory():\n    return bb.workload('attention', N=40)\n")
    err = _fails(["import", "f.py:factory", "-o", "p.bbp", "--weights", "w.npz"], capsys)
    assert err.startswith("error: --weights w.npz: f.py:factory has no parameter values")
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "p.bbp").exists() and not (tmp_path / "w.npz").exists()
    assert cli.main(["import", "f.py:factory", "-o", "p.bbp"]) == 0      # without: fine
    assert (tmp_path / "p.bbp").read_text().startswith("program ")


@pytest.mark.parametrize("make,fragment", [
    (lambda p: np.save(p, np.zeros(3)), "not a NumPy .npz archive"),
    (lambda p: p.write_text("rule r: neg(neg(a)) => a\n"), "not a NumPy .npz archive"),
    (lambda p: np.savez(p, Q=np.array(["a", "b"])), "Q holds <U1 values, not real numbers"),
    (lambda p: np.savez(p, Q=np.zeros((40, 8), complex)), "Q holds complex128 values"),
    (lambda p: np.savez(p, Q=np.array([{"a": 1}, None], dtype=object)),
     "Q holds Python objects, not real numbers"),
])
def test_inputs_that_are_not_arrays_of_numbers_are_refused(make, fragment, tmp_path, capsys):
    path = tmp_path / "in.npz"
    make(path)
    if not path.exists():           # np.save added .npy
        path = tmp_path / "in.npz.npy"
    err = _fails(["run", *SMALL, "--inputs", str(path)], capsys)
    assert err.startswith(f"error: --inputs {path}: {fragment}") and len(err.splitlines()) == 1


def test_outputs_may_go_to_dev_null(capsys):
    assert cli.main(["run", *SMALL, "--dot", "/dev/null"]) == 0


@pytest.mark.parametrize("argv,line", [
    ([], "error: the following arguments are required: COMMAND (usage: blockbuster --help)"),
    (["run", "attention", "--seed", "-1"], "error: argument --seed: a seed is a non-negative "
     "integer, got -1 (usage: blockbuster run --help)"),
    (["rules", "check"], "error: the following arguments are required: FILE "
     "(usage: blockbuster rules check --help)"),
    (["run", "attention", "--tune", "bogus"], "error: argument --tune: invalid choice: 'bogus' "
     "(choose from 'measure', 'model', 'off') (usage: blockbuster run --help)"),
])
def test_bad_usage_is_one_line_too(argv, line, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert capsys.readouterr().err == line + "\n"


def test_projecting_a_single_value_is_a_located_error(tmp_path, capsys):
    rules = tmp_path / "tuple.bbr"
    rules.write_text("rule tp: neg(a) => b.0 with b = neg(a)\n")
    err = _fails(["rules", "check", str(rules)], capsys)
    assert err.splitlines()[0] == (f"{rules}:1:22: '.0' picks an output of a multi-output "
                                   "reduction, but neg(...) has one value")
    path = tmp_path / "tuple.bbp"
    path.write_text(PROGRAM.replace("exp(A[n])", "exp(A[n]).1"))
    err = _fails(["show", str(path)], capsys)
    assert err.startswith(f"{path}:6:20: '.1' picks an output")


def test_a_limit_that_stopped_the_whole_run_is_reported_when_selection_takes_over():
    """A growing rule stops the whole-program run at the depth limit; its result costs
    more, so selection takes over: the report still names the limit."""
    import blockbuster as bb
    from blockbuster.dsl.loader import load_rules_text
    rules = load_rules_text("rule grow: exp(a) => exp(add(a, 0.0))\n")
    result = bb.fuse(bb.workload("attention", N=40, D=8), rules=rules)
    assert "the whole-program run stopped (depth_limit) after" in result.fallback


SHIFTED = """\
program shifted
dim H = 4 point
dim G = {g} point
dim N = 100 block 32
input A[G, N]
output Y[H, N]
kernel Y for h in H, n in N:
  Y[h, n] = add(A[h // 2, {index}], sum(j in N[ : n]: rowsum(outer(A[h // 2, j + 1], A[h // 2, n - j]))))
"""


@pytest.mark.parametrize("g,index,fragment", [
    (2, "n + 1", "index n + 1 reads block 4 of N, which has 4 blocks (0..3), at n=3"),
    (2, "n - 1", "index n - 1 reads block -1 of N, which has 4 blocks (0..3), at n=0"),
    (1, "n", "index h // 2 reads block 1 of G, which has 1 block (0..0), at h=2"),
])
def test_a_block_index_past_its_dimension_is_refused(g, index, fragment, tmp_path, capsys):
    """The backends do not check block indices (a read past the end takes another
    block, or nothing): the verifier does, for every value of the loops."""
    path = tmp_path / "shifted.bbp"
    path.write_text(SHIFTED.format(g=g, index=index))
    err = _fails(["show", str(path)], capsys)
    assert err.startswith(f"{path}:8:3: kernel 'Y', store to Y: " + fragment), err


def test_indices_that_stay_in_range_are_accepted(tmp_path, capsys):
    """j + 1 and n - j under j in N[ : n], (k * 2 + 1) // 3 and k - k // 2: in range
    for every value the loops take, though not by interval arithmetic alone."""
    path = tmp_path / "ok.bbp"        # whole blocks: a block read elsewhere has Y's extent
    path.write_text(SHIFTED.format(g=2, index="n - n // 2").replace("N = 100", "N = 128"))
    assert cli.main(["run", str(path), "--backend", "reference"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("flags", [["--backend", "reference"], ["--tune", "model"],
                                   ["--tune-seconds", "3"]])
def test_show_fusion_flags_without_fused_are_refused(flags, capsys):
    err = _fails(["show", "attention", *flags], capsys)
    assert err == (f"error: {flags[0]}: only with --fused (the unfused program does not "
                   "depend on it; --block sets its blocks)\n")


@pytest.mark.parametrize("first,second,name", [
    ("--dot", "--save-outputs", "o.npz"), ("--emit-source", "--dot", "same.x"),
    ("--dot", "--emit-source", "./same.x")])
def test_two_outputs_naming_one_file_are_refused_before_any_work(first, second, name,
                                                                 tmp_path, monkeypatch,
                                                                 capsys):
    # Before, the first output was written after fusion and the second then refused
    # to replace it: exit 2 with one output half-written over the other's name.
    monkeypatch.chdir(tmp_path)
    err = _fails(["run", *SMALL, first, "same.x" if name == "./same.x" else name,
                  second, name], capsys)
    assert err.startswith("error: --") and " both name " in err and err.count("\n") == 1
    assert first in err and second in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("old,new,line,col,message", [
    ("kernel Y for n in N:\n  Y[n] = exp(A[n])", "kernel Y for n in N:\n  Y[n] = rowsum(A[n])",
     6, 3, "kernel 'Y', store to Y: rowsum: operand must be a 2-D block"),
    ("input A[N]", "input A[N]\ninput A[N]", 4, 7, "array A is declared twice"),
    ("dim N = 100 block 32", "dim N = 100 block 32\ndim N = 7 block 7", 3, 1,
     "dimension N is declared twice"),
    ("kernel Y for n in N:\n  Y[n] = exp(A[n])",
     "kernel Y for n in N:\n  Y[n] = exp(A[n])\nkernel Y for n in N:\n  Y[n] = A[n]", 7, 8,
     "kernel 'Y' is defined twice"),
    ("  Y[n] = exp(A[n])", "  A[n] = exp(A[n])", 6, 3, "kernel 'Y' writes input array A"),
])
def test_an_ill_formed_program_file_is_located(old, new, line, col, message, tmp_path, capsys):
    # The verifier's errors about a program read from a file point at the store, the
    # kernel or the declaration they are about (before: `error: ...` with no place).
    path = tmp_path / "p.bbp"
    assert old in PROGRAM
    path.write_text(PROGRAM.replace(old, new))
    err = _fails(["run", str(path), "--backend", "reference"], capsys)
    assert err.startswith(f"{path}:{line}:{col}: {message}"), err
    assert len(err.splitlines()) == 3 and err.splitlines()[2].strip() == "^"


def test_a_program_line_cut_short_points_at_its_end(tmp_path, capsys):
    # `block` with no size: the error was at the next line's `input`.
    path = tmp_path / "cut.bbp"
    path.write_text(PROGRAM.replace("dim N = 100 block 32", "dim N = 100 block"))
    err = _fails(["show", str(path)], capsys)
    assert err.splitlines()[0] == (f"{path}:2:18: this line is incomplete after 'block' "
                                   "(the next line begins a new 'input'), expected an integer")


def test_outputs_that_are_nan_in_the_oracle_too_are_counted(tmp_path, capsys):
    # NaN inputs: every output is NaN in the fused program and the oracle alike; the
    # report said only "passed: max abs error 0.00e+00".
    (tmp_path / "p.bbp").write_text(PROGRAM)
    a = np.ones(100, np.float32)
    a[[3, 70]] = np.nan
    np.savez(tmp_path / "in.npz", A=a)
    assert cli.main(["run", str(tmp_path / "p.bbp"), "--backend", "reference", "--inputs",
                     str(tmp_path / "in.npz")]) == 0
    out = capsys.readouterr().out
    assert "  non-finite    2 of 100 output values NaN or inf in the float64 oracle too" in out


def test_a_byte_order_mark_is_not_an_error(tmp_path, capsys):
    # Files saved by some Windows editors start with a UTF-8 BOM: it was
    # "unexpected character '\ufeff'" at 1:1.
    import blockbuster as bb
    path = tmp_path / "p.bbp"
    path.write_bytes(b"\xef\xbb\xbf" + PROGRAM.encode())
    assert cli.main(["show", str(path)]) == 0
    rules = tmp_path / "r.bbr"
    rules.write_bytes(b"\xef\xbb\xbfrule mul_one: mul(a, 1.0) => a\n")
    assert cli.main(["rules", "list", str(rules)]) == 0
    assert f"{rules}:1:6: mul_one" in capsys.readouterr().out
    assert bb.parse_program("\ufeff" + PROGRAM).name == "p"


def test_include_of_an_empty_name_says_so(tmp_path, capsys):
    rules = tmp_path / "r.bbr"
    rules.write_text('include ""\nrule r: mul(a, 1.0) => a\n')
    err = _fails(["rules", "list", str(rules)], capsys)
    assert err.startswith(f"{rules}:1:9: include names no file")


def test_emit_source_on_a_backend_without_source_is_refused_before_any_work(tmp_path,
                                                                            monkeypatch,
                                                                            capsys):
    # Before: fusion, tuning and --dot ran first, then the refusal (the .dot was left).
    monkeypatch.chdir(tmp_path)
    err = _fails(["run", *SMALL, "--emit-source", "k.py", "--dot", "a.dot"], capsys)
    assert err == "error: --emit-source: this backend does not generate source (try --backend numba)\n"
    assert list(tmp_path.iterdir()) == []


def test_a_program_files_given_blocks_are_reported(tmp_path, capsys):
    (tmp_path / "p.bbp").write_text(PROGRAM)
    assert cli.main(["run", str(tmp_path / "p.bbp"), "--backend", "reference",
                     "--block", "N=8"]) == 0
    assert "blocks          as stated by the program, given N=8 (not tuned)" in \
        capsys.readouterr().out


def test_a_block_size_for_a_point_dimension_is_refused(tmp_path, capsys):
    # Before: `--block H=2` was ignored (H stays one index at a time) while the report
    # said "given H=2".
    (tmp_path / "p.bbp").write_text(PROGRAM.replace("dim N = 100 block 32\n",
                                                    "dim N = 100 block 32\ndim H = 4 point\n"))
    err = _fails(["run", str(tmp_path / "p.bbp"), "--backend", "reference",
                  "--block", "H=2"], capsys)
    assert err == (f"error: {tmp_path / 'p.bbp'}: --block H: H is a point dimension "
                   "(iterated one index at a time), it has no block size\n")


def test_carets_line_up_after_tabs_and_old_mac_line_ends(tmp_path, capsys):
    # A tab before the error put the caret columns short of it; a file with lone CR
    # line ends was one line to Lark (1:34) but several to the excerpt.
    tab = tmp_path / "tab.bbr"
    tab.write_text("rule r:\tmull(a, 1.0) => a\n")
    err = _fails(["rules", "list", str(tab)], capsys).splitlines()
    assert err[0] == (f"{tab}:1:9: unknown operator 'mull' (did you mean mul? the operators "
                      f"are listed in rulesets/README.md)")
    assert err[1] == "    rule r: mull(a, 1.0) => a" and err[2] == "            ^"
    cr = tmp_path / "cr.bbr"
    cr.write_bytes(b"rule r: mul(a, 1.0) => a\rrule s: mull(a, 1.0) => a\r")
    err = _fails(["rules", "list", str(cr)], capsys).splitlines()
    assert err == [f"{cr}:2:9: unknown operator 'mull' (did you mean mul? the operators are "
                   f"listed in rulesets/README.md)", "    rule s: mull(a, 1.0) => a",
                   "            ^"]
    program = tmp_path / "p.bbp"
    program.write_bytes(PROGRAM.replace("\n", "\r").encode())
    assert cli.main(["show", str(program)]) == 0


def test_trust_rules_without_rules_is_refused(capsys):
    err = _fails(["run", *SMALL, "--trust-rules"], capsys)
    assert err == ("error: --trust-rules: only with --rules FILE (it skips the check of your "
                   "rules; the shipped rules need none)\n")


def test_a_rule_file_given_as_a_program_and_back_says_which_kind_it_is(tmp_path, capsys):
    rules = tmp_path / "mine.bbp"                  # rules saved under a program's suffix
    rules.write_text("# my rules\nrule twice: neg(neg(a)) => a\n")
    err = _fails(["run", str(rules), "--backend", "reference"], capsys)
    assert err.startswith(f"{rules}:2:1: unexpected 'rule', expected program: this is a "
                          "rule file (.bbr), not a block program (.bbp)")
    program = tmp_path / "p.bbp"
    program.write_text(PROGRAM)
    for argv in (["rules", "check", str(program)],
                 ["run", str(program), "--rules", str(program), "--backend", "reference"]):
        err = _fails(argv, capsys)
        assert err.startswith(f"{program}:1:1: unexpected 'program'")
        assert "this is a block program (.bbp), not a rule file (.bbr)" in err.splitlines()[0]


def test_parse_program_given_a_file_name_says_it_wants_the_text():
    import blockbuster as bb
    with pytest.raises(bb.SourceError, match="'model.bbp' looks like a file name; the text "
                                             r"is wanted here \(read the file first\)"):
        bb.parse_program("model.bbp")
    with pytest.raises(bb.SourceError) as info:      # other bad text: no such hint
        bb.parse_program("garbage")
    assert "file name" not in str(info.value) and "this is" not in str(info.value)


@pytest.mark.parametrize("shape", [(130, 100), (13000,), (100, 65, 2)])
def test_an_input_of_the_right_size_in_the_wrong_shape_is_refused(shape, tmp_path, capsys):
    """A transposed or flattened array holds the right number of values in the wrong
    places: refused, not reshaped (axes of length 1 may come and go)."""
    (tmp_path / "p.bbp").write_text(PROGRAM.replace("A[N]", "A[N, K]").replace(
        "dim N = 100 block 32", "dim N = 100 block 32\ndim K = 130 block 64").replace(
        "Y[n] = exp(A[n])", "Y[n] = sum(k in K: rowsum(A[n, k]))"))
    np.savez(tmp_path / "in.npz", A=np.zeros(shape))
    err = _fails(["run", str(tmp_path / "p.bbp"), "--backend", "reference", "--inputs",
                  str(tmp_path / "in.npz")], capsys)
    assert "error: --inputs" in err and "the program needs (100, 130)" in err
    np.savez(tmp_path / "ok.npz", A=np.ones((1, 100, 130, 1)))        # only axes of 1 differ
    assert cli.main(["run", str(tmp_path / "p.bbp"), "--backend", "reference", "--inputs",
                     str(tmp_path / "ok.npz"), "--save-outputs", str(tmp_path / "y.npz")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["Y"], np.full(100, 130.0))


def test_resizing_a_mean_written_for_the_old_size_warns_in_one_line(tmp_path, capsys):
    """``mul(sum(k in K: ...), 1/130)`` is a mean over K written for K=130: --size K
    keeps the constant (the program's own), and says so once per kernel."""
    text = PROGRAM.replace("A[N]", "A[N, K]").replace(
        "dim N = 100 block 32", "dim N = 100 block 32\ndim K = 128 block 64").replace(
        "Y[n] = exp(A[n])", "Y[n] = mul(sum(k in K: rowsum(A[n, k])), 0.0078125)")
    (tmp_path / "p.bbp").write_text(text)
    argv = ["run", str(tmp_path / "p.bbp"), "--backend", "reference", "--tune", "off"]
    assert cli.main(argv + ["--size", "K=200"]) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and len(err.splitlines()) == 1
    assert "kernel Y multiplies a sum over K by 0.0078125 = 1/128" in err
    assert "--size K=200 it stays 1/128" in err
    for other in (["--size", "N=50"], ["--size", "K=128"], []):    # K as written: no warning
        assert cli.main(argv + other) == 0
        assert "warning" not in capsys.readouterr().err
    (tmp_path / "p.bbp").write_text(text.replace("0.0078125", "0.5"))   # not 1/K: no warning
    assert cli.main(argv + ["--size", "K=200"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_resize_warning_is_said_once_when_tuning_rebuilds_the_program(tmp_path, monkeypatch,
                                                                         capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f.py").write_text(
        "from blockbuster.frontend.builder import GraphBuilder\n"
        "def factory():\n"
        "    g = GraphBuilder('m')\n"
        "    g.dim('M', 300); g.dim('K', 128); g.dim('N', 130)\n"
        "    h = g.layer_norm(g.input('X', 'M', 'K'), g.weight('gamma', 'K'),\n"
        "                     g.weight('beta', 'K'), 1e-5)\n"
        "    return g.build(g.matmul(h, g.weight('W', 'K', 'N'), name='Y'))\n")
    # A process of its own, tuning measured: its timing resets Python's memory of
    # the warnings already shown, and the program is built again at the chosen blocks.
    import os
    import subprocess
    import sys
    env = {**os.environ, "BLOCKBUSTER_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "blockbuster", "run", "f.py:factory",
                           "--backend", "numba", "--tune", "measure", "--tune-seconds",
                           "1", "--size", "K=200"], capture_output=True, text=True, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "blocks          tuned" in done.stdout
    assert done.stderr.count("warning:") == 2, done.stderr        # one per mean kernel
    assert done.stderr.count("stays 1/128") == 2


def test_an_error_inside_a_factory_names_its_line_and_debug_shows_where(tmp_path, monkeypatch,
                                                                        capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f.py").write_text(
        "def helper():\n"
        "    return {}['missing']\n"
        "def factory():\n"
        "    return helper()\n"
        "def built():\n"
        "    from blockbuster.frontend.builder import GraphBuilder\n"
        "    g = GraphBuilder('p')\n"
        "    g.dim('M', 0)\n")
    err = _fails(["run", "f.py:factory", "--backend", "reference"], capsys)
    assert err == "error: f.py:factory(): KeyError: 'missing' (at f.py:2)\n"
    err = _fails(["run", "f.py:built", "--backend", "reference"], capsys)   # the builder's own
    assert err.startswith("error: dimension M: size must be a positive integer")
    assert err.rstrip().endswith("(at f.py:8)") and len(err.splitlines()) == 1
    assert cli.main(["run", "f.py:factory", "--backend", "reference", "--debug"]) == 2
    err = capsys.readouterr().err
    assert 'File "' in err and "line 2, in helper" in err and "KeyError: 'missing'" in err


SOFTMAX_WITHOUT_SHIFT = """program sm
dim M = 13 block 4
dim K = 7 block 7
input X[M, K]
output Y[M, K]
kernel Y for m in M, k in K:
  Y[m, k] = rowscale(recip(rowsum(exp(X[m, k]))), exp(X[m, k]))
"""


def test_a_failure_says_when_the_unfused_program_overflows_too(tmp_path, capsys):
    """Logits of 200 overflow exp in float32 in the program as written: the failed
    validation says the unfused program gives NaN/inf too (not a fusion bug)."""
    (tmp_path / "sm.bbp").write_text(SOFTMAX_WITHOUT_SHIFT)
    np.savez(tmp_path / "x.npz", X=np.full((13, 7), 200.0, np.float32))
    argv = ["run", str(tmp_path / "sm.bbp"), "--inputs", str(tmp_path / "x.npz"),
            "--backend", "reference"]
    assert cli.main(argv) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "unfused too" in out
    np.savez(tmp_path / "ok.npz", X=np.full((13, 7), 2.0, np.float32))
    assert cli.main(argv[:3] + [str(tmp_path / "ok.npz"), "--backend", "reference",
                                "--json"]) == 0
    import json
    report = json.loads(capsys.readouterr().out)
    assert report["validation"]["baseline_non_finite"] is False
