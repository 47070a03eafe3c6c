"""The measured tuner: the fastest candidate by the (injected) timer wins, whatever
the model thought; the budget bounds what is measured; off and model measure nothing."""

import itertools

import pytest
from helpers_tuning import WrappedBackend, blocks_of, machine

from blockbuster.tuning import tune
from blockbuster.tuning.constraints import NUMBA
from blockbuster.tuning.measure import measure
from blockbuster.tuning.targets import fuser, workload_tunable

SIZES = {"M": 90, "K": 70, "N": 130}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path / "cache"))


def _setup():
    hw = machine()
    tunable = workload_tunable("layernorm_matmul", SIZES, {}, fuser(None, hw))
    return tunable, WrappedBackend(hw, NUMBA)


def test_the_fastest_by_the_timer_wins():
    tunable, backend = _setup()
    modeled = tune(tunable, backend, "model", use_cache=False)
    order = [c["blocks"] for c in modeled.candidates]
    assert len(order) >= 2
    # The model's last candidate is made the fastest, its first the slowest.
    slowest, fastest = order[0], order[-1]
    seen = []

    def timer(compiled, inputs):
        blocks = blocks_of(compiled.program, tunable.sizes)
        seen.append(blocks)
        return 0.001 if blocks == fastest else 5.0 if blocks == slowest else 1.0
    tuned = tune(tunable, backend, "measure", timer=timer, budget_s=1e9, use_cache=False)
    assert tuned.source == "measure" and tuned.blocks == fastest
    assert blocks_of(tuned.program, tunable.sizes) == fastest
    assert tunable.initial in seen                    # the defaults are always measured
    measured = {tuple(sorted(c["blocks"].items())): c["measured_s"] for c in tuned.candidates}
    assert measured[tuple(sorted(fastest.items()))] == 0.001


def test_measure_stops_at_the_budget_and_skips_clearly_slower_repeats():
    ticks = itertools.count()
    clock = lambda: float(next(ticks))
    calls = []
    times = {"a": 1.0, "b": 10.0, "c": 0.5, "d": 0.1}

    def timer(compiled, inputs):
        calls.append(compiled.name)
        return times[compiled.name]

    class Compiled:
        def __init__(self, name):
            self.name = name

        def __call__(self, **inputs):
            return {}
    result = measure(list("abcd"), Compiled, lambda p: {}, budget_s=4, timer=timer,
                     clock=clock, repeats=3)
    # a and b are always measured; b's first call is 10x a's, so it is not repeated;
    # the budget (4 looks of the clock) is spent before d starts.
    assert result[0] == 1.0 and result[1] == 10.0
    assert calls.count("b") == 1
    assert result[3] is None


def test_a_failing_candidate_is_not_chosen():
    def compile_fn(p):
        if p == "bad":
            raise RuntimeError("does not compile")
        return lambda **inputs: {}
    result = measure(["bad", "good"], compile_fn, lambda p: {}, budget_s=1e9,
                     timer=lambda c, i: 0.5)
    assert result == [None, 0.5]


@pytest.mark.parametrize("mode", ["model", "off"])
def test_other_modes_never_time(mode):
    tunable, backend = _setup()

    def timer(compiled, inputs):
        raise AssertionError("timed in mode " + mode)
    tuned = tune(tunable, backend, mode, timer=timer, use_cache=False)
    assert all(c["measured_s"] is None for c in tuned.candidates)
    assert backend.compiled == []                    # nothing compiled either
    if mode == "off":
        assert tuned.blocks == tunable.initial and tuned.source == "initial"


def test_the_defaults_stay_unless_clearly_beaten():
    tunable, backend = _setup()

    def timer(compiled, inputs):          # the others only 2 % faster: noise
        return 1.0 if blocks_of(compiled.program, tunable.sizes) == tunable.initial else 0.98
    tuned = tune(tunable, backend, "measure", timer=timer, budget_s=1e9, use_cache=False)
    assert tuned.blocks == tunable.initial and tuned.source == "measure"
