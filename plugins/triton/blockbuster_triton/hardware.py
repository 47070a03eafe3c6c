"""GPUs described for the cost model, by name, or detected from the device.

A :class:`GpuHardware` is a :class:`blockbuster.cost.hardware.Hardware` (what fusion,
selection and the cost model read) with the GPU figures that have no field there:

* ``cores``: streaming multiprocessors (one kernel instance runs on one SM);
* local tier: the shared memory one thread block may use (``local_capacity_bytes``),
  what decides whether a held row of accumulators fits; registers per SM are kept
  beside it (``registers_bytes_per_sm``);
* ``global_bandwidth_bytes_per_s``: HBM (or GDDR) bandwidth; ``local_bandwidth_...``:
  aggregate shared-memory bandwidth (128 B/clock/SM at the boost clock); the L2
  size and bandwidth are recorded too;
* ``peak_flops``: float32 without tensor cores. The generated ``tl.dot`` uses
  ``input_precision="ieee"`` (float32 FMA, the accuracy the other backends have), so
  TF32 tensor-core rates do not apply.

Round figures from the vendors' data sheets (boost clocks); the L2 bandwidth is an
approximate measured figure. They feed a roofline estimate, not a promise.
"""

from __future__ import annotations

import os

import attrs

from blockbuster.cost.hardware import Hardware
from blockbuster.errors import UsageError

KIB = 1 << 10
MIB = 1 << 20


@attrs.frozen
class GpuHardware(Hardware):
    registers_bytes_per_sm: int = 256 * KIB
    l2_bytes: int = 0
    l2_bandwidth_bytes_per_s: float = 0.0
    memory_bytes: int = 0

    def as_dict(self) -> dict:
        """The :class:`Hardware` fields only: reports rebuild a ``Hardware`` from it."""
        return {f.name: getattr(self, f.name) for f in attrs.fields(Hardware)}

    @property
    def local_tier_is_cache(self) -> bool:
        """Shared memory: a kernel over it does not run at all."""
        return False

    def summary(self) -> str:
        """The name and key figures on one line, in a GPU's terms (reports print it)."""
        return (f"{self.name} ({self.cores} SMs, shared memory "
                f"{self.local_capacity_bytes // KIB} KiB/block, registers "
                f"{self.registers_bytes_per_sm // KIB} KiB/SM, HBM "
                f"{self.global_bandwidth_bytes_per_s / 1e9:.0f} GB/s, L2 "
                f"{self.l2_bytes // MIB} MiB at ~{self.l2_bandwidth_bytes_per_s / 1e9:.0f} GB/s, "
                f"shared {self.local_bandwidth_bytes_per_s / 1e9:.0f} GB/s, "
                f"{self.peak_flops / 1e9:.0f} GFLOP/s, {8 * self.element_bytes}-bit)")


def _gpu(name, sms, smem_per_block_kib, hbm_gbps, smem_tbps, fp32_tflops, l2_mib,
         l2_tbps, memory_gib) -> GpuHardware:
    return GpuHardware(
        name=name, cores=sms, local_capacity_bytes=smem_per_block_kib * KIB,
        global_bandwidth_bytes_per_s=hbm_gbps * 1e9,
        local_bandwidth_bytes_per_s=smem_tbps * 1e12,
        peak_flops=fp32_tflops * 1e12, element_bytes=4,
        registers_bytes_per_sm=256 * KIB, l2_bytes=l2_mib * MIB,
        l2_bandwidth_bytes_per_s=l2_tbps * 1e12, memory_bytes=memory_gib << 30)


#: Known GPUs by name (lower case). Shared memory: the most one thread block may
#: use (H100/H200 227 KiB of 228, A100 163 of 164, Ada 99 of 100).
GPUS: dict[str, GpuHardware] = {
    "h100": _gpu("h100-sxm", 132, 227, 3350, 33.4, 67, 50, 10, 80),
    "h200": _gpu("h200-sxm", 132, 227, 4800, 33.4, 67, 50, 10, 141),
    "a100": _gpu("a100-sxm-80gb", 108, 163, 2039, 19.5, 19.5, 40, 5, 80),
    "rtx4090": _gpu("rtx4090", 128, 99, 1008, 41.3, 82.6, 72, 5, 24),
}

#: What fusion is priced for when no GPU is found (interpreter mode), unless
#: ``BLOCKBUSTER_TRITON_GPU`` names another.
DEFAULT_GPU = "h100"

#: Substrings of ``torch.cuda.get_device_name()`` -> a key of :data:`GPUS`.
_DEVICE_NAMES = (("h200", "h200"), ("h100", "h100"), ("a100", "a100"), ("4090", "rtx4090"))


def gpu_hardware(name: str) -> GpuHardware:
    """The description of the GPU called ``name`` (``h100``, ``h200``, ``a100``,
    ``rtx4090``; case and punctuation ignored)."""
    key = "".join(c for c in name.lower() if c.isalnum())
    for known, hw in GPUS.items():
        if key in (known, "".join(c for c in hw.name if c.isalnum())):
            return hw
    raise UsageError(f"unknown GPU '{name}' (known: {', '.join(GPUS)})")


def detected_hardware(device_name: str, sms: int, smem_per_block: int | None,
                      memory_bytes: int) -> GpuHardware:
    """A description of a detected device: a known GPU's figures when its name is
    known (with the device's own SM count and memory), else the default GPU's
    bandwidths and FLOP rate scaled by the SM count."""
    lowered = device_name.lower()
    base = next((GPUS[k] for sub, k in _DEVICE_NAMES if sub in lowered), None)
    if base is None:
        ref = GPUS[DEFAULT_GPU]
        scale = sms / ref.cores
        base = attrs.evolve(ref, name=lowered.replace(" ", "-") or "cuda-gpu",
                            peak_flops=ref.peak_flops * scale,
                            local_bandwidth_bytes_per_s=ref.local_bandwidth_bytes_per_s * scale)
    changes = {"cores": sms, "memory_bytes": memory_bytes}
    if smem_per_block:
        changes["local_capacity_bytes"] = smem_per_block
    return attrs.evolve(base, **changes)


def cuda_hardware() -> GpuHardware | None:
    """The description of ``torch.cuda`` device 0, or None without one."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None
        props = torch.cuda.get_device_properties(0)
    except Exception:
        return None
    smem = getattr(props, "shared_memory_per_block_optin", None)
    return detected_hardware(props.name, props.multi_processor_count, smem,
                             props.total_memory)


def chosen_hardware(device: GpuHardware | None) -> GpuHardware:
    """``BLOCKBUSTER_TRITON_GPU`` when set, else the detected device, else the default."""
    named = os.environ.get("BLOCKBUSTER_TRITON_GPU")
    if named:
        return gpu_hardware(named)
    return device if device is not None else GPUS[DEFAULT_GPU]


def describe(hw: GpuHardware) -> str:
    return (f"{hw.name}: {hw.cores} SMs, shared memory {hw.local_capacity_bytes // KIB} "
            f"KiB/block, HBM {hw.global_bandwidth_bytes_per_s / 1e12:.2f} TB/s, "
            f"L2 {hw.l2_bytes // MIB} MiB, {hw.peak_flops / 1e12:.1f} TFLOP/s float32")
