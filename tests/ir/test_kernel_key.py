"""Name-free kernel keys: what the verifier's and the cost model's memos share."""

from __future__ import annotations

import blockbuster as bb
from blockbuster.cost.model import cost
from blockbuster.ir.kernel_key import kernel_key, rename_kernel
from blockbuster.ir.verify import verify
from blockbuster.select.extract import canonical, rename


def _two_layers():
    return bb.workload("llama_block", layers=2)


def test_the_same_kernel_of_two_layers_has_one_key():
    p = _two_layers()
    half = len(p.kernels) // 2
    first, second = p.kernels[1], p.kernels[half + 1]     # layer 0's and layer 1's
    assert first.reads() != second.reads()                # different weights
    assert kernel_key(first, p) == kernel_key(second, p)


def test_different_kernels_or_declarations_have_different_keys():
    p = _two_layers()
    assert kernel_key(p.kernels[0], p) != kernel_key(p.kernels[1], p)
    bigger = bb.workload("llama_block", layers=2, T=80)   # same text, other sizes
    assert kernel_key(p.kernels[1], p) != kernel_key(bigger.kernels[1], bigger)


def test_renaming_through_the_key_equals_renaming_node_by_node():
    p = _two_layers()
    canon, arrays_back, kernels_back = canonical(p)
    back = rename(canon, arrays_back, kernels_back)
    # The canonical form declares inputs in order of first use (so that the same part
    # of two layers is named alike); renamed back, only that order may differ.
    assert back.kernels == p.kernels and back.dims == p.dims
    assert back.outputs == p.outputs
    assert set(back.arrays) == set(p.arrays) and len(back.arrays) == len(p.arrays)
    assert set(back.inputs) == set(p.inputs) and set(back.weights) == set(p.weights)
    assert canonical(back)[0] == canon
    for k in p.kernels:
        names = {a: a.upper() + "_x" for a in k.reads() | set(k.writes())}
        renamed = rename_kernel(k, names, "other")
        assert renamed.name == "other"
        assert renamed.reads() == {names[a] for a in k.reads()}
        assert rename_kernel(renamed, {v: a for a, v in names.items()}, k.name) == k


def test_memoised_prices_and_verdicts_follow_the_names():
    p = _two_layers()
    canon = canonical(p)[0]
    verify(p)
    verify(canon)          # the same kernels under other names: memo hits, still checked
    a, b = cost(p, bb.cost.DEFAULT_HARDWARE), cost(canon, bb.cost.DEFAULT_HARDWARE)
    assert a.objective == b.objective
    assert [k.name for k in a.per_kernel] == [k.name for k in p.kernels]
    assert [k.name for k in b.per_kernel] == [k.name for k in canon.kernels]


def test_the_key_tells_kernels_apart_exactly_as_canonical_renaming_does():
    # The key is built node by node (structure numbers); the canonical kernel (arrays
    # renamed a0, a1... in order of first use) is the definition it must agree with,
    # on every kernel a fusion meets: equal keys exactly for equal canonical kernels.
    from blockbuster.ir.kernel_key import _canonical
    p = bb.workload("llama_block", layers=1)
    steps = bb.fuse(p, progress=False).trace
    kernels = {k for s in steps for prog in (s.program_before, s.program_after)
               for k in prog.kernels}
    kernels |= set(p.kernels) | {rename_kernel(k, {a: a + "_r" for a in k.reads()}, "r")
                                 for k in p.kernels}
    kernels = sorted(kernels, key=lambda k: (k.name, str(k)))
    assert len(kernels) > 20
    by_key, by_canon = {}, {}
    for k in kernels:
        by_key.setdefault(kernel_key(k, p)[0], set()).add(k)
        by_canon.setdefault(_canonical(k)[0], set()).add(k)
    assert max(len(group) for group in by_key.values()) >= 2
    assert sorted(map(frozenset, by_key.values()), key=sorted_names) == sorted(
        map(frozenset, by_canon.values()), key=sorted_names)


def sorted_names(group):
    return sorted(str(k) for k in group)


def test_candidate_keys_agree_with_canonical_programs():
    # Selection looks candidates up by ``canonical_key`` before building the renamed
    # program: two segments (here of two layers, where many are the same up to names)
    # must get equal keys exactly when their canonical programs are equal.
    from blockbuster.select.extract import Segments, canonical_key
    p = _two_layers()
    segment = Segments(p)
    n = len(p.kernels)
    segments = [segment(i, j) for i in range(n) for j in range(i + 1, min(n, i + 6) + 1)]
    by_key, by_canon = {}, {}
    for s in segments:
        key, arrays_back, kernels_back = canonical_key(s)
        canon, arrays_back2, kernels_back2 = canonical(s)
        assert (arrays_back, kernels_back) == (arrays_back2, kernels_back2)
        by_key.setdefault(key, set()).add(s.name)
        by_canon.setdefault(canon, set()).add(s.name)
    groups = sorted(map(sorted, by_key.values()))
    assert groups == sorted(map(sorted, by_canon.values()))
    assert max(len(g) for g in groups) >= 2      # the same part of the two layers


def test_segment_keys_are_the_canonical_keys_of_the_segments():
    from blockbuster.select.extract import Segments, canonical_key
    p = _two_layers()
    segment = Segments(p)
    n = len(p.kernels)
    for i in range(n):
        for j in range(i + 1, min(n, i + 8) + 1):
            assert segment.key(i, j) == canonical_key(segment(i, j))


def test_connected_spans_are_the_connected_segments():
    from blockbuster.select.extract import connected, connected_spans
    p = _two_layers()
    n, window = len(p.kernels), 14
    expected = {(i, j) for j in range(n + 1) for i in range(max(0, j - window), j - 1)
                if connected(p, i, j)}
    assert connected_spans(p, window) == expected
    assert any(not connected(p, i, i + 2) for i in range(n - 1))   # some are not
