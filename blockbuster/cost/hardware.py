"""Hardware descriptions: what the cost model prices data movement and FLOPs with.

Two memory tiers, as in the block programs: the *global* tier (DRAM on a CPU, HBM on
a GPU) where arrays live, and the per-core *local* tier (L2 on a CPU, shared memory
on a GPU) where blocks are computed on. Bandwidths and peak FLOP/s are whole-machine
figures (all cores together); the local capacity is per core, because one kernel
iteration runs on one core.

Every backend owns one (``Backend.hardware``), and fusion, candidate selection, the
pricing guards and the cost model take it explicitly, so a program fuses the same for
a backend whatever the entry point. Only the public doors (``blockbuster.fuse``,
``blockbuster.cost``) fall back to :data:`DEFAULT_HARDWARE`, which is also the
reference backend's own description.
"""

from __future__ import annotations

import attrs

from ..errors import UsageError


def _positive(instance, attribute, value):
    if not value > 0:
        raise UsageError(f"hardware {instance.name}: {attribute.name} must be positive, "
                         f"got {value!r}")


@attrs.frozen
class Hardware:
    name: str
    cores: int = attrs.field(validator=_positive)
    local_capacity_bytes: int = attrs.field(validator=_positive)        # per core
    global_bandwidth_bytes_per_s: float = attrs.field(validator=_positive)
    local_bandwidth_bytes_per_s: float = attrs.field(validator=_positive)
    peak_flops: float = attrs.field(validator=_positive)                # FLOP/s
    element_bytes: int = attrs.field(default=4, validator=_positive)    # float32

    def as_dict(self) -> dict:
        return attrs.asdict(self)

    @property
    def local_tier_is_cache(self) -> bool:
        """Whether a kernel over the local capacity still runs, only slower (a CPU's
        L2: its blocks spill to the next level); a GPU's shared memory is a hard
        limit (:class:`blockbuster_triton.hardware.GpuHardware` says False)."""
        return True

    def summary(self) -> str:
        """The name and the key figures, on one line (reports print it)."""
        return (f"{self.name} ({self.cores} core{'s' if self.cores != 1 else ''}, "
                f"local {_kib(self.local_capacity_bytes)}/core, "
                f"global {self.global_bandwidth_bytes_per_s / 1e9:.0f} GB/s, "
                f"local {self.local_bandwidth_bytes_per_s / 1e9:.0f} GB/s, "
                f"{self.peak_flops / 1e9:.0f} GFLOP/s, {8 * self.element_bytes}-bit)")


def _kib(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n / 1024:g} KiB"


#: A generic 2-core CPU: the reference backend's hardware and the public API's default
#: (``blockbuster.fuse``/``blockbuster.cost`` without ``hardware``). Nominal round
#: figures, not a measured machine: 1 MiB of L2 per core, ~40 GB/s of DRAM bandwidth,
#: ~200 GB/s of L2 bandwidth, ~200 GFLOP/s of float32 compute (2 cores × ~3 GHz × 2 FMA
#: units × 8 lanes × 2 FLOPs ≈ 200 GFLOP/s).
DEFAULT_HARDWARE = Hardware(
    name="generic-cpu-2core",
    cores=2,
    local_capacity_bytes=1 << 20,
    global_bandwidth_bytes_per_s=40e9,
    local_bandwidth_bytes_per_s=200e9,
    peak_flops=200e9,
)
