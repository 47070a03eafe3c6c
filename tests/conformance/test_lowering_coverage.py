"""Every operator and combiner of the registry has a lowering in every installed
backend: a missing one is a failure here, not a surprise when a program uses it."""

from blockbuster.ir.combiners import COMBINERS
from blockbuster.ir.ops import LOWERED, OPS


def test_every_registered_operator_has_a_lowering(backend):
    missing = sorted(LOWERED - backend.lowered_ops)
    assert not missing, f"backend '{backend.name}' has no lowering for {missing}"


def test_every_registered_combiner_has_a_lowering(backend):
    missing = sorted(set(COMBINERS) - backend.lowered_combiners)
    assert not missing, f"backend '{backend.name}' has no lowering for combiners {missing}"


def test_a_backend_lowers_nothing_the_registry_does_not_know(backend):
    # A name in a lowering table that is not registered is a typo or a stale entry.
    assert backend.lowered_ops <= set(OPS)
    assert backend.lowered_combiners <= set(COMBINERS)


def test_the_registry_has_what_every_callable_operator_needs():
    for name, spec in OPS.items():
        if spec.kind in ("leaf", "structural", "pattern"):
            continue
        assert spec.result_axes is not None and spec.reference is not None, name
        assert spec.arity is not None and spec.arity >= 1, name
