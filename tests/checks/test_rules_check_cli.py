"""`python -m blockbuster rules check FILE`: soundness and stability findings, exit 1
when a rule is unsound or unstable (outside an unsafe rule set), 0 otherwise."""

import json
import subprocess
import sys


def rules_check(path, *extra):
    return subprocess.run([sys.executable, "-m", "blockbuster", "rules", "check", str(path),
                           *extra], capture_output=True, text=True)


def test_an_unsound_rule_fails_with_its_location_and_caret(tmp_path):
    path = tmp_path / "mine.bbr"
    path.write_text("rule ok: neg(neg(x)) => x\nrule clamp: min(x, 100.0) => x\n")
    out = rules_check(path)
    assert out.returncode == 1, out.stderr
    assert f"{path}:2:6: clamp: UNSOUND" in out.stdout
    assert "    rule clamp: min(x, 100.0) => x\n         ^" in out.stdout
    assert f"{path}:1:6: ok: ok" in out.stdout
    assert "1 unsound, 0 unstable" in out.stdout


def test_an_unstable_rule_fails_unless_the_file_is_declared_unsafe(tmp_path):
    rule = "rule split: exp(rowshift(s, a)) => rowscale(exp(s), exp(a))\n"
    plain = tmp_path / "plain.bbr"
    plain.write_text(rule)
    out = rules_check(plain, "--json")
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    [stability] = [r for r in report["rules"] if r["check"] == "stability"]
    assert not stability["sound"] and not stability["allowed"]
    marked = tmp_path / "marked.bbr"
    marked.write_text("# unsafe-ruleset: kept to compare against\n" + rule)
    out = rules_check(marked)
    assert out.returncode == 0, out.stdout
    assert "unstable (allowed: unsafe rule set)" in out.stdout
