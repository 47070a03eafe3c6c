"""Cost model: bytes moved between memory tiers, local footprint, FLOPs, roofline time."""

from .hardware import DEFAULT_HARDWARE, Hardware
from .model import Cost, KernelCost, cost, kernel_cost
from .report import format_cost_table

__all__ = ["DEFAULT_HARDWARE", "Hardware", "Cost", "KernelCost", "cost", "kernel_cost",
           "format_cost_table"]
