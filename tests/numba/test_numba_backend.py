"""The plugin as a backend: registered through its entry point, listed by the CLI with
its hardware description, which reads the CPU count and the per-core L2 size."""

import os

import pytest

from blockbuster.backends import Backend, backend_names, default_backend_name, list_backends
from blockbuster.cost.hardware import Hardware
from blockbuster_numba.hardware import (DEFAULT_L2_BYTES, DRAM_BYTES_PER_S_PER_CORE, cpu_hardware,
                                        l2_bytes, parse_cache_size)


def test_registered_and_listed_as_ok(numba_backend):
    assert "numba" in backend_names()
    info = {b.name: b for b in list_backends()}["numba"]
    assert info.status == "ok", info.error
    assert "cores" in info.description and "L2" in info.description
    assert isinstance(numba_backend, Backend)
    assert numba_backend.name == "numba"
    assert default_backend_name() == "numba"


def test_cli_lists_the_backend(capsys):
    # in this process: `python -m blockbuster backends` in a fresh interpreter, with
    # every registered plugin, is tests/test_cli.py::test_backends_lists_reference_ok
    from blockbuster import cli
    assert cli.main(["backends"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("numba"))
    assert "ok" in line and "cores" in line


def test_hardware_describes_this_cpu(numba_backend):
    hw = numba_backend.hardware
    assert isinstance(hw, Hardware)
    assert hw.cores == len(os.sched_getaffinity(0))
    assert hw.local_capacity_bytes == l2_bytes()
    assert hw.peak_flops > hw.global_bandwidth_bytes_per_s > 0
    assert hw.local_bandwidth_bytes_per_s > hw.global_bandwidth_bytes_per_s


def test_l2_size_is_read_from_sysfs(tmp_path):
    for i, (level, kind, size) in enumerate([("1", "Data", "48K"), ("1", "Instruction", "32K"),
                                             ("2", "Unified", "2048K"), ("3", "Unified", "32M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(level + "\n")
        (d / "type").write_text(kind + "\n")
        (d / "size").write_text(size + "\n")
    assert l2_bytes(tmp_path) == 2048 * 1024
    assert l2_bytes(tmp_path / "missing") == DEFAULT_L2_BYTES == 1 << 20
    assert cpu_hardware(cores=3, l2=512 << 10).local_capacity_bytes == 512 << 10


@pytest.mark.parametrize("text, value", [("2048K", 2 << 20), ("1M", 1 << 20), ("512", 512),
                                         ("1MiB", 1 << 20), ("junk", None)])
def test_parse_cache_size(text, value):
    assert parse_cache_size(text) == value


def test_environment_overrides_the_nominal_figures(monkeypatch):
    monkeypatch.setenv("BLOCKBUSTER_CPU_GFLOPS", "50")
    monkeypatch.setenv("BLOCKBUSTER_CPU_DRAM_GBPS", "not a number")
    hw = cpu_hardware(cores=2, l2=1 << 20)
    assert hw.peak_flops == 100e9
    assert hw.global_bandwidth_bytes_per_s == 2 * DRAM_BYTES_PER_S_PER_CORE  # bad value ignored
