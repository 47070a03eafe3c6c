"""Candidate block sizes: ragged sizes, the backend's constraints, the local capacity
and the core count."""

import math

import pytest
from helpers_tuning import WrappedBackend, blocks_of, machine

from blockbuster.tuning import tune
from blockbuster.tuning.candidates import combinations, dim_choices
from blockbuster.tuning.constraints import NUMBA, STRICT, BlockConstraints
from blockbuster.tuning.model import model
from blockbuster.tuning.targets import fuser, workload_tunable


@pytest.mark.parametrize("size", [2000, 1000, 203, 4096, 17])
def test_choices_are_tight_for_ragged_sizes(size):
    choices = dim_choices(size, cores=2, c=NUMBA)
    assert choices == tuple(sorted(set(choices)))
    counts = [math.ceil(size / b) for b in choices]
    assert len(set(counts)) == len(counts)          # one block size per block count
    for b, n in zip(choices, counts):
        assert b == size or (b % NUMBA.multiple == 0 and NUMBA.min_block <= b <= NUMBA.max_block)
        # the least padding for n blocks: a smaller multiple of 8 needs more blocks
        assert b == size or math.ceil(size / (b - NUMBA.multiple)) > n
    if size == 2000:
        assert 1000 in choices and 1024 not in choices    # 2 x 1000, not 1024 + 976


def test_small_dimension_is_one_block():
    assert dim_choices(12, cores=4, c=NUMBA) == (12,)


def test_a_split_per_core_is_offered():
    # 6 cores: some candidate gives every core one block of a 3000-row dimension.
    assert any(math.ceil(3000 / b) == 6 for b in dim_choices(3000, cores=6, c=NUMBA))


def test_powers_of_two_backend():
    c = BlockConstraints(min_block=16, max_block=256, powers_of_two=True)
    assert dim_choices(1000, cores=2, c=c) == (16, 32, 64, 128, 256)


def test_combinations_are_bounded():
    combos = combinations({d: 4096 for d in "ABCDEF"}, cores=2, c=NUMBA)
    assert 0 < len(combos) <= 4096
    assert all(set(c) == set("ABCDEF") for c in combos)


def test_chosen_blocks_respect_a_hard_local_capacity():
    # 48 KiB of local memory, a hard limit (a GPU's shared memory): whatever is chosen
    # keeps every kernel's footprint within it.
    hw = machine(local_bytes=48 << 10)
    backend = WrappedBackend(hw, STRICT)
    tunable = workload_tunable("layernorm_matmul", {"M": 300, "K": 200, "N": 150}, {},
                               fuser(None, hw))
    tuned = tune(tunable, backend, "model", use_cache=False)
    assert tuned.source == "model"
    assert all(math.isfinite(c["modeled_s"]) for c in tuned.candidates)
    priced = model(tuned.program, hw, STRICT)
    assert priced.working_set_bytes <= hw.local_capacity_bytes
    blocks = blocks_of(tuned.program, tunable.sizes)
    assert all(b in (16, 32, 64, 128, 256) or b == tunable.sizes[d] for d, b in blocks.items())


def test_model_rejects_what_exceeds_a_hard_capacity():
    hw = machine(local_bytes=16 << 10)
    tunable = workload_tunable("attention", {"N": 256, "D": 64}, {})
    big = tunable.derive({"N": 256, "S": 256, "D": 64})
    assert model(big, hw, STRICT).seconds == math.inf
    assert math.isfinite(model(big, hw, NUMBA).seconds)      # a CPU only pays for it


def test_enough_parallel_blocks_for_every_core():
    # 8 cores, 512 rows: one big block would leave 7 cores idle.
    hw = machine(cores=8, local_bytes=4 << 20)
    tunable = workload_tunable("attention", {"N": 512, "D": 32}, {}, fuser(None, hw))
    tuned = tune(tunable, WrappedBackend(hw, NUMBA), "model", use_cache=False)
    assert math.ceil(512 / tuned.blocks["N"]) >= 8
    assert model(tuned.program, hw, NUMBA).instances >= 8
