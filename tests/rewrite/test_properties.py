"""Property tests: random well-formed block programs, pushed through the engine with
the shipped rule sets, keep their outputs, verify, and round-trip through text."""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from blockbuster.backends.reference import run_program
from blockbuster.dsl.loader import load_rules, shipped_rulesets_dir
from blockbuster.frontend.builder import GraphBuilder
from blockbuster.ir import ops
from blockbuster.ir.parser import parse_program
from blockbuster.ir.verify import verify
from blockbuster.cost import DEFAULT_HARDWARE
from blockbuster.rewrite import engine as _engine
from blockbuster.validate import random_inputs


def fuse(program, *args, **kwargs):
    """The engine, for the default hardware (the reference backend's)."""
    return _engine.fuse(program, *args, hardware=DEFAULT_HARDWARE, **kwargs)

RULESETS = [load_rules(p) for p in sorted(shipped_rulesets_dir().glob("*.bbr"))]
UNARY = [n for n in ops.UNARY if ops.OPS[n].domain == "real"]   # exp: of tanh, below


@st.composite
def programs(draw):
    g = GraphBuilder("random")
    for d in ("M", "N", "K"):
        size = draw(st.integers(1, 9))
        g.dim(d, size, draw(st.integers(1, 4)))
    pool = {("M", "N"): [g.input("X", "M", "N"), g.input("Y", "M", "N")],
            ("N", "K"): [g.weight("W", "N", "K")], ("N",): [g.weight("v", "N")],
            ("M",): [g.input("r", "M")]}
    last = None
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["unary", "binary", "broadcast", "matmul", "reduce",
                                     "softmax", "rms_norm", "layer_norm"]))
        mn = pool[("M", "N")]
        a = draw(st.sampled_from(mn))
        if kind == "unary":
            op = draw(st.sampled_from(UNARY))
            src = g.unary("tanh", a) if op in ("exp", "expm1") else a   # keep in range
            last = g.unary(op, src)
        elif kind == "binary":
            last = g.binary(draw(st.sampled_from(["add", "sub", "mul"])), a,
                            draw(st.sampled_from(mn)))
        elif kind == "broadcast":
            vec = draw(st.sampled_from(pool[("N",)] + pool[("M",)]))
            last = g.binary(draw(st.sampled_from(["add", "sub", "mul"])), a, vec)
        elif kind == "matmul":
            out = g.matmul(a, draw(st.sampled_from(pool[("N", "K")])))
            pool.setdefault(("M", "K"), []).append(out)
            last = out
            continue
        elif kind == "reduce":
            last = g.row_reduce(draw(st.sampled_from(["sum", "max"])), a,
                                mean=draw(st.booleans()))
            pool[("M",)].append(last)
            continue
        elif kind == "softmax":
            last = g.softmax(a)
        elif kind == "rms_norm":
            last = g.rms_norm(a, pool[("N",)][0], 1e-6)
        else:
            last = g.layer_norm(a, pool[("N",)][0], pool[("N",)][0], 1e-5)
        mn.append(last)
    return g.build(last) if last is not None and last.name not in ("X", "Y") else None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.sampled_from(range(len(RULESETS))), st.integers(0, 2**16))
def test_fusion_keeps_outputs_verifies_and_round_trips(program, which, seed):
    if program is None:
        return
    result = fuse(program, RULESETS[which])
    assert result.stop_reason == "saturated"
    fused = verify(result.program)
    assert parse_program(str(fused)) == fused
    inputs = random_inputs(program, seed=seed)
    before = run_program(program, inputs, dtype=np.float64)
    after = run_program(fused, inputs, dtype=np.float64)
    for name in program.outputs:
        scale = max(1.0, float(np.max(np.abs(before[name]))))
        np.testing.assert_allclose(after[name], before[name], rtol=1e-7, atol=1e-7 * scale)
    assert len(fused.kernels) <= len(program.kernels)
