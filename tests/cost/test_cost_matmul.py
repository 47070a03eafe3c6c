"""The plain tiled matmul, checked against formulas written out by hand."""

import json

from blockbuster.cost import DEFAULT_HARDWARE, cost, format_cost_table

from helpers_cost import cdiv, program

M, BM, K, BK, N, BN = 100, 32, 70, 32, 50, 16

MATMUL = f"""
program mm
dim M = {M} block {BM}
dim K = {K} block {BK}
dim N = {N} block {BN}
input A[M, K]
input B[K, N]
output C[M, N]
kernel mm for i in M, j in N:
  C[i, j] = sum(k in K: dot(A[i, k], B[k, j]))
"""


def test_ragged_matmul_bytes_match_the_hand_formula():
    c = cost(program(MATMUL))
    # Each (i, j) instance streams a row of A-blocks and a column of B-blocks, so A is
    # read once per block-column of C and B once per block-row of C.
    a_bytes = 4 * M * K * cdiv(N, BN)
    b_bytes = 4 * K * N * cdiv(M, BM)
    assert c.kernels == 1
    assert c.loaded_bytes == a_bytes + b_bytes == 4 * (7000 * 4 + 3500 * 4)
    assert c.stored_bytes == 4 * M * N
    assert c.global_bytes == a_bytes + b_bytes + 4 * M * N
    assert c.compulsory_bytes == 4 * (M * K + K * N + M * N)


def test_ragged_matmul_flops_and_footprint():
    c = cost(program(MATMUL))
    # The sum's accumulate is part of dot's 2·R·K·C, so exactly the textbook count.
    assert c.flops == 2 * M * N * K
    # A-block, B-block, the dot's result and the accumulator, all at full block size.
    assert c.local_bytes == 4 * (BM * BK + BK * BN + BM * BN + BM * BN)
    assert c.fits


def test_roofline_time_and_reports():
    c = cost(program(MATMUL))
    hw = DEFAULT_HARDWARE
    expected = max(c.global_bytes / hw.global_bandwidth_bytes_per_s, c.flops / hw.peak_flops)
    assert c.time_estimate == c.per_kernel[0].time_estimate == expected
    d = json.loads(json.dumps(c.as_dict()))
    assert d["loaded_bytes"] == c.loaded_bytes and d["kernels"] == 1
    assert d["per_kernel"][0]["name"] == "mm" and d["per_kernel"][0]["flops"] == c.flops
    assert d["hardware"]["name"] == hw.name
    table = format_cost_table(c)
    assert "mm" in table and f"{c.loaded_bytes:,}" in table and f"{c.flops:,}" in table
    assert "compulsory" in table


def test_hoisted_load_is_read_once_per_instance():
    # G[i] does not use k: it runs once per kernel instance, not once per step of k.
    c = cost(program("""
program hoist
dim M = 100 block 32
dim K = 70 block 32
input X[M, K]
input G[M]
output Y[M]
kernel k for i in M:
  Y[i] = sum(k in K: rowsum(rowscale(G[i], X[i, k])))
"""))
    assert c.loaded_bytes == 4 * M + 4 * M * K
    assert c.stored_bytes == 4 * M
    # rowscale and rowsum: one FLOP per element of X each; the sum adds M per step.
    assert c.flops == 2 * M * K + M * cdiv(K, 32)


def test_shared_load_once_per_loop_and_twice_for_two_loops():
    base = """
program share
dim M = 100 block 32
dim K = 70 block 32
input X[M, K]
output Y[M]
output Z[M]
kernel k for i in M:
"""
    # One reduction using X[i, k] twice: hash-consing makes it one load per step.
    one = cost(program(base + "  let r = sum(k in K: rowsum(X[i, k]), rowmax(X[i, k]))\n"
                              "  Y[i] = r.0\n  Z[i] = r.1\n"))
    assert one.loaded_bytes == 4 * M * K
    # Two separate reductions are two loops: each loads X.
    two = cost(program(base + "  Y[i] = sum(k in K: rowsum(X[i, k]))\n"
                              "  Z[i] = sum(k in K: rowmax(X[i, k]))\n"))
    assert two.loaded_bytes == 2 * 4 * M * K
    assert one.stored_bytes == two.stored_bytes == 2 * 4 * M


def test_row_of_accumulators_map():
    # A mega-kernel style matmul: per block-row i, a map over all N blocks. A[i, k]
    # does not use n, so it is loaded once per (i, k): A is read exactly once.
    c = cost(program(f"""
program rowmm
dim M = {M} block {BM}
dim K = {K} block {BK}
dim N = {N} block {BN}
input A[M, K]
input B[K, N]
output C[M, N]
kernel mm for i in M:
  C[i, :] = sum(k in K: map(n in N: dot(A[i, k], B[k, n])))
"""))
    assert c.loaded_bytes == 4 * M * K + 4 * K * N * cdiv(M, BM)
    assert c.stored_bytes == 4 * M * N
    assert c.flops == 2 * M * N * K
    row = cdiv(N, BN) * BM * BN          # the map array (and the sum over it)
    assert c.local_bytes == 4 * (BM * BK + BK * BN + BM * BN + 2 * row)
