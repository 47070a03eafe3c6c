"""Program lookups memoised per declaration tuple answer as their definitions do."""

from __future__ import annotations

import attrs

import blockbuster as bb
from blockbuster.ir.types import GlobalArray
from blockbuster.select.extract import canonical, segment_program


def _programs():
    p = bb.workload("llama_block", layers=1)
    yield p
    yield canonical(p)[0]
    yield segment_program(p, 3, 9)
    yield bb.fuse(bb.workload("layernorm_matmul"), progress=False).program


def test_maps_and_lookups_agree_with_the_declarations():
    for p in _programs():
        assert p.dim_map == {d.name: d for d in p.dims}
        assert p.array_map == {a.name: a for a in p.arrays}
        for a in p.arrays:
            assert p.array(a.name) is next(x for x in p.arrays if x.name == a.name)
            assert p.shape(a.name) == tuple(p.dim_map[d].size for d in a.dims)
        # A step keeps the tuples: the same maps come back.
        step = p.evolve(kernels=p.kernels[1:])
        assert step.array_map is p.array_map and step.dim_map is p.dim_map


def test_a_name_declared_twice_answers_as_the_linear_search_did():
    p = bb.workload("layernorm_matmul")
    first = p.arrays[0]
    other = GlobalArray(first.name, first.dims[::-1])
    twice = p.evolve(arrays=p.arrays + (other,))
    assert twice.array(first.name) is first            # the first declaration
    assert twice.array_map[first.name] is other         # a dict keeps the last
    assert p.array_map[first.name] is first             # the other tuple: its own map


def test_is_intermediate_is_membership_in_intermediates():
    for p in _programs():
        names = [a.name for a in p.arrays] + ["not_declared"]
        for name in names:
            assert p.is_intermediate(name) == (name in p.intermediates)
        outputs_only = attrs.evolve(p, outputs=p.outputs + tuple(p.intermediates[:1]))
        for name in names:
            assert outputs_only.is_intermediate(name) == (name in outputs_only.intermediates)
