"""The cost model on the built-in (unfused) workloads of the frontend."""

import math

import pytest

from blockbuster.cost import cost
from blockbuster.frontend.workloads import WORKLOADS, workload


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_builtin_workloads_cost_consistently(name):
    p = workload(name)
    c = cost(p)
    assert c.kernels == len(p.kernels)
    # Every array is written once and whole: stores are exactly the written arrays.
    written = [s.array for k in p.kernels for s in k.stores]
    assert c.stored_bytes == sum(4 * math.prod(p.shape(a)) for a in written)
    # Unfused, every intermediate makes a round trip: more than the compulsory traffic.
    assert c.global_bytes > c.compulsory_bytes
    assert c.flops > 0 and c.fits
