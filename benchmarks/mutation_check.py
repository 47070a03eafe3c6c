"""Mutation check: apply one-line mutations to a temporary copy of the repository, run
the tests related to each, and report which mutations survive (no test failed).

    nice python benchmarks/mutation_check.py [--only NAME ...] [--keep]

The working tree is never modified: the repository (without .git, caches and build
outputs) is copied to a temporary directory once; each mutation edits one line of the
copy, runs ``python -m pytest -n 0 -x -q -p no:cacheprovider <tests>`` there, and restores
the line. The copy's code is what gets imported: PYTHONPATH puts the copy and its
Numba plugin first (the editable install's finder comes after sys.path), bytecode is
neither read from nor written to the copy, and the script checks the imported module
paths before it starts. A mutation whose original text is not found on exactly one
line is reported as stale (the code moved on: update the list).

Exit status 1 if any mutation survives or is stale.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parent.parent


@attrs.frozen
class Mutation:
    name: str
    files: tuple[str, ...]      # candidates, first existing one is mutated (code moves)
    original: str               # a substring of exactly one line of that file
    replacement: str            # what that substring becomes
    tests: tuple[str, ...]      # test files to run (the missing ones are left out)


MUTATIONS = [
    # --- the mutations of issue 15, item 6 ------------------------------------------
    Mutation("invariant guard always true", ("blockbuster/rewrite/guards.py",),
             '"invariant": lambda ctx, b, x, k: b[k] not in b[x].free_vars',
             '"invariant": lambda ctx, b, x, k: True',
             ("tests/conformance/test_guarded_fusion.py",)),
    Mutation("soundness comparison never flags a finite difference",
             ("blockbuster/checks/soundness.py",),
             "over = np.abs(lf - rf) > tol", "over = np.abs(lf - rf) > np.inf",
             ("tests/checks/test_mutation_kills.py",)),
    Mutation("validation tolerance -> 5e-2", ("blockbuster/validate.py",),
             "DEFAULT_TOLERANCE = 5e-5", "DEFAULT_TOLERANCE = 5e-2",
             ("tests/test_validate.py",)),
    Mutation("per_call_bytes is global_bytes", ("blockbuster/cost/model.py",),
             "return self.global_bytes - self.weight_prep_bytes",
             "return self.global_bytes",
             ("tests/cost/test_headline_results.py",)),
    Mutation("ablation reports global_bytes",
             ("blockbuster/checks/ablation.py",),
             "c.per_call_bytes, prep)", "c.global_bytes, prep)",
             ("tests/checks/test_mutation_kills.py",)),
    # --- cost model counting ---------------------------------------------------------
    Mutation("block extent ignores the ragged last block", ("blockbuster/cost/counting.py",),
             "return dim.extent(b) if 0 <= b < dim.nblocks else 0",
             "return dim.block if 0 <= b < dim.nblocks else 0",
             ("tests/cost/test_cost_counting.py",)),
    Mutation("weight preparation never recognised", ("blockbuster/cost/model.py",),
             "if _is_weight_prep(k, program) else c",
             "if False else c",
             ("tests/cost/test_headline_results.py",)),
    Mutation("cheaper guard always true", ("blockbuster/rewrite/guards.py",),
             "return cost(ctx.candidate(), hw).rank < cost(ctx.program, hw).rank",
             "return True",
             ("tests/cost/test_headline_results.py",)),
    # --- online softmax combiner -----------------------------------------------------
    Mutation("reference online softmax forgets to rescale",
             ("blockbuster/backends/reference.py",),
             "alpha = np.exp(m - seen)", "alpha = np.exp(m - seen) * 0 + 1",
             ("tests/conformance/test_stateful_combiners.py",)),
    Mutation("numba online softmax forgets to rescale",
             ("plugins/numba/blockbuster_numba/codegen/reductions.py",),
             'f"{alpha}[r] = exp_({m}[r] - {sn})"', 'f"{alpha}[r] = exp_({sn} - {sn})"',
             ("tests/conformance/test_stateful_combiners.py",)),
    # --- verifier --------------------------------------------------------------------
    Mutation("verifier accepts unbound block index variables",
             ("blockbuster/ir/typecheck.py", "blockbuster/ir/verify.py"),
             "            if v not in scope:", "            if False:",
             ("tests/ir/test_verifier.py",)),
    # --- matcher ---------------------------------------------------------------------
    Mutation("matcher ignores repeated pattern variables", ("blockbuster/rewrite/matcher.py",),
             "    return old == value", "    return True",
             ("tests/rewrite/test_engine.py", "tests/conformance/test_guarded_fusion.py",
              "tests/cost/test_headline_results.py")),
]

IGNORE = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", "*.egg-info", ".hypothesis",
                                ".pytest_cache", ".ruff_cache", "build", "dist", ".venv")


def copy_tree(dest: Path) -> Path:
    copy = dest / "repo"
    shutil.copytree(ROOT, copy, ignore=IGNORE)
    return copy


def environment(copy: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), str(copy / "plugins" / "numba")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONPYCACHEPREFIX"] = str(copy.parent / "pycache")   # never the tree's .pyc
    return env


def check_imports(copy: Path, env: dict) -> None:
    """The copy's packages, not the editable install's, are what the tests import."""
    probe = ("import blockbuster, blockbuster_numba; "
             "print(blockbuster.__file__); print(blockbuster_numba.__file__)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=copy, env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    for path in out:
        if not Path(path).resolve().is_relative_to(copy.resolve()):
            sys.exit(f"mutation_check: {path} is imported from outside the copy {copy}")


def find_line(path: Path, original: str) -> int | None:
    lines = path.read_text().splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if original in line]
    return hits[0] if len(hits) == 1 else None


def run_mutation(m: Mutation, copy: Path, env: dict) -> tuple[str, str]:
    """(status, detail): killed, survived or stale."""
    target = next((f for f in m.files if (copy / f).exists()), None)
    if target is None:
        return "stale", f"none of {', '.join(m.files)} exists"
    path = copy / target
    line = find_line(path, m.original)
    if line is None:
        return "stale", f"{target}: the original text is not on exactly one line"
    tests = [t for t in m.tests if (copy / t).exists()]
    if not tests:
        return "stale", f"none of the tests {', '.join(m.tests)} exists"
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    lines[line] = lines[line].replace(m.original, m.replacement, 1)
    try:
        path.write_text("".join(lines))
        proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-x", "-q", "-p", "no:cacheprovider",
                               *tests], cwd=copy, env=env, capture_output=True, text=True,
                              timeout=900)
    except subprocess.TimeoutExpired:
        return "killed", "timed out"
    finally:
        path.write_text(text)
    out = proc.stdout.strip().splitlines() or ["(no output)"]
    summary = next((l for l in out if l.startswith(("FAILED", "ERROR"))), out[-1])
    if proc.returncode == 0:
        return "survived", f"{target}:{line + 1}: {summary}"
    return "killed", f"{target}:{line + 1}: {summary}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="run only mutations whose name contains one of these")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy")
    args = ap.parse_args()
    chosen = [m for m in MUTATIONS
              if not args.only or any(o in m.name for o in args.only)]
    tmp = Path(tempfile.mkdtemp(prefix="bb-mutation-"))
    try:
        copy = copy_tree(tmp)
        env = environment(copy)
        check_imports(copy, env)
        # Unmutated, the related tests pass: otherwise "killed" would mean nothing.
        baseline = sorted({t for m in chosen for t in m.tests if (copy / t).exists()})
        proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider",
                               *baseline], cwd=copy, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stdout[-3000:])
            sys.exit("mutation_check: the unmutated copy fails its tests")
        print(f"{len(chosen)} mutations, copy in {copy}; unmutated, {len(baseline)} test "
              f"files pass")
        results = []
        for m in chosen:
            start = time.perf_counter()
            status, detail = run_mutation(m, copy, env)
            results.append((m.name, status))
            print(f"{status:>8}  {m.name:<48} {time.perf_counter() - start:6.1f}s  {detail}",
                  flush=True)
        bad = [(n, s) for n, s in results if s != "killed"]
        print(f"{len(results) - len(bad)} of {len(results)} killed"
              + (": " + "; ".join(f"{n} {s}" for n, s in bad) if bad else ""))
        return 1 if bad else 0
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
