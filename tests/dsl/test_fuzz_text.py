"""Fuzzing the text front ends: 1,000 mutated rule files and program texts (fixed
seed) load, parse and verify to a result or to one of the project's own errors —
never another exception. A few go through the CLI in a subprocess: no traceback.
A bigger run: ``python benchmarks/fuzz_text.py --cases 20000``."""

from __future__ import annotations

import subprocess
import sys
import traceback

import pytest

from textfuzz import cases, run_case


def test_a_thousand_mutated_texts_raise_only_project_errors(tmp_path):
    failures, rejected, accepted = [], 0, 0
    for index, (kind, text) in enumerate(cases(1000, seed=0)):
        try:
            error = run_case(kind, text, tmp_path / "fuzz.bbr")
        except Exception as err:     # noqa: BLE001 - this is what the test looks for
            failures.append(f"case {index} ({kind}): {err!r}\n{traceback.format_exc()}\n"
                            f"{text!r}")
            continue
        rejected += error is not None
        accepted += error is None
    assert not failures, failures[0]
    # Both paths are exercised: most mutations are refused, some still parse.
    assert rejected > 500 and accepted > 20


@pytest.mark.parametrize("index", [3, 10, 24, 57])
def test_the_cli_prints_no_traceback_for_mutated_rule_files(index, tmp_path):
    kind, text = [c for c in cases(120, seed=1) if c[0] == "rules"][index]
    path = tmp_path / "fuzz.bbr"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    done = subprocess.run([sys.executable, "-m", "blockbuster", "rules", "list", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr
    assert done.returncode in (0, 2), done.stderr
    if done.returncode == 2:
        assert done.stderr.startswith(str(path)), done.stderr
