"""The verifier: rejects ill-formed block programs with a message naming the node.

It checks names (dims, arrays, kernels), types (ranks, dimension agreement in
``dot`` and broadcasts, combiner arities), scopes (every block-index variable is
bound by the kernel, a ``reduce`` or a ``map``; no binder reuses the name of a
variable bound around it; ``runmax`` only inside its ``online_softmax``), stores
(each block written exactly once) and the dataflow order (every array is produced
by exactly one kernel, before it is read).
"""

from __future__ import annotations

from ..errors import IRError
from .block_ranges import check_block_ranges
from .expr import Expr
from .index import IVar
from .kernel_key import declaration_numbers, declarations_used, kernel_key
from .program import Kernel, Program
from .typecheck import (LenientTypeChecker, Scope, TypeChecker, check_constant_blocks,
                        snippet)
from .types import ArrayType
from .walk import bound_var, find_shadowing

# Re-exported: the type checkers have their own module; they are imported from here too.
__all__ = ["verify", "verify_step", "verify_rewritten", "TypeChecker", "LenientTypeChecker",
           "Scope"]


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
        seen: set[str] = set()
        twice = next(d.name for d in program.dims if d.name in seen or seen.add(d.name))
        raise IRError(f"program {program.name}: dimension {twice} is declared twice")
    arrays = program.array_map
    if len(arrays) != len(program.arrays):
        seen = set()
        twice = next(a.name for a in program.arrays if a.name in seen or seen.add(a.name))
        raise IRError(f"program {program.name}: array {twice} is declared twice",
                      array=twice)
    for arr in program.arrays:
        for d in arr.dims:
            if d not in dims:
                raise IRError(f"array {arr.name}: unknown dimension '{d}'", array=arr.name)
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
            raise IRError(f"kernel '{kernel.name}' is defined twice", kernel=kernel.name)
        kernel_names.add(kernel.name)
        try:
            _verify_in_program(kernel, program, arrays, inputs, written, trusted,
                               allow_shadowing)
        except IRError as err:
            if err.kernel is None:
                err.kernel = kernel.name
            raise
    for name in program.outputs:
        if name not in written:
            raise IRError(f"output {name} is never written by any kernel", array=name)
    return program


def _verify_in_program(kernel: Kernel, program: Program, arrays, inputs, written,
                       trusted, allow_shadowing: bool) -> None:
    """``verify``'s checks of one kernel in its program (``written``: the arrays the
    kernels before it store, updated)."""
    if any(a in arrays and a not in inputs and a not in written for a in kernel.reads()):
        for array in sorted(kernel.reads()):      # the first in name order
            if array in arrays and array not in inputs and array not in written:
                later = program.producer(array)
                reason = (f"is produced later, by kernel '{later.name}'" if later
                          else "is never produced")
                raise IRError(f"kernel '{kernel.name}' reads {array}, which {reason}")
    if kernel not in trusted:
        _verified(kernel, program, allow_shadowing)
    for i, store in enumerate(kernel.stores):
        if store.array in inputs:
            raise IRError(f"kernel '{kernel.name}' writes input array {store.array}",
                          store=i)
        if store.array in written:
            raise IRError(f"array {store.array} is written by both kernel "
                          f"'{written[store.array]}' and kernel '{kernel.name}'", store=i)
        written[store.array] = kernel.name


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
    for i, store in enumerate(kernel.stores):
        try:
            _verify_store(kernel, store, program, checker, scope, allow_shadowing)
        except IRError as err:
            if err.store is None:
                err.store = i
            raise


def _verify_store(kernel: Kernel, store, program: Program, checker: TypeChecker,
                  scope, allow_shadowing: bool) -> None:
    where = f"kernel '{kernel.name}'"
    swhere = f"{where}, store to {store.array}"
    if store.array not in program.array_map:
        raise IRError(f"{swhere}: unknown array '{store.array}'")
    array = program.array(store.array)
    if not array.dims:
        raise IRError(f"{swhere}: an array of no dimensions cannot be stored (a kernel "
                      f"stores blocks of its loops): declare it over a dimension of one "
                      f"(`dim U = 1 point`, `{store.array}[U]`, `kernel {kernel.name} for u "
                      f"in U: {store.array}[u] = ...`)")
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
    check_block_ranges(store.value, tuple((v, d, None, None) for v, d in kernel.loops),
                        program, swhere)
    check_constant_blocks(program, store.value, scope, expected, swhere)


def _check_no_shadowing(value: Expr, enclosing: frozenset, loop_vars, where: str) -> None:
    """Reject a ``reduce``/``map`` whose variable is already bound around it.

    Shadowing is not ill-typed, but it is never what a program means: in
    ``for n in N, m in M: sum(m in M: dot(X[n, m], W[m, m]))`` the output column ``m``
    silently disappears. Builders and rules generate fresh names instead."""
    node = find_shadowing(value, enclosing)
    if node is not None:
        var = bound_var(node)
        what = "loop variable" if var in loop_vars else "binder"
        raise IRError(f"{where}: '{var}' in `{snippet(node)}` shadows the enclosing "
                      f"{what} '{var}' (give the inner binder a fresh name)")
