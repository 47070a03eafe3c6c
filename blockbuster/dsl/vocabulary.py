"""The fixed vocabulary a rule file may use besides operators: guard predicates and
built-in structural actions. The rule engine implements each entry
(``blockbuster.rewrite.guards`` and ``blockbuster.rewrite.actions``); guards are
evaluated by the engine, never by ``eval`` of user text.

A parameter kind is ``expr`` (a pattern variable bound by the left-hand side),
``var`` (a loop variable bound by a binder in the left-hand side), ``range`` (the
range of such a binder), ``array`` (the array an action works on) or ``phase`` (a
phase of the rule file, for guards that price an action by looking ahead).
"""

from __future__ import annotations

#: name -> (parameter kinds, one-line meaning)
GUARDS: dict[str, tuple[tuple[str, ...], str]] = {
    "invariant": (("expr", "var"), "x does not depend on loop index k"),
    "depends": (("expr", "var"), "x depends on loop index k"),
    "scalar": (("expr",), "x is a scalar"),
    "vector": (("expr",), "x is a vector (one value per row or column)"),
    "block": (("expr",), "x is a 2-D block"),
    "constant": (("expr",), "x is a literal constant"),
    "positive": (("expr",), "x is positive by its form: an exponential, a positive "
                            "constant, or products, quotients, reciprocals and square "
                            "roots of such (in floating point it may still underflow to 0)"),
    "intermediate": (("array",), "X is neither a program input nor an output"),
    "same_index": (("array",), "every load of X reads it at its producer's own block "
                               "index, so inlining recomputes nothing"),
    "fits_local": (("array",), "after inlining X the consumer still fits the local tier"),
    "bounds_invariant": (("range", "var"), "the bounds of range R do not depend on loop "
                                           "index d"),
    "weights_only": (("expr",), "x reads only the program's weights (the same on every "
                                "call: what is computed from it alone is weight preparation)"),
    "whole": (("range",), "R covers its whole dimension (no sub-range bounds)"),
    "reduces_over": (("expr", "range"), "x contains a reduction over all of range R "
                                        "(computing x takes a pass of its own over R)"),
    "sums": (("expr", "expr", "var", "range"), "m contains a reduction over all of range R "
                                               "that sums x itself (its binder in place "
                                               "of k): m is computed from the same "
                                               "values, such as their mean"),
    "cheaper_after": (("phase",), "the action's result, after running phase P to a "
                                  "fixpoint, costs less (cost-model objective)"),
    "cheaper": ((), "the action's result costs less (cost-model objective)"),
    "fits_after": (("phase",), "the action's result, after running phase P, fits the "
                               "local tier of the hardware"),
}

#: Guards that price an action's result: a rewrite rule cannot take them.
ACTION_GUARDS = frozenset({"cheaper", "cheaper_after", "fits_after"})

#: name -> (parameter kinds, one-line meaning)
ACTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "inline": (("array",), "replace a load of X by the expression its producer stores "
                           "(store->load elimination)"),
    "drop_dead": ((), "delete kernels whose intermediate arrays nobody loads"),
    "merge_reductions": ((), "merge reductions over the same range in one kernel into "
                             "one multi-output reduction (shared loop)"),
    "hold": ((), "hold a row of output blocks in the local tier: a kernel's parallel loop "
                 "becomes a local map stored with ':'"),
    "hold_accumulators": ((), "a sum inside map(d: ...) whose terms depend on d becomes "
                              "one sum of map arrays outside it (a held row of "
                              "accumulators), read back with get"),
    "merge_siblings": ((), "merge two independent kernels that load a common array into "
                           "one multi-output kernel over their common loops (the extra "
                           "loops of one held as maps stored with ':')"),
    "prepare_weights": ((), "precompute an expression of weights only (weight "
                            "preparation, e.g. a norm gain folded into a weight) in a "
                            "kernel of its own instead of recomputing it"),
}

#: Old action names, still accepted in rule files (with a DeprecationWarning): each
#: action now has the name of the rule that applies it in the shipped rule sets.
DEPRECATED_ACTIONS: dict[str, str] = {
    "hoist_accumulators": "hold_accumulators",
    "outline_weights": "prepare_weights",
}
