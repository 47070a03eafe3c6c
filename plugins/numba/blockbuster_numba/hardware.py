"""The CPU the Numba backend runs on, described for the cost model.

* cores: the CPUs this process may run on (``sched_getaffinity``, else ``cpu_count``);
* local tier: the per-core L2 cache, read from
  ``/sys/devices/system/cpu/cpu0/cache/index*/{level,size}`` (1 MiB if unreadable);
* global bandwidth, local bandwidth and peak FLOP/s: per-core figures times the core
  count. They are round numbers from measurements on the project machines (see
  ``CPU-PERFORMANCE.md``: AVX-512 cores at 2.6-3 GHz; OpenBLAS sgemm reaches
  ~100-230 GFLOP/s per core, a streaming read ~10-20 GB/s per core, L2 ~100 GB/s per
  core). They feed a roofline estimate, not a promise; override them with the
  ``BLOCKBUSTER_CPU_*`` environment variables below when a machine is measured.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from blockbuster.cost.hardware import Hardware

#: Per-core defaults (float32): DRAM share, L2 bandwidth, peak FLOP/s (2 FMA units x
#: 16 lanes x 2 FLOPs x ~3 GHz is ~190 GFLOP/s; BLAS reaches ~100-230 in practice).
DRAM_BYTES_PER_S_PER_CORE = 15e9
L2_BYTES_PER_S_PER_CORE = 100e9
FLOPS_PER_CORE = 100e9
DEFAULT_L2_BYTES = 1 << 20

_SYS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")


def cpu_count() -> int:
    """CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def parse_cache_size(text: str) -> int | None:
    """``"2048K"`` -> 2097152; ``"1M"``, ``"512"`` (bytes) too; None if unreadable."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        return None
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]
    return int(m.group(1)) * scale


def l2_bytes(cache_dir: Path = _SYS_CACHE) -> int:
    """Size of the L2 cache of cpu0 (data or unified), or 1 MiB if unknown."""
    try:
        for index in sorted(cache_dir.glob("index*")):
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip() if (index / "type").exists() else ""
            if level == "2" and kind in ("", "Unified", "Data"):
                size = parse_cache_size((index / "size").read_text())
                if size:
                    return size
    except OSError:
        pass
    return DEFAULT_L2_BYTES


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        parsed = float(value)
    except ValueError:
        return default
    return parsed if parsed > 0 else default


def cpu_hardware(cores: int | None = None, l2: int | None = None) -> Hardware:
    """A :class:`blockbuster.cost.hardware.Hardware` for this CPU."""
    cores = cpu_count() if cores is None else cores
    l2 = l2_bytes() if l2 is None else l2
    per_core = {
        "dram": _env_float("BLOCKBUSTER_CPU_DRAM_GBPS", DRAM_BYTES_PER_S_PER_CORE / 1e9) * 1e9,
        "l2": _env_float("BLOCKBUSTER_CPU_L2_GBPS", L2_BYTES_PER_S_PER_CORE / 1e9) * 1e9,
        "flops": _env_float("BLOCKBUSTER_CPU_GFLOPS", FLOPS_PER_CORE / 1e9) * 1e9,
    }
    return Hardware(
        name=f"cpu-{cores}core-l2-{l2 >> 10}KiB",
        cores=cores,
        local_capacity_bytes=l2,
        global_bandwidth_bytes_per_s=per_core["dram"] * cores,
        local_bandwidth_bytes_per_s=per_core["l2"] * cores,
        peak_flops=per_core["flops"] * cores,
        element_bytes=4,
    )


def describe(hw: Hardware) -> str:
    return (f"{hw.cores} cores, L2 {hw.local_capacity_bytes >> 10} KiB/core, "
            f"DRAM ~{hw.global_bandwidth_bytes_per_s / 1e9:.0f} GB/s, "
            f"~{hw.peak_flops / 1e9:.0f} GFLOP/s float32")
