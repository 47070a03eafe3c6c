"""The verifier: rejects ill-formed block programs with a message naming the node.

It checks names (dims, arrays, kernels), types (ranks, dimension agreement in
``dot`` and broadcasts, combiner arities), scopes (every block-index variable is
bound by the kernel, a ``reduce`` or a ``map``; no binder reuses the name of a
variable bound around it; ``runmax`` only inside its ``online_softmax``), stores
(each block written exactly once) and the dataflow order (every array is produced
by exactly one kernel, before it is read).
"""

from __future__ import annotations

from typing import Mapping

from ..errors import IRError
from .combiners import COMBINERS
from .expr import Expr
from .index import IConst, IVar, Idx, evaluate, free_vars as idx_free_vars
from .ops import OPS, OpTypeError, check_arity
from .kernel_key import declaration_numbers, declarations_used, kernel_key
from .program import Kernel, Program
from .types import SCALAR, ArrayType, BlockType, TupleType
from .walk import bound_var, find_shadowing

# A scope maps a bound variable to (dimension, rows of its running max or None).
Scope = Mapping[str, tuple[str, str | None]]


def _snippet(e: Expr) -> str:
    from .printer import format_expr
    text = format_expr(e)
    return text if len(text) <= 90 else text[:87] + "..."


class TypeChecker:
    """Types expressions in the context of one program."""

    def __init__(self, program: Program):
        self.program = program
        self.dims = program.dim_map
        self.arrays = program.array_map
        self._memo: dict = {}

    def block_type_of_array(self, name: str) -> BlockType:
        return BlockType(tuple(d for d in self.arrays[name].dims if not self.dims[d].point))

    def type_of(self, e: Expr, scope: Scope, where: str = ""):
        key = (e, tuple(sorted((v, scope[v]) for v in e.free_vars if v in scope)))
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        t = self._infer(e, scope, where)
        self._memo[key] = t
        return t

    def _fail(self, e: Expr, where: str, message: str):
        raise IRError(f"{where}: {message} in `{_snippet(e)}`")

    def _check_index(self, e: Expr, ix: Idx, dim: str | None, scope: Scope, where: str):
        for v in idx_free_vars(ix):
            if v not in scope:
                self._fail(e, where, f"block index variable '{v}' is not bound here "
                                     "(loads and positions must sit inside a kernel's loops)")
        if dim is not None and isinstance(ix, IVar) and scope[ix.name][0] != dim:
            self._fail(e, where, f"index '{ix.name}' runs over {scope[ix.name][0]} "
                                 f"but indexes dimension {dim}")

    def _infer(self, e: Expr, scope: Scope, where: str):
        op = e.op
        if op not in OPS:
            self._fail(e, where, f"unknown operator '{op}'")
        if op == "load":
            name = e.attr.array
            if name not in self.arrays:
                self._fail(e, where, f"load of unknown array '{name}'")
            dims = self.arrays[name].dims
            if len(e.attr.index) != len(dims):
                self._fail(e, where, f"array {name} has rank {len(dims)} but is indexed "
                                     f"with {len(e.attr.index)} subscripts")
            for ix, d in zip(e.attr.index, dims):
                self._check_index(e, ix, d, scope, where)
            return self.block_type_of_array(name)
        if op == "const":
            return SCALAR
        if op == "pos":
            if e.attr.dim not in self.dims:
                self._fail(e, where, f"unknown dimension '{e.attr.dim}'")
            self._check_index(e, e.attr.index, e.attr.dim, scope, where)
            return BlockType((e.attr.dim,))
        if op == "runmax":
            var = e.attr
            if var not in scope or scope[var][1] is None:
                self._fail(e, where, f"runmax({var}) outside an online_softmax over '{var}'")
            return BlockType((scope[var][1],))
        if op == "reduce":
            return self._infer_reduce(e, scope, where)
        if op == "get":
            array = self.type_of(e.args[0], scope, where)
            if not isinstance(array, ArrayType):
                self._fail(e, where, f"get needs a map array, got {array}")
            if e.attr not in scope:
                self._fail(e, where, f"block index variable '{e.attr}' is not bound here")
            if scope[e.attr][0] != array.dim:
                self._fail(e, where, f"get: '{e.attr}' runs over {scope[e.attr][0]}, "
                                     f"the array over {array.dim}")
            return array.elem
        if op == "map":
            var, dim = e.attr.var, e.attr.dim
            if dim not in self.dims:
                self._fail(e, where, f"unknown dimension '{dim}'")
            inner = dict(scope)
            inner[var] = (dim, None)
            return ArrayType(dim, self.type_of(e.args[0], inner, where))
        message = check_arity(op, len(e.args))
        if message:
            self._fail(e, where, message)
        arg_types = [self.type_of(a, scope, where) for a in e.args]
        if op != "proj" and any(isinstance(t, (TupleType, ArrayType)) for t in arg_types):
            self._fail(e, where, f"'{op}' cannot take a multi-output reduction or a map "
                                 "array (use proj, or push the operation into the map)")
        try:
            return OPS[op].result_type(arg_types, e.attr)
        except OpTypeError as err:
            self._fail(e, where, f"{op}: {err}")

    def _infer_reduce(self, e: Expr, scope: Scope, where: str):
        a = e.attr
        comb = COMBINERS.get(a.combiner)
        if comb is None:
            self._fail(e, where, f"unknown combiner '{a.combiner}'")
        if a.dim not in self.dims:
            self._fail(e, where, f"unknown dimension '{a.dim}'")
        n = len(e.args)
        if not comb.arity_ok(n):
            self._fail(e, where, f"combiner '{a.combiner}' needs at least "
                                 f"{comb.head + comb.min_passengers} bodies, got {n}")
        for bound in (a.lo, a.hi):
            if bound is not None:
                self._check_index(e, bound, None, scope, where)
        inner = dict(scope)
        inner[a.var] = (a.dim, None)
        first = self.type_of(e.args[0], inner, where)
        if a.combiner == "online_softmax":
            if isinstance(first, BlockType) and len(first.axes) == 2:
                inner[a.var] = (a.dim, first.axes[0])
            else:
                self._fail(e, where, f"online_softmax logits must be a 2-D block, got {first}")
        types = [first] + [self.type_of(b, inner, where) for b in e.args[1:]]
        try:
            outs = comb.output_types(types)
        except OpTypeError as err:
            self._fail(e, where, f"{a.combiner}: {err}")
        return outs[0] if len(outs) == 1 else TupleType(tuple(outs))


class LenientTypeChecker(TypeChecker):
    """Types a sub-expression out of its kernel (a rule pattern's instance, a guard's
    argument): block indices are not checked against any scope."""

    def _check_index(self, e, ix, dim, scope, where):
        return None

    def type_out_of_context(self, e: Expr):
        """The type of ``e`` with each free variable taken as bound, over no known
        dimension (``IRError`` if ill-typed)."""
        return self.type_of(e, {v: ("?", "?") for v in e.free_vars})


# Rewriting verifies a program after every step, and a step changes one kernel:
# kernels already verified against the same declarations are not checked again, also
# under other names (``kernel_key``: candidates and identical layers).
_VERIFIED_KERNELS: set = set()
# One type checker (and its memo of typed sub-terms) per set of dimensions, kept while
# the array declarations change compatibly: a step's new kernel shares most of its
# nodes with the one it replaced, and a step that declares or drops an array (inlining,
# dead kernels, weight preparation) leaves the types of everything else as they were.
# dims number -> (checker, array name -> declaration number it has typed with)
_CHECKERS: dict = {}


def _checker(program: Program) -> "TypeChecker":
    dims_id, numbers = declaration_numbers(program)
    entry = _CHECKERS.get(dims_id)
    if entry is not None:
        checker, known = entry
        if len(checker._memo) > 200_000:
            checker._memo.clear()
        # Reusable when no array it typed with is declared differently now, and no
        # kernel loads an array that is not declared (its memo may still know a type
        # for such a load; a fresh checker reports it).
        if (all(known.get(name, n) == n for name, n in numbers.items())
                and all(k.reads() <= numbers.keys() for k in program.kernels)):
            if any(name not in known for name in numbers):
                known.update(numbers)
                checker.arrays = {**checker.arrays, **program.array_map}
            checker.program = program
            return checker
    if len(_CHECKERS) >= 64:
        _CHECKERS.clear()
    checker = TypeChecker(program)
    _CHECKERS[dims_id] = (checker, dict(numbers))
    return checker


def verify(program: Program, allow_shadowing: bool = False,
           trusted: frozenset = frozenset()) -> Program:
    """Raise :class:`IRError` if the program is ill-formed; return it otherwise.

    ``allow_shadowing`` is for the rewrite engine's intermediate programs only:
    inlining a producer can put ``max(s in S: ...)`` inside a kernel that loops over
    ``s``. That is well defined (lexical scope, capture-avoiding substitution) and the
    rules need binders over the same range to keep one name, so the engine renames
    such binders once, at the end (``rewrite.subst.unshadow_program``). Programs from
    users, the builder and fusion results are checked strictly.

    ``trusted``: kernels known to pass their own checks against these declarations
    (``verify_step``); the checks between kernels are still made."""
    dims = program.dim_map
    if len(dims) != len(program.dims):
        raise IRError(f"program {program.name}: a dimension is declared twice")
    arrays = program.array_map
    if len(arrays) != len(program.arrays):
        raise IRError(f"program {program.name}: an array is declared twice")
    for arr in program.arrays:
        for d in arr.dims:
            if d not in dims:
                raise IRError(f"array {arr.name}: unknown dimension '{d}'")
    for name in program.inputs + program.outputs:
        if name not in arrays:
            raise IRError(f"program {program.name}: '{name}' is listed as an input or "
                          "output but not declared")
    stray = [w for w in program.weights if w not in program.inputs]
    if stray:
        raise IRError(f"program {program.name}: weight {stray[0]} is not an input")
    if not program.outputs:
        raise IRError(f"program {program.name} has no outputs (declare what it computes "
                      "with `output NAME[...]`)")
    overlap = set(program.inputs) & set(program.outputs)
    if overlap:
        raise IRError(f"program {program.name}: {sorted(overlap)[0]} is both an input and an output")

    written: dict[str, str] = {}
    kernel_names: set[str] = set()
    inputs = set(program.inputs)
    for kernel in program.kernels:
        if kernel.name in kernel_names:
            raise IRError(f"kernel '{kernel.name}' is defined twice")
        kernel_names.add(kernel.name)
        if any(a in arrays and a not in inputs and a not in written for a in kernel.reads()):
            for array in sorted(kernel.reads()):      # the first in name order
                if array in arrays and array not in inputs and array not in written:
                    later = program.producer(array)
                    reason = (f"is produced later, by kernel '{later.name}'" if later
                              else "is never produced")
                    raise IRError(f"kernel '{kernel.name}' reads {array}, which {reason}")
        if kernel not in trusted:
            _verified(kernel, program, allow_shadowing)
        for store in kernel.stores:
            if store.array in inputs:
                raise IRError(f"kernel '{kernel.name}' writes input array {store.array}")
            if store.array in written:
                raise IRError(f"array {store.array} is written by both kernel "
                              f"'{written[store.array]}' and kernel '{kernel.name}'")
            written[store.array] = kernel.name
    for name in program.outputs:
        if name not in written:
            raise IRError(f"output {name} is never written by any kernel")
    return program


def _verified(kernel: Kernel, program: Program, allow_shadowing: bool) -> None:
    """Check one kernel against the program's declarations, memoised by identity and
    by name-free key."""
    exact = (kernel, declarations_used(kernel, program), allow_shadowing)   # no renaming
    if exact in _VERIFIED_KERNELS:
        return
    if len(_VERIFIED_KERNELS) >= 40_000:
        _VERIFIED_KERNELS.clear()
    key = (kernel_key(kernel, program), allow_shadowing)
    if key not in _VERIFIED_KERNELS:
        _verify_kernel(kernel, program, _checker(program), allow_shadowing)
        _VERIFIED_KERNELS.add(key)
    _VERIFIED_KERNELS.add(exact)


def verify_rewritten(before: Program, old: Kernel, after: Program, new: Kernel,
                     allow_shadowing: bool = False) -> Program:
    """``verify(after)`` where ``before`` is verified and ``after`` is ``before`` with
    kernel ``old`` replaced by ``new`` (same name, loops and stored arrays, reading no
    array ``old`` does not: a rewrite inside one kernel). Every other check of
    ``verify`` then holds as it did for ``before``, so only ``new`` is checked (the
    same message as ``verify`` gives); anything else is verified in full."""
    if (after.dims is before.dims and after.arrays is before.arrays
            and after.inputs is before.inputs and after.outputs is before.outputs
            and after.weights is before.weights and new.name == old.name
            and new.loops == old.loops and new.writes() == old.writes()
            and [s.index for s in new.stores] == [s.index for s in old.stores]
            and new.reads() <= old.reads()
            and len(after.kernels) == len(before.kernels)
            and all(a is b or (a is new and b is old)
                    for a, b in zip(after.kernels, before.kernels))):
        _verified(new, after, allow_shadowing)
        return after
    return verify(after, allow_shadowing)


def verify_step(before: Program, after: Program, allow_shadowing: bool = False) -> Program:
    """``verify(after)`` where ``before`` is verified: kernels of ``after`` that are
    kernels of ``before`` (the same objects), in the same dimensions, none of whose
    arrays changed its declaration, pass their own checks as they did; the rest of
    ``verify`` is done in full."""
    trusted: frozenset = frozenset()
    if after.dims is before.dims or after.dims == before.dims:
        old, new = before.array_map, after.array_map
        changed = {a for a in old.keys() | new.keys() if old.get(a) is not new.get(a)
                   and old.get(a) != new.get(a)}
        kept = set(before.kernels)
        trusted = frozenset(k for k in after.kernels if k in kept
                            and changed.isdisjoint(k.reads())
                            and changed.isdisjoint(k.writes()))
    return verify(after, allow_shadowing, trusted)


def _verify_kernel(kernel: Kernel, program: Program, checker: TypeChecker,
                   allow_shadowing: bool = False) -> None:
    dims = program.dim_map
    where = f"kernel '{kernel.name}'"
    if not kernel.loops:
        raise IRError(f"{where}: a kernel needs at least one parallel loop")
    if not kernel.stores:
        raise IRError(f"{where}: a kernel must store at least one block")
    scope: dict[str, tuple[str, str | None]] = {}
    for var, dim in kernel.loops:
        if dim not in dims:
            raise IRError(f"{where}: loop '{var}' over unknown dimension '{dim}'")
        if var in scope:
            raise IRError(f"{where}: loop variable '{var}' is bound twice")
        scope[var] = (dim, None)
    for store in kernel.stores:
        swhere = f"{where}, store to {store.array}"
        if store.array not in program.array_map:
            raise IRError(f"{swhere}: unknown array '{store.array}'")
        array = program.array(store.array)
        if len(store.index) != len(array.dims):
            raise IRError(f"{swhere}: array has rank {len(array.dims)} but the store has "
                          f"{len(store.index)} subscripts")
        if not allow_shadowing:
            _check_no_shadowing(store.value, frozenset(scope), kernel.loop_vars, swhere)
        value_type = checker.type_of(store.value, scope, swhere)
        used = []
        for ix, d in zip(store.index, array.dims):
            if ix is None:
                if not isinstance(value_type, ArrayType) or value_type.dim != d:
                    raise IRError(f"{swhere}: ':' along {d} needs a map over {d}, "
                                  f"got {value_type}")
                value_type = value_type.elem
                continue
            if not isinstance(ix, IVar) or ix.name not in scope:
                raise IRError(f"{swhere}: store subscripts must be the kernel's loop "
                              f"variables, got '{ix}'")
            if scope[ix.name][0] != d:
                raise IRError(f"{swhere}: index '{ix.name}' runs over {scope[ix.name][0]} "
                              f"but indexes dimension {d}")
            used.append(ix.name)
        missing = [v for v in kernel.loop_vars if v not in used]
        if missing:
            raise IRError(f"{swhere}: loop variable '{missing[0]}' is not a subscript, "
                          "so every iteration would write the same block")
        expected = checker.block_type_of_array(store.array)
        if value_type != expected:
            raise IRError(f"{swhere}: value has type {value_type} but the array's "
                          f"blocks are {expected}")
        _check_block_ranges(store.value, tuple((v, d, None, None) for v, d in kernel.loops),
                            program, swhere)


def _interval(ix: Idx, ranges: dict) -> tuple[int, int] | None:
    """The least and greatest value of ``ix`` when each variable takes any value of
    its range; None where that is not known (a variable out of scope, a division by
    a range that holds 0)."""
    if isinstance(ix, IVar):
        return ranges.get(ix.name)
    if isinstance(ix, IConst):
        return (ix.value, ix.value)
    a, b = _interval(ix.a, ranges), _interval(ix.b, ranges)
    if a is None or b is None:
        return None
    if ix.op == "+":
        return (a[0] + b[0], a[1] + b[1])
    if ix.op == "-":
        return (a[0] - b[1], a[1] - b[0])
    if ix.op == "//" and b[0] <= 0 <= b[1]:
        return None
    corners = [x * y if ix.op == "*" else x // y for x in a for y in b]
    return (min(corners), max(corners))


#: Assignments of the enclosing loop variables tried, at most, to find a block index
#: out of range that the interval bound could not rule out.
_ENUMERATION_LIMIT = 20_000


def _violation(ix: Idx, binders: tuple, dims, ok) -> dict | None:
    """An assignment of the enclosing variables (``binders``: ``(var, dim, lo, hi)``
    in binding order, a sub-range's bounds in terms of outer variables) under which
    ``ok(value of ix)`` fails; None when there is none, or when there are too many
    assignments to try (the interval bound already failed to prove it safe)."""
    needed = set(idx_free_vars(ix))
    for var, _dim, lo, hi in reversed(binders):        # what the bounds depend on
        if var in needed:
            for bound in (lo, hi):
                if bound is not None:
                    needed |= idx_free_vars(bound)
    order = [b for b in binders if b[0] in needed]
    if {b[0] for b in order} != needed:                 # a variable from elsewhere
        return None
    tried = 0

    def go(i: int, env: dict):
        nonlocal tried
        if i == len(order):
            tried += 1
            if tried > _ENUMERATION_LIMIT:
                raise _TooMany
            return None if ok(evaluate(ix, env)) else dict(env)
        var, dim, lo, hi = order[i]
        first = 0 if lo is None else evaluate(lo, env)
        stop = dims[dim].nblocks if hi is None else evaluate(hi, env)
        for value in range(max(first, 0), min(stop, dims[dim].nblocks)):
            env[var] = value
            found = go(i + 1, env)
            if found is not None:
                return found
        env.pop(var, None)
        return None
    try:
        return go(0, {})
    except (_TooMany, ZeroDivisionError):
        return None


class _TooMany(Exception):
    pass


def _check_block_ranges(value: Expr, binders: tuple, program: Program, where: str) -> None:
    """Every block a load or a position reads exists, for every value of the enclosing
    loops (the backends do not check: a block index past the end would read another
    block, or nothing; a sub-range's bounds are clamped to its dimension, so they may
    lie past it). An interval bound proves most indices safe at once; the others are
    tried on the loops' values."""
    dims, arrays = program.dim_map, program.array_map
    seen: set = set()

    def plural(n: int) -> str:
        return f"{n} block{'s' if n != 1 else ''} (0..{n - 1})"

    def at(env: dict) -> str:
        return ", ".join(f"{v}={n}" for v, n in env.items())

    def within(ix: Idx, low: int, high: int, scope: tuple) -> dict | None:
        span = _interval(ix, {v: (0, dims[d].nblocks - 1) if (lo, hi) == (None, None)
                              else _reduce_span(lo, hi, d, scope)
                              for v, d, lo, hi in scope})
        if span is not None and low <= span[0] and span[1] <= high:
            return None
        return _violation(ix, scope, dims, lambda x: low <= x <= high)

    def _reduce_span(lo, hi, d, scope):
        outer = {v: (0, dims[dd].nblocks - 1) for v, dd, _l, _h in scope}
        n = dims[d].nblocks
        a = (0, 0) if lo is None else (_interval(lo, outer) or (0, 0))
        b = (n, n) if hi is None else (_interval(hi, outer) or (n, n))
        return (max(a[0], 0), min(b[1], n) - 1)

    def walk(e: Expr, scope: tuple) -> None:
        key = (e, tuple(b for b in scope if b[0] in e.free_vars))
        if key in seen:
            return
        seen.add(key)
        op = e.op
        checks = []
        if op == "load" and e.attr.array in arrays:
            checks = list(zip(e.attr.index, arrays[e.attr.array].dims))
        elif op == "pos":
            checks = [(e.attr.index, e.attr.dim)]
        for ix, d in checks:
            n = dims[d].nblocks
            env = within(ix, 0, n - 1, scope)
            if env is not None:
                raise IRError(f"{where}: index {ix} reads block {evaluate(ix, env)} of {d}, "
                              f"which has {plural(n)}, at {at(env)}, in `{_snippet(e)}`")
        if op == "reduce":          # bounds past the dimension are clamped to it
            a = e.attr
            for body in e.args:
                walk(body, scope + ((a.var, a.dim, a.lo, a.hi),))
        elif op == "map":
            walk(e.args[0], scope + ((e.attr.var, e.attr.dim, None, None),))
        else:
            for arg in e.args:
                walk(arg, scope)

    walk(value, binders)


def _check_no_shadowing(value: Expr, enclosing: frozenset, loop_vars, where: str) -> None:
    """Reject a ``reduce``/``map`` whose variable is already bound around it.

    Shadowing is not ill-typed, but it is never what a program means: in
    ``for n in N, m in M: sum(m in M: dot(X[n, m], W[m, m]))`` the output column ``m``
    silently disappears. Builders and rules generate fresh names instead."""
    node = find_shadowing(value, enclosing)
    if node is not None:
        var = bound_var(node)
        what = "loop variable" if var in loop_vars else "binder"
        raise IRError(f"{where}: '{var}' in `{_snippet(node)}` shadows the enclosing "
                      f"{what} '{var}' (give the inner binder a fresh name)")
