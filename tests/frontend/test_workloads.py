"""The built-in workloads: their interface (dims, inputs, outputs), their unfused
shape (one kernel per operator, intermediates in global memory), and their sizes."""

from __future__ import annotations

import pytest

import blockbuster
from blockbuster import UsageError, workload
from blockbuster.frontend.workloads import WORKLOADS

SPEC = {
    # name: (dims in order, inputs with their dims, outputs with their dims)
    "attention": (("N", "S", "D"),
                  {"Q": ("N", "D"), "K": ("S", "D"), "V": ("S", "D")},
                  {"O": ("N", "D")}),
    "layernorm_matmul": (("M", "K", "N"),
                         {"X": ("M", "K"), "gamma": ("K",), "beta": ("K",), "W": ("K", "N")},
                         {"Y": ("M", "N")}),
    "rmsnorm_ffn_swiglu": (("M", "D", "H"),
                           {"X": ("M", "D"), "g": ("D",), "W1": ("D", "H"),
                            "W3": ("D", "H"), "W2": ("H", "D")},
                           {"Y": ("M", "D")}),
    # the paper's introductory figure: C = A + B and d = rowsum(B)
    "paper_figure": (("M", "N"),
                     {"A": ("M", "N"), "B": ("M", "N")},
                     {"C": ("M", "N"), "d": ("M",)}),
}
UNFUSED_KERNELS = {"attention": 8, "layernorm_matmul": 10, "rmsnorm_ffn_swiglu": 11,
                   "paper_figure": 2}


def test_registry_lists_exactly_the_specified_workloads():
    # llama_block (head dimensions derived from NH/KVH) is specified in test_llama.py.
    assert set(WORKLOADS) == set(SPEC) | {"llama_block"}


@pytest.mark.parametrize("name", sorted(SPEC))
def test_interface_matches_the_spec(name):
    dims, inputs, outputs = SPEC[name]
    p = workload(name)
    assert tuple(d.name for d in p.dims) == dims
    assert tuple(WORKLOADS[name].dims) == dims
    assert p.inputs == tuple(inputs)
    assert p.outputs == tuple(outputs)
    for array, array_dims in {**inputs, **outputs}.items():
        assert p.array(array).dims == array_dims


@pytest.mark.parametrize("name", sorted(SPEC))
def test_unfused_is_one_kernel_per_operator(name):
    p = workload(name)
    assert len(p.kernels) == UNFUSED_KERNELS[name]
    # Every kernel but those writing outputs writes an intermediate that a later
    # kernel reads back.
    assert len(p.intermediates) == UNFUSED_KERNELS[name] - len(p.outputs)
    for array in p.intermediates:
        assert p.producer(array) is not None and p.consumers(array)


def test_attention_materialises_n_by_s_intermediates():
    p = workload("attention", N=200, D=32)
    big = [a for a in p.intermediates if p.array(a).dims == ("N", "S")]
    # scores, scaled scores, shifted, exp, probabilities: 5 N×S arrays; the row
    # max and row sum are N-vectors.
    assert len(big) == 5
    assert all(p.array(a).dims in (("N", "S"), ("N",)) for a in p.intermediates)
    assert p.shape(big[0]) == (200, 200)


def test_attention_s_defaults_to_n():
    assert workload("attention", N=100).dim("S").size == 100
    assert workload("attention").dim("S").size == workload("attention").dim("N").size
    assert workload("attention", N=100, S=30).dim("S").size == 30


def test_default_sizes():
    for name in SPEC:
        w = WORKLOADS[name]
        p = workload(name)
        for d in p.dims:
            expected = w.dims[w.derived[d.name]] if d.name in w.derived else w.dims[d.name]
            assert d.size == expected


def test_sizes_and_blocks_not_multiples():
    p = workload("layernorm_matmul", M=100, K=70, N=130, blocks={"M": 32, "K": 16})
    m, k, n = (p.dim(d) for d in "MKN")
    assert (m.size, m.block, m.nblocks, m.extent(3)) == (100, 32, 4, 4)
    assert (k.size, k.block, k.nblocks) == (70, 16, 5)
    assert n.block == 64 and n.nblocks == 3


def test_block_larger_than_size_is_clamped():
    p = workload("attention", N=10, D=8, blocks={"N": 64})
    assert p.dim("N").block == 10 and p.dim("D").block == 8


def test_public_workload_is_the_frontend_one():
    assert blockbuster.workload("attention", N=70) == workload("attention", N=70)


@pytest.mark.parametrize("kwargs,fragment", [
    ({"X": 3}, "workload attention has no dimension 'X'"),
    ({"M": 3}, "no dimension 'M'"),
    ({"blocks": {"Z": 8}}, "no dimension 'Z'"),
    ({"N": 0}, "dimension N"),
    ({"N": -5}, "dimension N"),
    ({"D": 2.5}, "dimension D"),
    ({"N": True}, "dimension N"),
    ({"blocks": {"N": 0}}, "dimension N"),
])
def test_bad_sizes_are_usage_errors(kwargs, fragment):
    with pytest.raises(UsageError, match=fragment):
        workload("attention", **kwargs)


def test_unknown_workload_lists_the_available_ones():
    with pytest.raises(UsageError, match="unknown workload 'attn'.*attention"):
        workload("attn")
