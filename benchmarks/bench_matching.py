"""Matching throughput of compiled rule matchers, with and without the root-operator
index: 500+ synthetic rules against a program of thousands of expression nodes.

    python benchmarks/bench_matching.py [--rules 500] [--nodes 5000] [--seed 0]

Prints, for both strategies, the matcher calls, the time of one full scan (every node
against every candidate rule, as the engine does when nothing applies) and the
throughput, then the speedup of the index measured in the same run. A few planted
rules do match: both strategies must find exactly the same (rule, node) matches, or
the benchmark fails (an index that skips candidates would otherwise look fast).
"""

from __future__ import annotations

import argparse
import random
import re
import time

from blockbuster.dsl.loader import load_rules_text
from blockbuster.ir import expr as E
from blockbuster.ir import ops
from blockbuster.ir.index import IVar
from blockbuster.ir.program import Kernel, Program, Store
from blockbuster.ir.types import Dim, GlobalArray
from blockbuster.cost import DEFAULT_HARDWARE
from blockbuster.rewrite.engine import Engine

# A fixed workload, not the registry's list: the benchmark's numbers (README) must not
# drift when operators are added. Each must still be a registered operator.
UNARY = ["neg", "exp", "square", "tanh", "sigmoid", "silu", "abs", "recip", "sqrt", "log"]
BINARY = ["add", "sub", "mul", "max", "min", "div"]
assert set(UNARY) <= set(ops.UNARY) and set(BINARY) <= set(ops.BINARY)


def random_pattern(rng: random.Random, depth: int, names: list[str]) -> str:
    if depth == 0 or rng.random() < 0.25:
        # A constant the program never contains: rules reject deep, as real ones do.
        return "0.25" if rng.random() < 0.3 else rng.choice(names)
    if rng.random() < 0.5:
        return f"{rng.choice(UNARY)}({random_pattern(rng, depth - 1, names)})"
    return (f"{rng.choice(BINARY)}({random_pattern(rng, depth - 1, names)}, "
            f"{random_pattern(rng, depth - 1, names)})")


def synthetic_rules(n: int, rng: random.Random) -> str:
    lines = []
    for i in range(n):
        lhs = random_pattern(rng, 3, ["a", "b", "c"])
        while "(" not in lhs or "0.25" not in lhs or not re.search(r"\b[abc]\b", lhs):
            lhs = random_pattern(rng, 3, ["a", "b", "c"])
        var = next(v for v in "abc" if re.search(rf"\b{v}\b", lhs))
        # A right-hand side that never equals a real node: the scan never stops early.
        lines.append(f"rule r{i}: {lhs} => neg(neg(neg(neg(neg(neg(neg({var})))))))")
    # Rules that match many nodes of the program (the scan records and passes them).
    for i, lhs in enumerate(PLANTED):
        lines.append(f"rule planted{i}: {lhs} => neg(neg(neg(neg(neg(neg(neg(a)))))))")
    return "\n".join(lines) + "\n"


PLANTED = ["exp(a)", "add(a, b)", "mul(a, neg(b))", "max(square(a), b)", "tanh(tanh(a))"]


def synthetic_program(nodes: int, rng: random.Random) -> Program:
    leaves = [E.load("A", "i", "j"), E.load("B", "i", "j"), E.const(0.5)]
    pool = list(leaves)
    distinct = set(pool)
    while len(distinct) < nodes:
        if rng.random() < 0.5:
            node = E.call(rng.choice(UNARY), rng.choice(pool[-50:]))
        else:
            node = E.call(rng.choice(BINARY), rng.choice(pool[-50:]), rng.choice(pool))
        pool.append(node)
        distinct.add(node)
    value = pool[-1]
    for e in pool[-2000:]:
        value = E.call("add", value, e)
    dims = (Dim("M", 64, 32), Dim("N", 64, 32))
    arrays = (GlobalArray("A", ("M", "N")), GlobalArray("B", ("M", "N")),
              GlobalArray("C", ("M", "N")))
    kernel = Kernel("k", (("i", "M"), ("j", "N")), (Store("C", (IVar("i"), IVar("j")), value),))
    return Program("synthetic", dims, arrays, ("A", "B"), ("C",), (kernel,))


def scan(engine: Engine, program: Program) -> tuple[float, int, set]:
    """One full scan; returns (seconds, matcher calls, the (rule, node) pairs that
    matched). A match is recorded and reported as a failure, so the scan goes on over
    every node, as it does when nothing applies."""
    calls = 0
    matched: set = set()
    for name, fn in list(engine.compiled.matchers.items()):
        def counted(node, b, fn=fn, name=name):
            nonlocal calls
            calls += 1
            if fn(node, b):
                matched.add((name, node))
            return False
        engine.compiled.matchers[name] = counted
    index, _ = engine.compiled.by_phase["all"]
    start = time.perf_counter()
    assert engine._first_rewrite(program, index) is None
    return time.perf_counter() - start, calls, matched


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", type=int, default=500)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rules = load_rules_text(synthetic_rules(args.rules, rng), "synthetic.bbr")
    program = synthetic_program(args.nodes, rng)
    n_nodes = len({n for e in program.exprs() for n in e.walk()})
    print(f"{len(rules.rules)} rules, {n_nodes} distinct nodes")
    results, matches = {}, {}
    for label, use_index in (("indexed by root op", True), ("no index", False)):
        best = None
        for _ in range(3):
            engine = Engine(rules, hardware=DEFAULT_HARDWARE, use_index=use_index)  # fresh
            seconds, calls, matched = scan(engine, program)
            best = (seconds, calls) if best is None or seconds < best[0] else best
            assert matches.setdefault(label, matched) == matched, "scans differ between runs"
        seconds, calls = best
        results[label] = seconds
        print(f"{label:<20} {calls:>10} matcher calls  {seconds * 1e3:9.1f} ms/scan  "
              f"{n_nodes / seconds:12,.0f} nodes/s  {calls / seconds:12,.0f} calls/s")
    indexed, plain = matches["indexed by root op"], matches["no index"]
    assert indexed == plain, (f"the index changes what matches: {len(indexed)} matches "
                              f"indexed, {len(plain)} without")
    assert len({rule for rule, _ in plain}) == len(PLANTED), "every planted rule matches"
    print(f"both strategies find the same {len(plain)} matches")
    print(f"speedup of the index: {results['no index'] / results['indexed by root op']:.1f}x")


if __name__ == "__main__":
    main()
