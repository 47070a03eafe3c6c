"""The operator and combiner registry is the one source of names, arities, shapes,
FLOPs and reference semantics: an operator registered once (no other edit) is parsed,
verified, priced and run by the reference; shape rules work on any axis objects."""

import numpy as np
import pytest

from blockbuster.backends.reference import run_program
from blockbuster.cost import cost  # the public door: the default hardware
from blockbuster.errors import BlockbusterError, IRError
from blockbuster.ir import ops
from blockbuster.ir.combiners import COMBINERS
from blockbuster.ir.ops import OPS
from blockbuster.ir.parser import parse_program

PROGRAM = """program p
dim M = 7 block 3
dim N = 5 block 2
input X[M, N]
input Z[M, N]
output Y[M, N]
kernel k for i in M, j in N:
  Y[i, j] = {expr}
"""


def test_shape_rules_work_on_any_axis_objects():
    a, b, c = object(), object(), object()
    assert OPS["dot"].result_axes([(a, b), (b, c)]) == (a, c)
    assert OPS["transpose"].result_axes([(a, b)]) == (b, a)
    assert OPS["rowsum"].result_axes([(a, b)]) == (a,)
    assert OPS["colmax"].result_axes([(a, b)]) == (b,)
    assert OPS["rowscale"].result_axes([(a,), (a, b)]) == (a, b)
    assert OPS["outer"].result_axes([(a,), (c,)]) == (a, c)
    assert OPS["relabel"].result_axes([(c,), (a, b)]) == (a, c)
    # elementwise: a scalar operand broadcasts, in any position
    assert OPS["where"].result_axes([(), (a, b), ()]) == (a, b)
    assert OPS["add"].result_axes([(), ()]) == ()
    assert OPS["gelu"].result_axes([(a, b)]) == (a, b)


def test_flops_come_from_the_entry():
    count = lambda axes: 10 ** len(axes)        # noqa: E731 - 10 elements per axis
    assert OPS["dot"].flops_of([("M", "K"), ("K", "N")], count) == 2 * 1000
    assert OPS["rowsum"].flops_of([("M", "N")], count) == 100
    assert OPS["rotate_half"].flops_of([("M", "N")], count) == 50
    assert OPS["transpose"].flops_of([("M", "N")], count) == 0
    assert OPS["where"].flops_of([("M", "N"), (), ("M", "N")], count) == 100


def test_the_cost_model_prices_the_new_operators_per_element():
    p = parse_program(PROGRAM.format(expr="where(gt(X[i, j], Z[i, j]), gelu(X[i, j]), 0.5)"))
    assert cost(p).flops == 3 * 7 * 5          # gt, gelu, where: one FLOP per element


def test_the_verifier_types_where_and_comparisons_like_binary_ops():
    parse_program(PROGRAM.format(expr="where(1.0, X[i, j], 0.0)"))
    with pytest.raises(IRError, match="operand types differ"):
        parse_program(PROGRAM.format(expr="where(rowsum(X[i, j]), X[i, j], 0.0)"))
    with pytest.raises(BlockbusterError, match="takes 3 arguments, got 2"):
        parse_program(PROGRAM.format(expr="where(X[i, j], Z[i, j])"))


@pytest.fixture
def cube():
    """An operator added the way a maintainer adds one: one registry call."""
    spec = ops.elementwise("cube_for_test", 1, lambda x: x * x * x)
    yield spec
    del OPS[spec.name]


def test_one_registry_entry_makes_an_operator_usable(cube):
    p = parse_program(PROGRAM.format(expr="cube_for_test(add(X[i, j], Z[i, j]))"))
    x = np.arange(35.0).reshape(7, 5) / 7
    out = run_program(p, {"X": x, "Z": -x / 2}, dtype=np.float64)["Y"]
    np.testing.assert_allclose(out, (x / 2) ** 3, rtol=1e-15)
    assert cost(p).flops == 2 * 7 * 5


def test_registering_a_name_twice_is_refused():
    with pytest.raises(ValueError, match="registered twice"):
        ops.elementwise("exp", 1, np.exp)


def test_every_operator_of_a_program_is_registered_with_its_kind():
    assert set(ops.ELEMENTWISE) == set(ops.UNARY) | set(ops.BINARY) | {"where"}
    for name in ("gelu", "gelu_tanh", "erf", "relu", "lt", "le", "gt", "ge", "eq", "ne"):
        assert OPS[name].kind == "elementwise" and OPS[name].reference is not None


def test_combiner_entries_hold_shapes_flops_and_identities():
    a, b = object(), object()
    assert COMBINERS["online_softmax"].head_axes([(a, b)]) == [(a,)]
    assert COMBINERS["meanvar"].head_axes([(a, b)]) == [(), (a,), (a,)]
    assert COMBINERS["max"].identity(2) == [-np.inf, -np.inf]
    assert COMBINERS["online_softmax"].identity(3) == [-np.inf, 0.0, 0.0]
    assert COMBINERS["meanvar"].identity(4) == [0.0] * 4
    assert COMBINERS["online_softmax"].passenger_flops == 2
    assert COMBINERS["meanvar"].head_flops == (4, 8)
