"""Fusion pauses the cyclic garbage collector; that changes its speed, not its result."""

from __future__ import annotations

import gc

import pytest

import blockbuster as bb
from blockbuster.dsl.loader import default_rules
from blockbuster.select import selection
from blockbuster.select.selection import collector_paused

HW = bb.cost.DEFAULT_HARDWARE


def test_the_collector_is_off_inside_and_as_it_was_after():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():             # nested: still off, left off
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with collector_paused():
            raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()            # a caller's choice is kept
    finally:
        gc.enable()


def _text(result):
    return "\n".join([bb.format_program(result.program), result.stop_reason]
                     + [f"{s.phase} {s.rule} {s.kernel}" for s in result.trace])


def test_fusing_with_frequent_collections_gives_the_same_result():
    program = bb.workload("llama_block", layers=1, T=16, E=64, F=128)
    rules = default_rules()
    paused = selection.fuse_program(program, rules, hardware=HW, progress=False)
    old = gc.get_threshold()
    gc.set_threshold(50, 2, 2)               # collect often, with everything unpaused
    try:
        assert gc.isenabled()
        collected = selection._fuse_program(program, rules, None, HW, None,
                                            selection.DEFAULT_MAX_KERNELS, False)
    finally:
        gc.set_threshold(*old)
    assert _text(paused) == _text(collected)
    assert len(paused.trace) > 0
