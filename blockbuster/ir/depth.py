"""The nesting depth of expression DAGs, computed without recursion.

The verifier, the printers and the interpreters recurse on terms, so every place that
lets a term grow (parsing a program text, a rule engine run) bounds its depth with
:data:`MAX_DEPTH` and reports a located error or a stop reason instead of crashing.
"""

from __future__ import annotations

from .expr import Expr

#: Deepest expression accepted; fused built-in programs nest about 20 levels.
MAX_DEPTH = 100


def expr_depth(e: Expr, memo: dict | None = None) -> int:
    """Levels of ``e`` (a leaf is 1). ``memo`` (node -> depth) may be shared between
    calls on related expressions, as hash-consed nodes are."""
    memo = {} if memo is None else memo
    if e in memo:
        return memo[e]
    for node in e.walk():               # children before parents
        if node not in memo:
            memo[node] = 1 + max((memo[a] for a in node.args), default=0)
    return memo[e]
