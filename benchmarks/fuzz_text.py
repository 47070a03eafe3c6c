"""Fuzz the rule-file and program-text front ends at scale (tests run a 1,000-case
slice of the same generator, tests/dsl/textfuzz.py).

    python benchmarks/fuzz_text.py [--cases 20000] [--seed 0]

Prints how many mutated texts were accepted or refused with a project error, and
every case where another exception escaped (exit status 1 if there is one).
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "dsl"))

from textfuzz import cases, run_case  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    start = time.perf_counter()
    outcome: collections.Counter = collections.Counter()
    escaped = []
    with tempfile.TemporaryDirectory() as tmp:
        for index, (kind, text) in enumerate(cases(args.cases, args.seed)):
            try:
                error = run_case(kind, text, Path(tmp) / "fuzz.bbr")
                outcome[(kind, "accepted" if error is None else type(error).__name__)] += 1
            except Exception as err:  # noqa: BLE001 - reported below
                escaped.append((index, kind, err, traceback.format_exc(), text))
    seconds = time.perf_counter() - start
    for (kind, what), n in sorted(outcome.items()):
        print(f"{kind:8} {what:12} {n}")
    print(f"{args.cases} cases (seed {args.seed}) in {seconds:.1f} s; "
          f"{len(escaped)} escaped a non-project exception")
    for index, kind, err, tb, text in escaped[:10]:
        print(f"\n-- case {index} ({kind}): {err!r}\n{tb}\n{text!r}")
    return 1 if escaped else 0


if __name__ == "__main__":
    sys.exit(main())
