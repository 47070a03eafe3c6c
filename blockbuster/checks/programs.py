"""Random well-formed block programs (unfused), for checking structural actions
beyond the built-in workloads. The same generator as the property tests' hypothesis
strategy (``tests/rewrite/test_properties.py``), driven by a ``random.Random``."""

from __future__ import annotations

import random

from ..frontend.builder import GraphBuilder
from ..ir import ops
from ..ir.program import Program

#: Unary operators defined on every real (the registry's domain "real"); exp and
#: expm1 are fed tanh of their operand to stay in range.
UNARY = tuple(n for n in ops.UNARY if ops.OPS[n].domain == "real")
STEPS = ("unary", "binary", "broadcast", "matmul", "reduce", "softmax", "rms_norm",
         "layer_norm")


def random_program(rng: random.Random, max_steps: int = 6) -> Program:
    """A random chain of tensor operations over ragged dimensions M, N, K."""
    while True:
        program = _attempt(rng, max_steps)
        if program is not None:
            return program


def _attempt(rng: random.Random, max_steps: int) -> Program | None:
    g = GraphBuilder("random")
    for d in ("M", "N", "K"):
        g.dim(d, rng.randint(1, 9), rng.randint(1, 4))
    pool = {("M", "N"): [g.input("X", "M", "N"), g.input("Y", "M", "N")],
            ("N", "K"): [g.weight("W", "N", "K")], ("N",): [g.weight("v", "N")],
            ("M",): [g.input("r", "M")]}
    last = None
    for _ in range(rng.randint(1, max_steps)):
        kind = rng.choice(STEPS)
        mn = pool[("M", "N")]
        a = rng.choice(mn)
        if kind == "unary":
            op = rng.choice(UNARY)
            last = g.unary(op, g.unary("tanh", a) if op in ("exp", "expm1") else a)
        elif kind == "binary":
            last = g.binary(rng.choice(["add", "sub", "mul"]), a, rng.choice(mn))
        elif kind == "broadcast":
            vec = rng.choice(pool[("N",)] + pool[("M",)])
            last = g.binary(rng.choice(["add", "sub", "mul"]), a, vec)
        elif kind == "matmul":
            last = g.matmul(a, rng.choice(pool[("N", "K")]))
            pool.setdefault(("M", "K"), []).append(last)
            continue
        elif kind == "reduce":
            last = g.row_reduce(rng.choice(["sum", "max"]), a, mean=rng.random() < 0.5)
            pool[("M",)].append(last)
            continue
        elif kind == "softmax":
            last = g.softmax(a)
        elif kind == "rms_norm":
            last = g.rms_norm(a, pool[("N",)][0], 1e-6)
        else:
            last = g.layer_norm(a, pool[("N",)][0], pool[("N",)][0], 1e-5)
        mn.append(last)
    if last is None or last.name in ("X", "Y"):
        return None
    return g.build(last)
