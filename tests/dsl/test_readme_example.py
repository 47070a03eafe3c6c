"""The example in rulesets/README.md that extends the default rule set works as the
README says: it loads, its rule passes the pre-use check of `run --rules`, and the
rule fires on attention with D=1."""

import json
import re
from pathlib import Path

from blockbuster import cli

README = Path(__file__).parents[2] / "rulesets" / "README.md"


def example_rule_file() -> str:
    section = README.read_text().split("### Extending the default set", 1)[1]
    return re.search(r"```bbr\n(.*?)```", section, re.S).group(1)


def test_extending_the_default_set_as_documented(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path / "cache"))
    rules = tmp_path / "my.bbr"
    rules.write_text(example_rule_file())
    status = cli.main(["run", "attention", "--size", "D=1", "--rules", str(rules),
                       "--backend", "reference", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report
    assert report["rules_applied"]["mul_one"] == 1
    # The default rules still ran after it: attention still fuses to one kernel.
    assert report["rules_applied"]["inline_intermediate"] >= 1
    assert report["after"]["kernels"] == 1 and report["validation"]["passed"]
