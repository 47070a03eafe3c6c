"""`run --rules FILE` checks the user's own rules before trusting them: an unsound
rule is refused with exit status 1 and its report (FILE:LINE:COL), unless
--trust-rules; only the user's rules are checked, and the verdict is cached by the
files' content."""

from __future__ import annotations

import json

import pytest

import blockbuster
from blockbuster import cli
from blockbuster.checks import soundness

SMALL = ["--size", "N=40", "--size", "D=8", "--backend", "reference"]
PHASES = "schedule: fuse, mine, algebra, safety, merge, cancel, hold, interchange, prepare\n"
SOUND = 'include "default.bbr"\nrule mul_one: mul(a, 1.0) => a\nphase mine: mul_one\n' + PHASES
UNSOUND = ('include "default.bbr"\nrule mul_one: mul(a, 1.0) => a\n'
           "rule exp_split: exp(add(a, b)) => add(exp(a), exp(b))\n"
           "phase mine: mul_one, exp_split\n" + PHASES)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def checked(monkeypatch):
    """The names of the rules the checker is asked about."""
    names: list[str] = []
    real = soundness.check_rule

    def spy(rule, *args, **kwargs):
        names.append(rule.name)
        return real(rule, *args, **kwargs)
    monkeypatch.setattr(soundness, "check_rule", spy)
    return names


def write(tmp_path, text, name="mine.bbr"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_an_unsound_user_rule_is_refused_with_its_report(tmp_path, capsys, monkeypatch):
    path = write(tmp_path, UNSOUND)
    monkeypatch.setattr(blockbuster, "fuse", lambda *a, **k: pytest.fail("fused anyway"))
    assert cli.main(["run", "attention", *SMALL, "--rules", path]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert lines[0].startswith(f"{path}:3:6: exp_split: UNSOUND")
    assert "counterexample" in err
    assert lines[-1] == ("error: 1 rule of --rules is unsound (exp_split); fix it, or pass "
                         "--trust-rules to use it anyway")
    assert "Traceback" not in err


def test_the_refusal_is_one_json_object_with_json(tmp_path, capsys):
    assert cli.main(["run", "attention", *SMALL, "--rules", write(tmp_path, UNSOUND),
                     "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [f["rule"] for f in report["unsound_rules"]] == ["exp_split"]
    assert report["unsound_rules"][0]["location"].endswith("mine.bbr:3:6")
    assert report["exit_status"] == 1 and "unsound" in report["error"]


def test_a_cached_verdict_names_the_file_this_run_was_given(tmp_path, capsys, checked):
    """The verdict cache is keyed by content: a copy of a checked file, under another
    name, is answered from it, and the report names the copy."""
    first = write(tmp_path, UNSOUND)
    assert cli.main(["run", "attention", *SMALL, "--rules", first]) == 1
    copy = write(tmp_path, UNSOUND, name="copy.bbr")
    capsys.readouterr()
    assert cli.main(["run", "attention", *SMALL, "--rules", copy]) == 1
    assert checked == ["mul_one", "exp_split"]        # the copy: from the cache
    err = capsys.readouterr().err
    assert err.startswith(f"{copy}:3:6: exp_split: UNSOUND") and "mine.bbr" not in err
    assert cli.main(["run", "attention", *SMALL, "--rules", copy, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["unsound_rules"][0]["location"] == f"{copy}:3:6"


def test_trust_rules_skips_the_check(tmp_path, capsys, checked):
    status = cli.main(["run", "attention", *SMALL, "--rules", write(tmp_path, UNSOUND),
                       "--trust-rules", "--json"])
    assert checked == []
    report = json.loads(capsys.readouterr().out)
    assert status == 0 and report["validation"]["passed"]


def test_only_the_users_rules_are_checked_and_the_verdict_is_cached(tmp_path, capsys,
                                                                     checked):
    path = write(tmp_path, SOUND)
    assert cli.main(["run", "attention", *SMALL, "--rules", path, "--json"]) == 0
    assert checked == ["mul_one"]             # not the ~20 included default rules
    assert list((tmp_path / "cache" / "rulecheck").glob("*.json"))
    assert cli.main(["run", "attention", *SMALL, "--rules", path, "--json"]) == 0
    assert checked == ["mul_one"]             # cached: not checked again
    # A changed file is a new verdict.
    write(tmp_path, SOUND.replace("mul(a, 1.0) => a", "mul(1.0, a) => a"))
    assert cli.main(["run", "attention", *SMALL, "--rules", path, "--json"]) == 0
    assert checked == ["mul_one", "mul_one"]
    capsys.readouterr()


def test_the_default_rules_are_not_checked_on_every_run(capsys, checked):
    assert cli.main(["run", "attention", *SMALL, "--json"]) == 0
    assert checked == []
    capsys.readouterr()


def test_rules_check_still_checks_every_rule_of_a_file(tmp_path, capsys):
    path = write(tmp_path, "rule bad: exp(add(a, b)) => add(exp(a), exp(b))\n"
                           "rule good: neg(neg(x)) => x\n")
    assert cli.main(["rules", "check", path]) == 1
    out = capsys.readouterr().out
    assert "bad: UNSOUND" in out and "good: ok" in out and out.endswith(
        "2 rules: 1 ok, 1 unsound, 0 unstable\n")


def test_the_readme_rule_set_path_works_outside_a_checkout(tmp_path, monkeypatch, capsys):
    # `python -m blockbuster rules list rulesets/default.bbr` as the README writes it,
    # run where there is no rulesets/ folder (an installed package): the shipped set.
    from blockbuster import cli
    monkeypatch.chdir(tmp_path)
    assert cli.main(["rules", "list", "rulesets/default.bbr"]) == 0
    assert "inline_intermediate" in capsys.readouterr().out
    assert cli.main(["rules", "list", "nothere/default.bbr"]) == 2
    err = capsys.readouterr().err
    # a whole-file problem has no line to show: one `error:` line, as other errors
    assert err.startswith("error: nothere/default.bbr: no such rule file (the shipped rule "
                          "sets, found by name: default.bbr"), err
    assert len(err.strip().splitlines()) == 1


def test_a_deprecated_action_name_is_one_warning_line(tmp_path, capsys):
    # Python hides a DeprecationWarning raised outside __main__: the CLI shows its own.
    path = write(tmp_path, "rule h: apply hoist_accumulators()\n")
    assert cli.main(["rules", "list", path]) == 0
    assert capsys.readouterr().err == (f"warning: {path}:1:15: action 'hoist_accumulators' "
                                       "is deprecated, use 'hold_accumulators'\n")


INLINE_ONLY = ("rule my_inline: apply inline(X) if intermediate(X), same_index(X)\n"
               "rule my_drop: apply drop_dead()\n")


def test_show_fused_prints_what_your_rules_make_as_run_compiles_it(tmp_path, capsys):
    """`show --fused --rules` (and --without-rule): the program `run` with the same
    flags compiles; your rules are checked first, as for run."""
    path = write(tmp_path, INLINE_ONLY)
    flags = ["--size", "N=40", "--size", "D=8", "--backend", "reference", "--tune", "off",
             "--rules", path]
    assert cli.main(["show", "attention", "--fused", *flags]) == 0
    shown = capsys.readouterr().out
    assert cli.main(["run", "attention", *flags, "--json"]) == 0
    ran = json.loads(capsys.readouterr().out)["fused_program"]
    assert shown.split("\n", 1)[1] == ran
    assert "online_softmax" not in shown and "max(" in shown     # inlining only
    assert cli.main(["show", "attention", "--fused", *flags, "--without-rule",
                     "my_inline"]) == 0
    assert capsys.readouterr().out.count("\nkernel ") == 8      # nothing inlined


def test_show_fused_refuses_unsound_rules_unless_trusted(tmp_path, capsys):
    path = write(tmp_path, UNSOUND)
    argv = ["show", "attention", "--fused", *SMALL, "--rules", path]
    assert cli.main(argv) == 1
    out, err = capsys.readouterr()
    assert out == "" and "exp_split: UNSOUND" in err
    assert cli.main(argv + ["--trust-rules"]) == 0
    assert "kernel O" in capsys.readouterr().out


@pytest.mark.parametrize("flag", [["--rules", "x.bbr"], ["--without-rule", "x"],
                                  ["--max-steps", "3"], ["--trust-rules"]])
def test_rule_flags_of_show_need_fused(flag, capsys):
    assert cli.main(["show", "attention", *flag]) == 2
    assert capsys.readouterr().err.startswith(f"error: {flag[0]}: only with --fused")


def test_rules_check_exits_1_on_a_numerically_unstable_rule(tmp_path, capsys):
    """As the README's exit statuses say: unstable (sound in exact arithmetic, but the
    expanded square cancels catastrophically in float32) is exit 1, like unsound."""
    path = write(tmp_path, "rule sq: square(sub(a, b)) => "
                           "add(sub(square(a), mul(mul(a, b), 2.0)), square(b))\n")
    assert cli.main(["rules", "check", path, "--backend", "reference"]) == 1
    out = capsys.readouterr().out
    assert "sq: UNSTABLE" in out and out.endswith("1 rule: 0 ok, 0 unsound, 1 unstable\n")


def test_a_rule_no_trial_exercised_is_not_called_ok(tmp_path, capsys):
    """An action rule that applies to none of the sampled fusion states was reported
    "ok (0 trials)" and counted as ok."""
    path = write(tmp_path, "rule pw: apply prepare_weights()\n")
    assert cli.main(["rules", "check", path, "--backend", "reference"]) == 0
    out = capsys.readouterr().out
    assert "pw: not exercised" in out and "pw: ok" not in out
    assert out.endswith("1 rule: 0 ok, 0 unsound, 0 unstable, 1 not exercised\n")
