"""The measured tuner: the fastest candidate by the (injected) timer wins, whatever
the model thought; the budget bounds what is measured; off and model measure nothing."""

import itertools

import pytest
from helpers_tuning import WrappedBackend, blocks_of, machine

from blockbuster.tuning import tune
from blockbuster.tuning.tuner import reduced_dims
from blockbuster.tuning.candidates import dim_choices, wide_assignments
from blockbuster.tuning.constraints import NUMBA, STRICT
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


def test_measured_ties_go_to_the_model():
    # Within 2 % of each other two candidates are the machine's noise: the one the
    # model prices lower wins, although its measurement was 1 % slower.
    tunable, backend = _setup()
    modeled = tune(tunable, backend, "model", use_cache=False)
    order = [c["blocks"] for c in modeled.candidates if c["blocks"] != tunable.initial]
    assert len(order) >= 2
    favourite, other = order[0], order[-1]

    def timer(compiled, inputs):
        blocks = blocks_of(compiled.program, tunable.sizes)
        return 1.01 if blocks == favourite else 1.0 if blocks == other else 5.0
    tuned = tune(tunable, backend, "measure", timer=timer, budget_s=1e9, use_cache=False)
    assert tuned.blocks == favourite
    # Clearly faster (5 %) beats the model.
    clear = lambda compiled, inputs: 0.95 if blocks_of(compiled.program, tunable.sizes) == other \
        else timer(compiled, inputs)
    assert tune(tunable, backend, "measure", timer=clear, budget_s=1e9,
                use_cache=False).blocks == other


def test_measured_ties_the_model_cannot_tell_apart_go_to_the_fastest():
    # LayerNorm·W on a 2-core AMD: K=1024 and K=2048 blocks measured within 2 %, the
    # model priced them 0.1 % apart; its 0.1 % says nothing, the measurement a little.
    from blockbuster.tuning.model import Modeled
    from blockbuster.tuning.tuner import _pick
    priced = lambda s: Modeled(s, 1 << 20, 2, 10)
    initial = {"K": 64}
    ranked = [({"K": 1024}, priced(0.0863)), (initial, priced(0.37)),
              ({"K": 2048}, priced(0.0864))]
    measured = [0.1000, 0.20, 0.0985]
    assert ranked[_pick(ranked, measured, [0, 1, 2], initial)][0] == {"K": 2048}
    # Where the model does tell them apart (by more than TIE), it decides the tie.
    ranked[2] = ({"K": 2048}, priced(0.0950))
    assert ranked[_pick(ranked, measured, [0, 1, 2], initial)][0] == {"K": 1024}


def test_measure_stops_at_the_budget_and_skips_clearly_slower_repeats():
    # The clock moves by the fake calls' seconds: the budget counts what was timed.
    now = [0.0]
    calls = []
    times = {"a": 1.0, "b": 10.0, "c": 0.5, "d": 0.1}

    def timer(compiled, inputs):
        calls.append(compiled.name)
        now[0] += times[compiled.name]
        return times[compiled.name]

    class Compiled:
        def __init__(self, name):
            self.name = name

        def __call__(self, **inputs):
            return {}
    result = measure(list("abcd"), Compiled, lambda p: {}, budget_s=4, timer=timer,
                     clock=lambda: now[0], repeats=3)
    # a and b are always measured; b's first call is 10x a's, so it is not repeated;
    # the budget (4 s) is spent by then, so c and d are not started; a is repeated
    # until its calls add up to ENOUGH_S (2 s).
    assert result == [1.0, 10.0, None, None]
    assert calls == ["a", "b", "a"]
    # With room for c, it is measured too, and repeated in turn with a (b, 2x a's
    # first call, is not).
    now[0], calls[:] = 0.0, []
    times["b"] = 2.0
    result = measure(list("abcd"), Compiled, lambda p: {}, budget_s=3.5, timer=timer,
                     clock=lambda: now[0], repeats=3)
    assert result == [1.0, 2.0, 0.5, None]
    assert calls == ["a", "b", "c", "a", "c", "c"]


def test_the_candidates_are_timed_in_turn_not_one_after_another():
    # The machine slows down after the first calls (another process starts): timed one
    # after another, b would take all its calls in the slow spell and lose.
    calls = []

    def timer(compiled, inputs):
        calls.append(compiled)
        slow = 2.0 if len(calls) > 2 else 1.0
        return slow * {"a": 0.100, "b": 0.095}[compiled]
    result = measure(["a", "b"], lambda p: p, lambda p: {}, budget_s=1e9, timer=timer,
                     repeats=3)
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert result == [0.100, 0.095]


def test_a_short_first_call_that_ran_slow_is_retaken():
    # One noisy call (another process's burst) must not decide between candidates
    # whose calls are cheap to retake: b's first call is 2x a's, its next ones faster.
    calls = []
    runs = {"a": iter([0.100, 0.100, 0.100]), "b": iter([0.200, 0.095, 0.095])}

    def timer(compiled, inputs):
        calls.append(compiled)
        return next(runs[compiled])
    result = measure(["a", "b"], lambda p: p, lambda p: {}, budget_s=1e9, timer=timer,
                     repeats=3)
    assert result == [0.100, 0.095]
    assert calls.count("b") == 3


def test_long_calls_are_timed_twice_and_short_ones_three_times():
    calls = []

    def timer(compiled, inputs):
        calls.append(compiled)
        return {"slow": 1.5, "fast": 0.01}[compiled]
    result = measure(["slow", "fast"], lambda p: p, lambda p: {}, budget_s=1e9,
                     timer=timer, repeats=3)
    assert result == [1.5, 0.01]
    assert calls.count("slow") == 2 and calls.count("fast") == 3
    # By default a short call is taken five times (best of five), a 0.6 s one until
    # its calls add up to 2 s (four), a long one twice.
    calls.clear()
    result = measure(["slow", "mid", "fast"], lambda p: p, lambda p: {}, budget_s=1e9,
                     timer=lambda c, i: calls.append(c) or {"slow": 1.5, "fast": 0.01,
                                                            "mid": 0.6}[c])
    assert [calls.count(c) for c in ("slow", "fast", "mid")] == [2, 5, 4]


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


def test_a_wide_assignment_is_measured_and_can_win():
    # Large blocks the model's re-blockings never rank first: derived (fused at those
    # blocks), measured right after the defaults, and chosen when they are fastest.
    sizes = {"M": 2100, "K": 70, "N": 130}          # M wider than WIDE_BLOCK, ragged
    hw = machine()
    tunable = workload_tunable("layernorm_matmul", sizes, {}, fuser(None, hw))
    backend = WrappedBackend(hw, NUMBA)
    wide = wide_assignments(sizes, hw.cores, NUMBA)
    # 3 blocks of M (2 would be 1056 wide, over WIDE_BLOCK); K and N whole.
    assert wide[0] == {"M": 704, "K": 70, "N": 130}
    seen = []

    def timer(compiled, inputs):
        blocks = blocks_of(compiled.program, tunable.sizes)
        seen.append(blocks)
        return 0.001 if blocks == wide[0] else 1.0
    tuned = tune(tunable, backend, "measure", timer=timer, budget_s=1e9, use_cache=False)
    assert tuned.blocks == wide[0] and blocks_of(tuned.program, sizes) == wide[0]
    order = [b for i, b in enumerate(seen) if b not in seen[:i]]
    assert order.index(wide[0]) == 2      # after the favourite and the defaults


def test_wide_assignments_are_measured_cheapest_modeled_first():
    # The budget may end among them: the one the model prices lowest goes first
    # (here the second of wide_assignments, the narrower one).
    sizes = {"M": 3000, "K": 1100, "N": 130}
    hw = machine()
    tunable = workload_tunable("layernorm_matmul", sizes, {}, fuser(None, hw))
    wide = wide_assignments(sizes, hw.cores, NUMBA, reduced_dims(tunable.derive(
        {"M": 64, "K": 64, "N": 64})))
    assert len(wide) == 3 and wide[2]["K"] == 1100          # the deep one: K summed only
    wide = wide[:2]
    tuned = tune(tunable, WrappedBackend(hw, NUMBA), "measure", timer=lambda c, i: 1.0,
                 budget_s=1e9, use_cache=False)
    measured = [c for c in tuned.candidates if c["blocks"] in wide]
    assert [c["blocks"] for c in measured] == [wide[1], wide[0]]
    assert measured[0]["modeled_s"] < measured[1]["modeled_s"]


def test_no_wide_assignments_where_the_local_capacity_is_hard():
    assert wide_assignments({"M": 4096, "N": 100}, 2, STRICT) == []
    # 4096 in at least 2 (then 4) blocks of at most 1024: 1024 both times, kept once.
    assert wide_assignments({"M": 4096, "N": 100}, 2, NUMBA) == [{"M": 1024, "N": 100}]
    assert wide_assignments({"M": 3000}, 2, NUMBA) == [{"M": 1000}, {"M": 752}]


def test_a_dimension_only_summed_over_is_taken_whole_in_one_wide_assignment():
    # K is the depth of LayerNorm·W's matmul: no per-call kernel runs over it in
    # parallel, and a block matmul is fastest with the whole depth in one call.
    hw = machine()
    sizes = {"M": 4096, "K": 3000, "N": 130}
    tunable = workload_tunable("layernorm_matmul", sizes, {}, fuser(None, hw))
    assert reduced_dims(tunable.derive({"M": 64, "K": 64, "N": 64})) == {"K"}
    plain = wide_assignments(sizes, 2, NUMBA)
    deep = wide_assignments(sizes, 2, NUMBA, frozenset({"K"}))
    assert deep[:-1] == plain and deep[-1] == {**plain[0], "K": 1504}   # 2 blocks of K
    assert max(dim_choices(3000, 2, NUMBA)) == 1504
    # The deep assignment is measured with the others.
    seen = []

    def timer(compiled, inputs):
        seen.append(blocks_of(compiled.program, sizes))
        return 1.0 if seen[-1] != deep[-1] else 0.5
    tuned = tune(tunable, WrappedBackend(hw, NUMBA), "measure", timer=timer,
                 budget_s=1e9, use_cache=False)
    assert tuned.blocks == deep[-1]


def test_weight_preparation_is_bound_once_not_timed():
    # A candidate with weight-preparation kernels is timed as a user runs it: weights
    # bound once (the preparation runs then), each timed call runs the rest.
    import numpy as np

    import blockbuster as bb
    from blockbuster.backends.base import BoundProgram
    from blockbuster.ir.prep import weight_derived_kernels
    from blockbuster.tuning.measure import per_call
    from blockbuster.validate import random_inputs

    fused = bb.fuse(bb.workload("rmsnorm_ffn_swiglu", M=21, D=50, H=45)).program
    assert weight_derived_kernels(fused)
    compiled = bb.compile(fused, backend="reference", tune="off")
    inputs = random_inputs(fused, seed=0)
    call, call_inputs = per_call(compiled, inputs)
    assert isinstance(call, BoundProgram) and call.weight_prep_kernels >= 1
    assert set(call_inputs) == set(inputs) - set(fused.weights)
    np.testing.assert_array_equal(call(**call_inputs)["Y"], compiled(**inputs)["Y"])

    plain = bb.compile(bb.workload("attention", N=20), backend="reference", tune="off")
    x = random_inputs(plain.program, seed=0)
    assert per_call(plain, x) == (plain, x)


@pytest.mark.parametrize("worse,kept", [(0.0, False), (0.04, False), (0.06, True)])
def test_model_mode_takes_a_favourite_fused_slightly_worse_by_the_objective(monkeypatch, worse,
                                                                             kept):
    # Unmeasured, a finalist competes only if fusion's objective rates it at most
    # OBJECTIVE_SLACK (5 %) worse than the defaults; beyond that they stay.
    from blockbuster.tuning import tuner
    tunable, backend = _setup()
    favourite = tune(tunable, backend, "model", use_cache=False).blocks
    assert favourite != tunable.initial               # the model prefers other blocks

    class Rated:
        def __init__(self, program):
            default = blocks_of(program, tunable.sizes) == tunable.initial
            self.objective = 1.0 if default else 1.0 + worse
    monkeypatch.setattr(tuner, "cost", lambda program, hardware: Rated(program))
    tuned = tune(tunable, backend, "model", use_cache=False)
    assert tuned.blocks == (tunable.initial if kept else favourite)
    assert backend.compiled == []                    # nothing compiled or timed
