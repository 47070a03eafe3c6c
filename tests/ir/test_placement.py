"""The placement rule shared by the cost model and the code generators."""

from blockbuster.ir.expr import load, map_, reduce
from blockbuster.ir.parser import parse_program
from blockbuster.ir.placement import Binder, binds_loop, place, shared_loops
from blockbuster.ir.printer import format_program
from blockbuster.ir.verify import verify
from blockbuster.ir.types import Dim


def test_a_node_is_placed_in_the_innermost_loop_binding_one_of_its_variables():
    chain = [Binder("i"), Binder("k"), Binder("n")]
    assert place({"i"}, chain) == 1
    assert place({"k", "i"}, chain) == 2
    assert place({"n"}, chain) == 3
    assert place(set(), chain) == 0


def test_floor_shadowing_unbound_and_one_block_binders():
    assert place({"i"}, [Binder("i"), Binder("j")], floor=2) == 2
    # The innermost binder of a variable binds it.
    assert place({"k"}, [Binder("k"), Binder("i"), Binder("k")]) == 3
    # A variable nothing binds (a one-block loop left behind) does not move the node.
    assert place({"z", "i"}, [Binder("i"), Binder("j")]) == 1
    # A one-block binder does not keep a node inside it.
    assert place({"i", "q"}, [Binder("i"), Binder("q", loop=False)]) == 1


def test_only_a_whole_one_block_range_is_no_loop_except_online_softmax():
    one, two = Dim("P", 3, 4), Dim("K", 9, 2)
    body = load("B", "i", "q")
    assert not binds_loop(reduce("sum", "q", "P", body), one)
    assert not binds_loop(reduce("sum", "q", "P", body, lo=0, hi=1), one)
    assert binds_loop(reduce("sum", "q", "P", body, hi="i"), one)
    assert binds_loop(reduce("online_softmax", "q", "P", body), one)
    assert not binds_loop(map_("q", "P", body), one)
    assert binds_loop(map_("q", "K", body), two)
    assert binds_loop(reduce("sum", "q", "K", body), two)


SIBLINGS = """
program siblings
dim M = 7 block 3
dim N = 10 block 4
input A[M, N]
input B[M, N]
output C[M, N]
output d[M]
output e[M]
kernel k for i in M:
  C[i, :] = map(j in N: add(A[i, j], B[i, j]))
  d[i] = sum(j in N: rowsum(B[i, j]))
  e[i] = sum(j in N[1 : ]: rowsum(A[i, j]))
"""


def test_a_stored_map_shares_the_loop_of_a_whole_range_sibling_reduction():
    p = parse_program(SIBLINGS)
    (k,) = p.kernels
    shared = shared_loops(k)
    assert shared == {k.stores[0].value: k.stores[1].value}
    # The multi-output kernel's text form round-trips and it verifies.
    assert parse_program(format_program(p)) == p
    verify(p)


def test_a_map_that_uses_the_reduction_or_a_sub_range_shares_nothing():
    dependent = SIBLINGS.replace("add(A[i, j], B[i, j])",
                                 "rowscale(sum(j in N: rowsum(B[i, j])), A[i, j])")
    # (only the engine, mid-rewrite, writes a binder that shadows another)
    (k,) = parse_program(dependent, check=False).kernels
    assert shared_loops(k) == {}
    sub_range = SIBLINGS.replace("d[i] = sum(j in N: rowsum(B[i, j]))",
                                 "d[i] = sum(j in N[: 2]: rowsum(B[i, j]))")
    (k,) = parse_program(sub_range).kernels
    assert shared_loops(k) == {}
