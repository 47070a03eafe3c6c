"""The text form: parse(format(p)) == p for built-in workloads and for hand-written
programs that use every syntax form of the grammar."""

from __future__ import annotations

import math

import pytest

from blockbuster import format_program, parse_program, workload
from blockbuster.errors import SourceError
from blockbuster.frontend.workloads import WORKLOADS
from blockbuster.ir import expr as E
from blockbuster.ir.index import as_idx

# Several sizes per workload, mostly not multiples of the block sizes (ragged blocks),
# including dimensions smaller than one block.
SIZES = {
    "attention": [{}, {"N": 1, "D": 8}, {"N": 200}, {"N": 70, "S": 130, "D": 24}],
    "layernorm_matmul": [{}, {"M": 1, "K": 3, "N": 5}, {"M": 100, "K": 77, "N": 130}],
    "rmsnorm_ffn_swiglu": [{}, {"M": 2, "D": 3, "H": 5}, {"M": 65, "D": 100, "H": 129}],
    "paper_figure": [{}, {"M": 1, "N": 3}, {"M": 100, "N": 130}],
    "llama_block": [{}, {"T": 1, "E": 2, "NH": 1, "KVH": 1, "F": 1},
                    {"T": 50, "E": 48, "NH": 6, "KVH": 3, "F": 70, "layers": 2}],
}
BLOCKS = [None, {"N": 32}, {"N": 16, "M": 16}]


def test_every_workload_has_sizes_here():
    assert set(SIZES) == set(WORKLOADS)


@pytest.mark.parametrize("name,sizes", [(n, s) for n, ss in SIZES.items() for s in ss])
@pytest.mark.parametrize("blocks", BLOCKS)
def test_workload_round_trip(name, sizes, blocks):
    blocks = {d: b for d, b in (blocks or {}).items() if d in WORKLOADS[name].dims}
    p = workload(name, blocks=blocks, **sizes)
    text = format_program(p)
    q = parse_program(text)
    assert q == p
    assert format_program(q) == text
    # Hash-consing: the parsed kernels share the very same expression objects.
    assert all(a.value is b.value for ka, kb in zip(p.kernels, q.kernels)
               for a, b in zip(ka.stores, kb.stores))


# Causal grouped-query flash attention: point dims, `h // 2` indices, a reduction
# range `S[ : n + 1]`, pos/keep_ge masking, online_softmax with runmax, a multi-output
# reduction read with `.1`/`.2`, and a let binding the printer must reproduce.
CAUSAL_GQA = """\
program causal_gqa
dim H = 4 point
dim G = 2 point
dim N = 100 block 32
dim S = 100 block 32
dim D = 16 block 16
input Q[H, N, D]
input K[G, S, D]
input V[G, S, D]
output O[H, N, D]
kernel O for h in H, n in N, d in D:
  let r = online_softmax(j in S[ : n + 1]: keep_ge(pos(N, n), pos(S, j), mul(sum(e in D: dot(Q[h, n, e], transpose(K[h // 2, j, e]))), 0.25)), dot(exp(rowshift(neg(runmax(j)), keep_ge(pos(N, n), pos(S, j), mul(sum(e in D: dot(Q[h, n, e], transpose(K[h // 2, j, e]))), 0.25)))), V[h // 2, j, d]), rowsum(exp(rowshift(neg(runmax(j)), keep_ge(pos(N, n), pos(S, j), mul(sum(e in D: dot(Q[h, n, e], transpose(K[h // 2, j, e]))), 0.25))))))
  O[h, n, d] = rowscale(recip(r.2), r.1)
"""


def _causal_gqa_by_hand():
    """The same program, built with the expression builders."""
    k = E.call("transpose", E.load("K", as_idx("h") // 2, "j", "e"))
    scores = E.reduce("sum", "e", "D", E.call("dot", E.load("Q", "h", "n", "e"), k))
    x = E.call("keep_ge", E.pos("N", "n"), E.pos("S", "j"), E.call("mul", scores, E.const(0.25)))
    p = E.call("exp", E.call("rowshift", E.call("neg", E.runmax("j")), x))
    r = E.reduce("online_softmax", "j", "S", x,
                 E.call("dot", p, E.load("V", as_idx("h") // 2, "j", "d")),
                 E.call("rowsum", p), hi=as_idx("n") + 1)
    return E.call("rowscale", E.call("recip", E.proj(r, 2)), E.proj(r, 1))


# A local array of accumulators stored with ':', a range `K[1 : ]`, a meanvar
# reduction with projections, index arithmetic (on a dimension of whole blocks: a
# computed index of a ragged one must keep its last block last), comments, and constants that are
# negative, infinite, signed zero, and written with exponents.
MISC = """\
program misc  # comments are ignored
dim M = 70 block 32
dim K = 64 block 16
dim N = 40 block 16
input X[M, K]
input W[K, N]
output Y[M, N]
output Z[M, N]
output St[M]
output T[M, K]
kernel Y for m in M:
  Y[m, :] = map(n in N: sum(k in K[1 : ]: dot(X[m, k], W[k, n])))
kernel Z for m in M, n in N:
  Z[m, n] = min(max(mul(sum(k in K[0 : 2]: dot(X[m, k], W[k, n])), -1.5e-3), -inf), inf)
kernel St for m in M:
  # meanvar gives (count, sum, sum of squared deviations)
  St[m] = mul(rsqrt(add(mul(meanvar(k in K: X[m, k]).2, 0.02), 1e-05)), add(meanvar(k in K: X[m, k]).1, -0.0))
kernel T for m in M, k in K:
  T[m, k] = add(mul(X[m, (k * 2 + 1) // 3], 2.5e-08), sub(X[m, k - k // 2], sub(1e+30, -7.0)))
"""


# A weight with no dimensions (a learnable scalar imported from PyTorch: a
# temperature of shape [1]) is declared and loaded with empty brackets.
SCALAR_WEIGHT = """\
program scalar_weight
dim N = 37 block 16
input X[N]
weight t[]
output Y[N]
kernel Y for n in N:
  Y[n] = mul(X[n], t[])
"""


@pytest.mark.parametrize("text", [CAUSAL_GQA, MISC, SCALAR_WEIGHT],
                         ids=["causal_gqa", "misc", "scalar_weight"])
def test_hand_written_round_trip(text):
    p = parse_program(text)
    printed = format_program(p)
    q = parse_program(printed)
    assert q == p
    assert format_program(q) == printed


def test_causal_gqa_matches_builders():
    p = parse_program(CAUSAL_GQA)
    (store,) = p.kernels[0].stores
    assert store.value is _causal_gqa_by_hand()
    printed = format_program(p)
    assert "S[ : n + 1]" in printed and "h // 2" in printed and "runmax(j)" in printed
    assert "dim H = 4 point" in printed
    # The reduction is shared by .1 and .2, so the printer names it once with a let.
    assert printed.count("online_softmax(") == 1


def test_misc_forms_survive():
    p = parse_program(MISC)
    printed = format_program(p)
    assert "Y[m, :] = map(n in N:" in printed
    assert "K[1 : ]" in printed and "K[0 : 2]" in printed
    consts = {n.attr for e in p.exprs() for n in e.walk() if n.op == "const"}
    assert {-1.5e-3, 1e-05, 2.5e-08, 1e30, -7.0} <= consts
    assert math.inf in consts and -math.inf in consts
    # -0.0 keeps its sign through print and parse.
    zeros = [c for c in consts if c == 0.0]
    assert len(zeros) == 1 and math.copysign(1.0, zeros[0]) == -1.0
    q = parse_program(printed)
    zeros_q = [n.attr for e in q.exprs() for n in e.walk() if n.op == "const" and n.attr == 0]
    assert math.copysign(1.0, zeros_q[0]) == -1.0


def test_let_bound_twice_is_a_source_error():
    bad = MISC.replace("kernel T for m in M, k in K:\n",
                       "kernel T for m in M, k in K:\n  let a = X[m, 0]\n  let a = X[m, 1]\n")
    with pytest.raises(SourceError, match="let 'a' is bound twice"):
        parse_program(bad)


def test_syntax_error_has_position_and_caret():
    bad = CAUSAL_GQA.replace("O[h, n, d] = rowscale", "O[h, n, d] = = rowscale")
    with pytest.raises(SourceError) as info:
        parse_program(bad, filename="bad.bbp")
    err = info.value
    line = 1 + bad.splitlines().index("  O[h, n, d] = = rowscale(recip(r.2), r.1)")
    assert err.filename == "bad.bbp" and err.line == line
    rendered = err.render().splitlines()
    assert rendered[0].startswith(f"bad.bbp:{line}:")
    assert rendered[2].strip() == "^"
    assert rendered[1][4 + err.column - 1] == "="   # the caret sits under the token


def test_wrong_arity_is_rejected_by_the_parser():
    bad = MISC.replace("rsqrt(add(", "rsqrt(0.5, add(")
    with pytest.raises(SourceError, match="operator 'rsqrt' takes 1 argument, got 2"):
        parse_program(bad)
