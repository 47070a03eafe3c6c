"""The scoped-walk utility: what binds what, walking with scopes, rebuilding."""

from __future__ import annotations

import pytest

from blockbuster.ir import expr as E
from blockbuster.ir.index import IVar, as_idx
from blockbuster.ir.walk import (Binder, binder_of, binders_in, bound_var, find_shadowing,
                                 fresh_name, map_expr, own_vars, rebind, reindex,
                                 walk_scoped)


def _causal_sum():
    """sum(k in S[: i + 1]: dot(Q[i, d], K[k, d])) — bounds read i, the body binds k."""
    return E.reduce("sum", "k", "S", E.call("dot", E.load("Q", "i", "d"), E.load("K", "k", "d")),
                    hi=as_idx("i") + 1)


def test_binders_and_what_they_bind():
    r = _causal_sum()
    m = E.map_("n", "N", E.load("W", "k", "n"))
    assert binder_of(r) == Binder("k", "S", None, as_idx("i") + 1)
    assert binder_of(m) == Binder("n", "N", None, None)
    assert binder_of(E.call("exp", m)) is None and binder_of(E.load("X", "i")) is None
    assert (bound_var(r), bound_var(m), bound_var(E.const(1.0))) == ("k", "n", None)


def test_own_vars_are_read_outside_the_binder():
    r = _causal_sum()
    assert own_vars(r) == {"i"}                      # the bound i + 1, not the body's k
    assert own_vars(E.load("X", as_idx("h") // 2, "j")) == {"h", "j"}
    assert own_vars(E.pos("N", "n")) == {"n"}
    assert own_vars(E.runmax("k")) == {"k"}
    assert own_vars(E.call("exp", E.load("X", "i"))) == frozenset()
    # free variables: the body's i and d stay free, k is bound
    assert r.free_vars == {"i", "d"}
    assert E.reduce("sum", "i", "M", E.load("X", "i"), hi=as_idx("i")).free_vars == {"i"}


def test_reindex_substitutes_only_the_nodes_own_reads():
    r = _causal_sum()
    out = reindex(r, {"i": IVar("q"), "k": IVar("z")})
    assert out.attr.hi == as_idx("q") + 1 and out.attr.var == "k"
    assert out.args == r.args                        # the bodies are the caller's job
    assert reindex(E.load("X", "i"), {"i": as_idx(3)}).attr.index == (as_idx(3),)
    with pytest.raises(ValueError, match="runmax"):
        reindex(E.runmax("k"), {"k": as_idx("k") + 1})
    assert reindex(E.get(E.const(1.0), "n"), {"n": IVar("m")}).attr == "m"


def test_rebind_binders_in_and_fresh_names():
    r = _causal_sum()
    assert rebind(r, "k2").attr.var == "k2" and rebind(r, "k2").args == r.args
    nested = E.map_("n", "N", E.reduce("max", "k", "K", E.load("X", "k", "n")))
    assert binders_in(nested) == {"n", "k"}
    assert fresh_name("k", {"k1", "k2"}) == "k3"


def test_walk_scoped_visits_each_occurrence_once_in_order():
    x = E.load("X", "i", "k")
    inner = E.reduce("sum", "k", "K", x)
    root = E.call("add", x, E.call("mul", inner, x))
    seen = []
    walk_scoped([root], frozenset({"i"}), lambda n, s: seen.append((n.op, tuple(sorted(s)))))
    assert seen == [("add", ("i",)), ("load", ("i",)), ("mul", ("i",)),
                    ("reduce", ("i",)), ("load", ("i", "k"))]   # x once per scope


def test_walk_scoped_prunes_and_takes_a_custom_scope():
    x = E.load("X", "i", "k", "n")
    root = E.map_("n", "N", E.reduce("sum", "k", "K", x))
    loops = []

    def visit(n, scope):
        if n.op == "load":
            loops.append(scope)
    walk_scoped([root], (("i", "M"),), visit, lambda s, b, n: s + ((b.var, b.dim),))
    assert loops == [(("i", "M"), ("n", "N"), ("k", "K"))]
    ops = []
    walk_scoped([root], (), lambda n, s: ops.append(n.op) or n.op != "reduce",
                lambda s, b, n: s)
    assert ops == ["map", "reduce"]                   # False: not inside the reduce


def test_find_shadowing():
    ok = E.map_("n", "N", E.reduce("sum", "k", "K", E.load("X", "k", "n")))
    assert find_shadowing(ok, {"i"}) is None
    inner = E.reduce("sum", "n", "N", E.load("X", "i", "n"))
    bad = E.map_("n", "N", E.call("exp", inner))
    assert find_shadowing(bad, {"i"}) is inner
    assert find_shadowing(ok, {"n"}) is ok


def test_map_expr_replaces_and_keeps_what_did_not_change():
    x, y = E.load("X", "i"), E.load("Y", "i")
    root = E.call("add", E.call("exp", x), E.call("neg", y))
    assert map_expr(root, lambda n: None) is root
    out = map_expr(root, lambda n: y if n is x else None)
    assert out is E.call("add", E.call("exp", y), E.call("neg", y))
    assert out.args[1] is root.args[1]                # untouched sub-term: the same object
    # a replacement is not descended into
    assert map_expr(root, lambda n: E.call("exp", x) if n.op == "exp" else
                    (y if n is x else None)) is E.call("add", E.call("exp", x), E.call("neg", y))
