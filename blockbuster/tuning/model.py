"""The tuner's price of one block assignment: the cost model's counts, plus what
block sizes change that the cost model leaves out.

Per kernel (weight preparation is done once per binding and left out), a roofline
over the cost model's figures (:mod:`blockbuster.cost.model`): FLOPs at peak and
local-tier traffic at the local bandwidth, both divided by the fraction of the cores
that its parallel instances keep busy, and global bytes at the global bandwidth;
the slowest of the three. Two additions:

* **working set**: the cost model's local footprint of the kernel (every value
  of one instance at full block size, ``KernelCost.local_bytes``). Above the
  per-core local capacity the local traffic goes to the global tier instead
  (priced at the global bandwidth: a CPU cache spills), or the assignment is
  rejected where the backend's capacity is hard (shared memory);
* **block steps**: every kernel instance and every iteration of a ``reduce`` or
  ``map`` loop is a step with a fixed overhead (the backend's
  ``step_overhead_s``), shared by the busy cores: what makes small blocks slow.
"""

from __future__ import annotations

import math

import attrs

from ..cost.hardware import Hardware
from ..cost.model import cost
from ..ir.program import Kernel, Program
from .constraints import BlockConstraints


@attrs.frozen
class Modeled:
    seconds: float            # math.inf when rejected
    working_set_bytes: int    # the largest kernel's
    instances: int            # the fewest parallel instances of a per-call kernel
    steps: int                # block steps of all per-call kernels
    reason: str = ""          # why rejected, if it is


def block_steps(program: Program, kernel: Kernel) -> int:
    """Steps of one instance: itself plus every iteration of its loops (a loop
    nested in another counts once per outer iteration; a bounded range, e.g. a
    causal one, is counted whole: an upper bound)."""
    dims = program.dim_map
    seen: set[int] = set()

    def visit(node, times: int) -> int:
        if id(node) in seen:
            return 0
        seen.add(id(node))
        total = 0
        if node.op in ("reduce", "map"):
            times *= dims[node.attr.dim].nblocks
            total += times
        return total + sum(visit(a, times) for a in node.args)

    return 1 + sum(visit(s.value, 1) for s in kernel.stores)


def model(program: Program, hardware: Hardware, c: BlockConstraints) -> Modeled:
    priced = cost(program, hardware)
    seconds, largest, fewest, steps = 0.0, 0, None, 0
    for kernel, kc in zip(program.kernels, priced.per_kernel):
        ws = kc.local_bytes
        largest = max(largest, ws)
        if kc.weight_prep:
            continue
        n = kc.instances
        fewest = n if fewest is None else min(fewest, n)
        busy = n / (hardware.cores * math.ceil(n / hardware.cores))
        spills = ws > hardware.local_capacity_bytes
        if spills and c.hard_capacity:
            return Modeled(math.inf, ws, fewest, 0,
                           f"kernel {kernel.name}: working set {ws} B exceeds the local "
                           f"capacity {hardware.local_capacity_bytes} B")
        local_bw = (hardware.global_bandwidth_bytes_per_s if spills
                    else hardware.local_bandwidth_bytes_per_s)
        compute = kc.flops / hardware.peak_flops / busy
        local = kc.local_traffic_bytes / local_bw / busy
        global_ = kc.global_bytes / hardware.global_bandwidth_bytes_per_s
        kernel_steps = n * block_steps(program, kernel)
        steps += kernel_steps
        overhead = c.step_overhead_s * kernel_steps / min(n, hardware.cores)
        seconds += max(compute, local, global_) + overhead
    return Modeled(seconds, largest, fewest or 0, steps)
