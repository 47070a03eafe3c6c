"""The tuning cache: a second tuning of the same thing reads the first's choice; the
key tells sizes, hardware, backend and mode apart; a damaged entry is ignored."""

import json

import pytest
from helpers_tuning import WrappedBackend, machine

from blockbuster.tuning import cache, tune
from blockbuster.tuning.constraints import NUMBA
from blockbuster.tuning.targets import fuser, workload_tunable


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path / "cache"))


def _tunable(hw, **sizes):
    return workload_tunable("attention", sizes or {"N": 150, "D": 24}, {}, fuser(None, hw))


def _entries():
    return sorted(cache.cache_dir().glob("*.json"))


def test_round_trip():
    hw = machine()
    backend = WrappedBackend(hw, NUMBA)
    first = tune(_tunable(hw), backend, "model")
    assert first.source == "model" and not first.from_cache
    assert len(_entries()) == 1
    again = tune(_tunable(hw), backend, "model")
    assert again.from_cache and again.source == "cache"
    assert again.blocks == first.blocks
    assert [c["blocks"] for c in again.candidates] == [c["blocks"] for c in first.candidates]


def test_sizes_hardware_backend_and_mode_are_keyed():
    hw, other = machine(), machine(local_bytes=256 << 10)
    tune(_tunable(hw), WrappedBackend(hw, NUMBA), "model")
    tune(_tunable(hw, N=151, D=24), WrappedBackend(hw, NUMBA), "model")       # sizes
    tune(_tunable(other), WrappedBackend(other, NUMBA), "model")               # hardware
    tune(_tunable(hw), WrappedBackend(hw, NUMBA, name="other-backend"), "model")
    assert len(_entries()) == 4
    t = _tunable(hw)
    keys = {cache.tuning_key(t.structure, t.sizes, "b", hw, mode, t.rules)
            for mode in ("model", "measure")}
    assert len(keys) == 2


@pytest.mark.parametrize("damage", [
    b"", b"{not json", b'{"blocks": {"N": -3, "S": 8, "D": 24}}', b'{"blocks": {"N": 8}}',
    b'["a list"]', b'{"blocks": {"N": "64", "S": 64, "D": 24}}', b"\xff\xfe\x00",
    b'{"blocks": {"N": 999, "S": 8, "D": 24}}',        # a block past its dimension (150)
])
def test_a_damaged_entry_is_ignored_and_replaced(damage):
    hw = machine()
    backend = WrappedBackend(hw, NUMBA)
    first = tune(_tunable(hw), backend, "model")
    (entry,) = _entries()
    entry.write_bytes(damage)
    again = tune(_tunable(hw), backend, "model")
    assert again.source == "model" and again.blocks == first.blocks
    assert json.loads(entry.read_text())["blocks"] == first.blocks     # written again


def test_an_unwritable_cache_is_not_an_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(blocker))      # a file, not a folder
    hw = machine()
    assert tune(_tunable(hw), WrappedBackend(hw, NUMBA), "model").source == "model"
