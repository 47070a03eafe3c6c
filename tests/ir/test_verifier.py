"""The verifier: one test per rejection, each checking the message names the
offending kernel (and node, where there is one)."""

from __future__ import annotations

import re

import pytest

from blockbuster import parse_program, verify
from blockbuster.errors import IRError
from blockbuster.ir import expr as E
from blockbuster.ir.program import Kernel, Store

BASE = """\
program base
dim M = 70 block 32
dim K = 50 block 16
dim N = 40 block 16
input X[M, K]
input W[K, N]
input b[N]
output Y[M, N]
array T[M, N]
kernel T for m in M, n in N:
  T[m, n] = sum(k in K: dot(X[m, k], W[k, n]))
kernel Y for m in M, n in N:
  Y[m, n] = colshift(b[n], exp(T[m, n]))
"""


def program(old: str = "", new: str = "", text: str = BASE):
    """BASE with one edit, parsed without verification."""
    assert old in text, old
    return parse_program(text.replace(old, new, 1), check=False)


def rejects(p, *fragments: str):
    """verify(p) raises an IRError whose message contains every fragment."""
    with pytest.raises(IRError) as info:
        verify(p)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def test_base_program_is_valid():
    p = program()
    assert verify(p) is p


def test_wrong_rank_subscripts():
    rejects(program("exp(T[m, n])", "exp(T[m])"),
            "kernel 'Y'", "array T has rank 2 but is indexed with 1 subscripts", "`T[m]`")


def test_unknown_array():
    rejects(program("exp(T[m, n])", "exp(U[m, n])"),
            "kernel 'Y'", "load of unknown array 'U'", "`U[m, n]`")


def test_dot_dimension_mismatch():
    rejects(program("dot(X[m, k], W[k, n])", "dot(W[k, n], X[m, k])"),
            "kernel 'T'", "dot contracts N with M", "`dot(W[k, n], X[m, k])`")


def test_unbound_index_variable_load_outside_the_loops():
    # k is bound by the reduce only: using it after the reduce is out of scope.
    rejects(program("sum(k in K: dot(X[m, k], W[k, n]))",
                    "add(sum(k in K: dot(X[m, k], W[k, n])), dot(X[m, k], W[k, n]))"),
            "kernel 'T'", "block index variable 'k' is not bound here", "`X[m, k]`")


def test_index_over_the_wrong_dimension():
    rejects(program("dot(X[m, k], W[k, n])", "dot(X[n, k], W[k, n])"),
            "kernel 'T'", "index 'n' runs over N but indexes dimension M", "`X[n, k]`")


def test_runmax_outside_online_softmax():
    rejects(program("sum(k in K: dot(X[m, k], W[k, n]))",
                    "sum(k in K: rowscale(runmax(k), dot(X[m, k], W[k, n])))"),
            "kernel 'T'", "runmax(k) outside an online_softmax over 'k'", "`runmax(k)`")


def test_array_written_twice():
    rejects(program("kernel Y for m in M, n in N:",
                    "kernel T2 for m in M, n in N:\n  T[m, n] = dot(X[m, 0], W[0, n])\n"
                    "kernel Y for m in M, n in N:"),
            "array T is written by both kernel 'T' and kernel 'T2'")


def test_read_before_produced():
    text = BASE.replace("kernel T for", "kernel Tmp for").split("kernel ")
    # Swap the two kernels: Y now reads T before kernel Tmp produces it.
    swapped = text[0] + "kernel " + text[2] + "kernel " + text[1]
    p = parse_program(swapped, check=False)
    rejects(p, "kernel 'Y' reads T, which is produced later, by kernel 'Tmp'")


def test_read_of_array_never_produced():
    p = program()
    rejects(p.evolve(kernels=p.kernels[1:]), "kernel 'Y' reads T, which is never produced")


def test_output_never_written():
    rejects(program("output Y[M, N]\n", "output Y[M, N]\noutput Z[M]\n"),
            "output Z is never written by any kernel")


def test_writing_an_input():
    rejects(program("kernel Y for m in M, n in N:",
                    "kernel Xw for m in M, k in K:\n  X[m, k] = neg(X[m, k])\n"
                    "kernel Y for m in M, n in N:"),
            "kernel 'Xw' writes input array X")


def test_store_missing_a_loop_variable():
    rejects(program("kernel Y for m in M, n in N:\n  Y[m, n]",
                    "kernel Y for m in M, n in N, k in K:\n  Y[m, n]"),
            "kernel 'Y', store to Y", "loop variable 'k' is not a subscript")


def test_store_value_type_mismatch():
    rejects(program("Y[m, n] = colshift(b[n], exp(T[m, n]))", "Y[m, n] = rowsum(T[m, n])"),
            "kernel 'Y', store to Y", "value has type block[M] but the array's blocks "
                                      "are block[M, N]")


def test_unknown_combiner():
    rejects(program("sum(k in K:", "prod(k in K:"),
            "kernel 'T'", "unknown combiner 'prod'", "`prod(k in K: dot(X[m, k], W[k, n]))`")


def test_wrong_arity():
    # The parser refuses wrong arities, so build the node directly.
    p = program()
    bad = E.call("exp", E.load("T", "m", "n"), E.load("T", "m", "n"))
    kernel = Kernel("Y", (("m", "M"), ("n", "N")), (Store("Y", p.kernels[1].stores[0].index, bad),))
    rejects(p.evolve(kernels=(p.kernels[0], kernel)),
            "kernel 'Y'", "operator 'exp' takes 1 argument, got 2", "`exp(T[m, n], T[m, n])`")


def test_wrong_number_of_reduce_bodies():
    rejects(program("sum(k in K: dot(X[m, k], W[k, n]))",
                    "online_softmax(k in K: dot(X[m, k], W[k, n])).0"),
            "kernel 'T'", "combiner 'online_softmax' needs at least 2 bodies, got 1")


def test_proj_out_of_range():
    rejects(program("sum(k in K: dot(X[m, k], W[k, n]))",
                    "sum(k in K: dot(X[m, k], W[k, n]), dot(X[m, k], W[k, n])).2"),
            "kernel 'T'", "proj index 2 out of range for 2 outputs")


def test_elementwise_op_on_a_tuple():
    rejects(program("sum(k in K: dot(X[m, k], W[k, n]))",
                    "exp(sum(k in K: dot(X[m, k], W[k, n]), dot(X[m, k], W[k, n])))"),
            "kernel 'T'", "'exp' cannot take a multi-output reduction")


def test_broadcast_along_the_wrong_axis():
    rejects(program("colshift(b[n], exp(T[m, n]))", "rowshift(b[n], exp(T[m, n]))"),
            "kernel 'Y'", "row vector along N does not match rows of block[M, N]")


def test_message_names_the_node_not_the_whole_kernel():
    message = rejects(program("exp(T[m, n])", "exp(U[m, n])"), "U[m, n]")
    # The snippet is the offending load, not the surrounding colshift.
    assert re.search(r"in `U\[m, n\]`$", message)


# -- ragged last blocks ------------------------------------------------------------
#
# K = 50 in blocks of 16 ends in a block of 2, M = 70 in blocks of 32 in one of 6:
# a block of such a dimension has one extent at its last index and another elsewhere,
# so blocks picked differently along it cannot be combined.

SUM_OF_BLOCKS = BASE.replace("output Y[M, N]", "output Y[M, N]\noutput s[M]") + """\
kernel s for m in M:
  s[m] = rowsum(sum(k in K: X[m, k]))
"""


def test_a_sum_adding_blocks_of_its_own_ragged_dimension_is_rejected():
    rejects(program(text=SUM_OF_BLOCKS), "kernel 's'", "sum over K combines blocks along K",
            "ends in a block of 2")
    even = program("dim K = 50 block 16", "dim K = 48 block 16", text=SUM_OF_BLOCKS)
    assert verify(even) is even            # blocks of equal extent add up


def test_a_sum_over_a_dimension_another_index_also_tiles_is_accepted():
    """A square weight's columns (``S[n2, n]``) and a causal mask's rows are axes of
    the summed dimension picked by another index: nothing is added across blocks."""
    text = BASE.replace("input b[N]", "input b[N]\ninput S[N, N]").replace(
        "Y[m, n] = colshift(b[n], exp(T[m, n]))",
        "Y[m, n] = sum(n2 in N: dot(T[m, n2], S[n2, n]))")
    p = program(text=text)
    assert verify(p) is p


def test_a_constant_block_of_a_ragged_dimension_cannot_meet_looped_blocks():
    rejects(program("colshift(b[n], exp(T[m, n]))", "add(T[m, n], T[1, n])"),
            "kernel 'Y'", "`T[1, n]` picks a block of M by a constant", "ends in a block of 6")
    rejects(program("colshift(b[n], exp(T[m, n]))", "T[0, n]"), "`T[0, n]` picks a block of M")
    # Reduced along M before it meets anything, or with M in equal blocks, it may.
    reduced = program("colshift(b[n], exp(T[m, n]))", "colshift(colsum(T[2, n]), T[m, n])")
    assert verify(reduced) is reduced
    even = program("colshift(b[n], exp(T[m, n]))", "add(T[m, n], T[1, n])",
                   text=BASE.replace("dim M = 70 block 32", "dim M = 64 block 32"))
    assert verify(even) is even


def test_storing_an_array_of_no_dimensions_says_how_to_declare_one():
    text = BASE.replace("output Y[M, N]", "output Y[M, N]\noutput s[]") + (
        "kernel s for m in M:\n  s[m] = vecsum(b[m])\n")
    rejects(program(text=text), "kernel 's'", "no dimensions cannot be stored",
            "dim U = 1 point")


def test_a_constant_block_past_the_end_is_named_as_such():
    """``T[9, n]`` with M in 3 blocks: the message said "at , in" (no loop index to
    name), and with M ragged it blamed the ragged last block instead."""
    for text in (BASE, BASE.replace("dim M = 70 block 32", "dim M = 64 block 32")):
        err = rejects(program("colshift(b[n], exp(T[m, n]))", "add(T[m, n], T[9, n])",
                              text=text),
                      "index 9 reads block 9 of M, which has", "in `T[9, n]`")
        assert ", at ," not in err and "ends in a block" not in err


def test_a_computed_block_index_of_a_ragged_dimension_keeps_the_last_block_last():
    """M = 70 in blocks of 32 ends in a block of 6. ``T[2 - m, n]`` and ``T[m // 2,
    n]`` pick a 32-long block where the loop is at the 6-long one (or the other way
    round): the verifier accepted them, the reference interpreter failed on the
    shapes, and the Numba backend read past the end of the array. A computed index
    that keeps the last block last, or M in whole blocks, is accepted."""
    rejects(program("colshift(b[n], exp(T[m, n]))", "T[2 - m, n]"),
            "kernel 'Y'", "index 2 - m of M = 70 in blocks of 32 picks block 2 (6 long)",
            "the loop's block 0 is 32 long", "at m=0", "in `T[2 - m, n]`")
    rejects(program("colshift(b[n], exp(T[m, n]))", "add(T[m, n], T[m // 2, n])"),
            "picks block 1 (32 long)", "the loop's block 2 is 6 long", "at m=2")
    kept = program("colshift(b[n], exp(T[m, n]))", "T[m * 1, n]")
    assert verify(kept) is kept
    even = BASE.replace("dim M = 70 block 32", "dim M = 96 block 32")
    for expr in ("T[2 - m, n]", "add(T[m, n], T[m // 2, n])"):
        p = program("colshift(b[n], exp(T[m, n]))", expr, text=even)
        assert verify(p) is p
