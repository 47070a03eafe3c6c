"""Golden-file tests: each malformed rule file gives exactly its expected message
(FILE:LINE:COL: message, the offending line, a caret)."""

from pathlib import Path

import pytest

from blockbuster.dsl.loader import load_rules
from blockbuster.errors import SourceError

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p.name for p in GOLDEN.glob("*.bbr"))


def test_there_are_at_least_twenty_cases():
    assert len(CASES) >= 20


@pytest.mark.parametrize("name", CASES)
def test_malformed_rule_file(name, monkeypatch):
    monkeypatch.chdir(GOLDEN)          # messages name files as the user wrote them
    with pytest.raises(SourceError) as info:
        load_rules(name)
    expected = (GOLDEN / name).with_suffix(".err").read_text()
    assert info.value.render() + "\n" == expected
