"""The headline results of the README, pinned exactly (default rules, default
hardware): fused attention moves the Flash Attention bytes; kernels per call and
weight-preparation kernels of each workload; LayerNorm+Matmul holds its output row
where it fits (N=512) and recomputes per output tile where it does not (N=2048);
per-call bytes leave weight preparation out."""

import math

import pytest

from blockbuster.cost import DEFAULT_HARDWARE, cost
from blockbuster.dsl.loader import default_rules
from blockbuster.frontend.workloads import workload
from blockbuster.ir.prep import split_weight_prep
from blockbuster.rewrite.engine import fuse


def fused(name, **sizes):
    return fuse(workload(name, **sizes), default_rules(), hardware=DEFAULT_HARDWARE).program


def kernels_and_prep(program):
    """(kernels run on every call, kernels that read only weights: done once)."""
    prep = [k for k in program.kernels if k.reads() and k.reads() <= set(program.weights)]
    return len(program.kernels) - len(prep), len(prep)


@pytest.mark.parametrize("n, d", [(256, 64), (200, 64), (1000, 32)])
def test_fused_attention_moves_exactly_the_flash_attention_bytes(n, d):
    p = fused("attention", N=n, D=d)
    assert len(p.kernels) == 1 and p.intermediates == ()
    # Q read and O written once; K and V read once per 64-row query block.
    assert cost(p).global_bytes == 4 * (2 * n * d + math.ceil(n / 64) * 2 * n * d)


@pytest.mark.parametrize("name, per_call, prep", [
    ("attention", 1, 0),
    ("layernorm_matmul", 1, 0),
    ("rmsnorm_ffn_swiglu", 1, 2),      # gain folded into W1 and W3, once
])
def test_kernels_per_call_and_weight_preparation(name, per_call, prep):
    before = workload(name)
    p = fused(name)
    c = cost(p)
    assert sum(k.weight_prep for k in c.per_kernel) == prep
    assert len(p.kernels) - prep == per_call
    assert kernels_and_prep(p) == (per_call, prep)
    assert len(before.kernels) == {"attention": 8, "layernorm_matmul": 10,
                                   "rmsnorm_ffn_swiglu": 11}[name]


@pytest.mark.parametrize("m, n", [(256, 256), (100, 70), (4096, 4096)])
def test_paper_figure_is_one_kernel_reading_b_once(m, n):
    # C = A + B and d = rowsum(B): two kernels unfused (B read twice), one fused
    # multi-output kernel (C[i, :] a map over j, d[i] a sum over j) whose map shares
    # the sum's loop: every block moved once, the compulsory bytes. (A row of C is
    # written block by block, never held: it fits for any N.)
    before = workload("paper_figure", M=m, N=n)
    p = fused("paper_figure", M=m, N=n)
    assert len(before.kernels) == 2 and len(p.kernels) == 1
    (kernel,) = p.kernels
    assert sorted(kernel.writes()) == ["C", "d"]
    assert cost(before).global_bytes == 4 * (4 * m * n + m)
    assert cost(p).global_bytes == cost(p).compulsory_bytes == 4 * (3 * m * n + m)


@pytest.mark.parametrize("n, holds", [(512, True), (2048, False)])
def test_layernorm_matmul_holds_the_output_row_only_where_it_fits(n, holds):
    p = fused("layernorm_matmul", M=2048, K=1024 if n == 512 else 2048, N=n)
    split = split_weight_prep(p)
    (kernel,) = split.per_call.kernels
    loops = [dim for _var, dim in kernel.loops]
    (store,) = kernel.stores
    if holds:   # one pass over X per row block: the whole output row is local
        assert loops == ["M"] and store.index[1] is None
    else:       # one output tile at a time: what reads only weights is prepared
        assert loops == ["M", "N"] and store.index[1] is not None
        # gamma·W, and the column sums of gamma·W and beta·W that every tile would
        # otherwise accumulate again beside its dot: the tile reads X and them.
        assert len(split.prep.kernels) == 3
        assert kernel.reads() == {"X"} | set(split.prepared)


def test_per_call_bytes_leave_weight_preparation_out():
    p = fused("rmsnorm_ffn_swiglu")
    c = cost(p)
    prep_bytes = sum(k.global_bytes for k in c.per_kernel if k.weight_prep)
    assert prep_bytes == 2113536 and c.weight_prep_bytes == prep_bytes
    assert c.global_bytes == 6569984
    assert c.per_call_bytes == c.global_bytes - prep_bytes == 4456448
