"""Cost model: bytes moved between memory tiers, local footprint, FLOPs, roofline time.

This package is a public door: :func:`cost` and :func:`kernel_cost` here price on
:data:`DEFAULT_HARDWARE` (the reference backend's generic CPU) when no hardware is
given. Everything inside Blockbuster uses :mod:`.model`, which takes the hardware
explicitly.
"""

from .hardware import DEFAULT_HARDWARE, Hardware
from . import model as _model
from .model import Cost, KernelCost
from .report import format_cost_table

__all__ = ["DEFAULT_HARDWARE", "Hardware", "Cost", "KernelCost", "cost", "kernel_cost",
           "format_cost_table"]


def cost(program, hardware: Hardware | None = None) -> Cost:
    """Price a (verified) program on ``hardware`` (default: :data:`DEFAULT_HARDWARE`)."""
    return _model.cost(program, DEFAULT_HARDWARE if hardware is None else hardware)


def kernel_cost(kernel, program, hardware: Hardware | None = None) -> KernelCost:
    """Price one kernel of ``program`` on ``hardware`` (default: :data:`DEFAULT_HARDWARE`)."""
    return _model.kernel_cost(kernel, program,
                              DEFAULT_HARDWARE if hardware is None else hardware)
