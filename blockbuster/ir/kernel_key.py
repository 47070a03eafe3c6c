"""A name-free key for one kernel in its program: what verifying or pricing it depends on.

A kernel's verification verdict and its cost depend only on its structure and on the
declarations it uses (the dimensions it names and the dimensions of the arrays it
loads and stores), never on what its arrays or the kernel itself are called. Fusion
meets the same kernel under many names: every rewrite step keeps all kernels but one,
candidate selection renames each candidate canonically (so one kernel gets different
array names in different candidates), and identical layers differ only in their
weights' names. Keying the verifier's and the cost model's memos by this key lets all
of those share one verdict and one price.
"""

from __future__ import annotations

import itertools

import attrs

from .expr import Expr, LoadAttr, attr_key
from .program import Kernel, Program
from .walk import with_args

_LIMIT = 50_000
_RENAMINGS_LIMIT = 256
# kernel -> (kernel with arrays renamed a0, a1... in order of first use, the original
# array names in that order, the dimensions the kernel names itself)
_CANONICAL: dict[Kernel, tuple] = {}
# program -> (dim map, array map): asked once per kernel of a program
_MAPS: dict[Program, tuple[dict, dict]] = {}
# name-free kernel -> the one object standing for it
_INTERNED: dict[Kernel, Kernel] = {}
# renaming (original -> canonical array names) -> its map_expr memo
_RENAMED: dict[tuple, dict] = {}


def _bounded_put(memo: dict, key, value, limit: int = _LIMIT):
    if len(memo) >= limit:
        memo.clear()
    memo[key] = value
    return value


def _canonical(kernel: Kernel) -> tuple:
    hit = _CANONICAL.get(kernel)
    if hit is not None:
        return hit
    order: dict[str, str] = {}
    for s in kernel.stores:
        order.setdefault(s.array, f"a{len(order)}")
    dims = {d for _, d in kernel.loops}
    for s in kernel.stores:
        for n in s.value.walk():
            if n.op == "load":
                order.setdefault(n.attr.array, f"a{len(order)}")
            elif n.op in ("reduce", "map", "pos"):
                dims.add(n.attr.dim)

    # Kernels met one after the other (rewrite steps) mostly share their nodes and
    # their renaming: one memo per renaming rebuilds only the nodes a step made.
    renaming = tuple(order.items())
    memo = _RENAMED.get(renaming)
    if memo is None:
        memo = _bounded_put(_RENAMED, renaming, {}, _RENAMINGS_LIMIT)
    elif len(memo) > _LIMIT:
        memo.clear()

    stores = tuple(attrs.evolve(s, array=order[s.array], value=_rename_loads(s.value, order, memo))
                   for s in kernel.stores)
    canon = Kernel("k", kernel.loops, stores)
    # One object per name-free kernel: the memos keyed by it (costs, verdicts,
    # renamings) then hit by identity, not by comparing two equal kernels store by
    # store (the same kernel of two identical layers).
    canon = _INTERNED.get(canon) or _bounded_put(_INTERNED, canon, canon)
    return _bounded_put(_CANONICAL, kernel, (canon, tuple(order), frozenset(dims)))


def _rename_loads(root: Expr, names: dict, memo: dict) -> Expr:
    """``root`` with every load's array renamed by ``names``; top-down, stopping at
    nodes already in ``memo``, with an explicit stack (expressions can be deep)."""
    stack = [root]
    while stack:
        n = stack[-1]
        if n in memo:
            stack.pop()
            continue
        if n.op == "load":
            memo[n] = Expr("load", (), LoadAttr(names[n.attr.array], n.attr.index))
            stack.pop()
            continue
        missing = [a for a in n.args if a not in memo]
        if missing:
            stack.extend(reversed(missing))
            continue
        memo[n] = with_args(n, tuple([memo[a] for a in n.args])) if n.args else n
        stack.pop()
    return memo[root]


def _maps(program: Program) -> tuple[dict, dict]:
    hit = _MAPS.get(program)
    if hit is None:
        hit = _bounded_put(_MAPS, program, (program.dim_map, program.array_map), 1024)
    return hit


def kernel_key(kernel: Kernel, program: Program) -> tuple:
    """Equal for two kernels exactly when they are the same up to the names of the
    kernel and its arrays, in equal declarations (an undeclared name keys as None)."""
    _structure, arrays, named, number = _kernel_structure(kernel)
    dim_map, array_map = _maps(program)
    shapes = tuple(array_map[a].dims if a in array_map else None for a in arrays)
    used = set(named)
    for dims in shapes:
        if dims is not None:
            used.update(dims)
    decls = tuple((d, dim_map.get(d)) for d in sorted(used))
    return number, shapes, decls


# The name-free structure of a node, computed once per node (not once per kernel and
# renaming: a rewrite step's new kernel and every candidate holding a node share it):
# node -> (structure number, the arrays it loads in order of first use). Two nodes get
# the same number exactly when they are equal up to a renaming of their arrays that
# keeps that order (the canonical renaming a0, a1... of ``_canonical``).
_NODE_STRUCTURES: dict[Expr, tuple[int, tuple[str, ...]]] = {}
# (op, attr, (child number, child array slots)...) -> structure number
_STRUCTURES: dict[tuple, int] = {}
_STRUCTURE_DIMS: dict[int, frozenset] = {}  # number -> dimensions it names
_NEXT_STRUCTURE = itertools.count()
# kernel -> (key, arrays in order of first use, dimensions it names)
_KERNEL_STRUCTURES: dict[Kernel, tuple] = {}


def _structure_number(key: tuple, dims: frozenset) -> int:
    number = _STRUCTURES.get(key)
    if number is None:
        number = _STRUCTURES[key] = next(_NEXT_STRUCTURE)
        _STRUCTURE_DIMS[number] = dims
    return number


def _node_structure(root: Expr) -> tuple[int, tuple[str, ...]]:
    """``root``'s (structure number, arrays in order of first use); children first,
    only below nodes not known yet, with an explicit stack (expressions can be deep).
    Each node's arrays are its children's, concatenated without repeats: the order in
    which ``walk`` (children first, left to right) meets the loads."""
    memo = _NODE_STRUCTURES
    stack = [root]
    while stack:
        n = stack[-1]
        if n in memo:
            stack.pop()
            continue
        if n.op == "load":
            memo[n] = (_structure_number(("load", n.attr.index), frozenset()),
                       (n.attr.array,))
            stack.pop()
            continue
        missing = [a for a in n.args if a not in memo]
        if missing:
            stack.extend(reversed(missing))
            continue
        stack.pop()
        slots: dict[str, int] = {}
        parts = []
        for a in n.args:
            number, arrays = memo[a]
            parts.append(number)
            parts.append(tuple([slots.setdefault(x, len(slots)) for x in arrays]))
        key = (n.op, attr_key(n.attr), tuple(parts))
        number = _STRUCTURES.get(key)
        if number is None:
            dims = frozenset().union(*(_STRUCTURE_DIMS[memo[a][0]] for a in n.args))
            if n.op in ("reduce", "map", "pos"):
                dims = dims | {n.attr.dim}
            number = _structure_number(key, dims)
        memo[n] = (number, tuple(slots))
    return memo[root]


def _kernel_structure(kernel: Kernel) -> tuple:
    """(name-free key, arrays in order of first use, dimensions named) of a kernel:
    equal keys exactly where ``_canonical`` gives equal kernels."""
    hit = _KERNEL_STRUCTURES.get(kernel)
    if hit is not None:
        return hit
    if len(_STRUCTURES) > 8 * _LIMIT:
        # Numbers are never reused: keys made before stay valid and simply miss.
        for memo in (_STRUCTURES, _STRUCTURE_DIMS, _NODE_STRUCTURES, _KERNEL_STRUCTURES,
                     _KERNEL_NUMBERS):
            memo.clear()
    elif len(_NODE_STRUCTURES) > 8 * _LIMIT:
        _NODE_STRUCTURES.clear()       # numbers stay valid: only the node memo goes
    slots: dict[str, int] = {}
    for s in kernel.stores:
        slots.setdefault(s.array, len(slots))
    dims = {d for _, d in kernel.loops}
    stores = []
    for s in kernel.stores:
        number, arrays = _node_structure(s.value)
        dims |= _STRUCTURE_DIMS[number]
        stores.append((slots[s.array], s.index, number,
                       tuple([slots.setdefault(x, len(slots)) for x in arrays])))
    key = (kernel.loops, tuple(stores))
    number = _KERNEL_NUMBERS.get(key)
    if number is None:
        number = _KERNEL_NUMBERS[key] = next(_NEXT_STRUCTURE)
    return _bounded_put(_KERNEL_STRUCTURES, kernel,
                        (key, tuple(slots), frozenset(dims), number))


# kernel key -> a number (``structure_number``), cleared with the structure numbers
_KERNEL_NUMBERS: dict[tuple, int] = {}


def structure_number(kernel: Kernel) -> int:
    """A number equal for two kernels exactly when they are the same up to the names
    of the kernel and its arrays (the structure part of ``kernel_key``)."""
    return _kernel_structure(kernel)[3]


# (name-free kernel, array names it gets) -> the kernel with those names: renaming a
# candidate (``select.extract.rename``) then costs a lookup for a kernel already seen
# under other names, e.g. the same kernel of another identical layer.
_RENAMED_KERNELS: dict[tuple, Kernel] = {}


def rename_kernel(kernel: Kernel, arrays, name: str) -> Kernel:
    """``kernel`` named ``name``, with each array ``a`` renamed ``arrays.get(a, a)``."""
    canon, order, _named = _canonical(kernel)
    targets = tuple(arrays.get(a, a) for a in order)
    key = (canon, targets, name)
    hit = _RENAMED_KERNELS.get(key)
    if hit is None:
        back = {f"a{i}": t for i, t in enumerate(targets)}
        memo: dict = {}
        stores = tuple(attrs.evolve(s, array=back[s.array],
                                    value=_rename_loads(s.value, back, memo))
                       for s in canon.stores)
        hit = _bounded_put(_RENAMED_KERNELS, key, Kernel(name, canon.loops, stores))
    return hit


# (dims, arrays) -> a number never reused: an exact memo key ``(kernel, number)`` is
# cheaper to hash, per kernel, than the program's declaration tuples.
_DECL_IDS: dict[tuple, int] = {}
_NEXT_DECL_ID = itertools.count()


def declarations_id(program: Program) -> int:
    key = (program.dims, program.arrays)
    hit = _DECL_IDS.get(key)
    if hit is None:
        hit = _bounded_put(_DECL_IDS, key, next(_NEXT_DECL_ID), 4096)
    return hit


# kernel -> the arrays it stores, then those it loads (sorted)
_USED: dict[Kernel, tuple] = {}


def declarations_used(kernel: Kernel, program: Program) -> tuple:
    """The declarations ``kernel`` can depend on in ``program``: the dimensions and
    the declarations of the arrays it stores and loads. With the kernel itself an
    exact memo key (names included) that, unlike ``declarations_id``, survives a
    step that changes the declarations of other arrays (inlining, dropping a
    kernel)."""
    used = _USED.get(kernel)
    if used is None:
        used = _bounded_put(_USED, kernel, kernel.writes() + tuple(sorted(kernel.reads())))
    dims_id, ids = declaration_numbers(program)
    return dims_id, tuple([ids.get(a) for a in used])


# Steps and candidates share their declaration tuples (``Program.evolve`` keeps them):
# (id of dims, id of arrays) -> (dims, arrays, dims number, array name -> number of
# its declaration), so each declaration is hashed once per tuple, not once per kernel.
_DECL_NUMBERS: dict[tuple[int, int], tuple] = {}
_DECLARATIONS: dict = {}         # a Dim tuple or GlobalArray -> a number never reused


def _declaration_number(decl) -> int:
    number = _DECLARATIONS.get(decl)
    if number is None:
        number = _bounded_put(_DECLARATIONS, decl, next(_NEXT_DECL_ID))
    return number


def declaration_numbers(program: Program) -> tuple[int, dict[str, int]]:
    """(a number for the program's dimensions, array name -> a number for its
    declaration): equal numbers for equal declarations, never reused (memoised)."""
    key = (id(program.dims), id(program.arrays))
    hit = _DECL_NUMBERS.get(key)
    if hit is None or hit[0] is not program.dims or hit[1] is not program.arrays:
        hit = _bounded_put(_DECL_NUMBERS, key, (
            program.dims, program.arrays, _declaration_number(program.dims),
            {a.name: _declaration_number(a) for a in program.arrays}), 4096)
    return hit[2], hit[3]


def array_order(kernel: Kernel) -> tuple[str, ...]:
    """The arrays a kernel stores and loads, in order of first use (stores first,
    then loads children first), memoised."""
    return _kernel_structure(kernel)[1]


def named_dims(kernel: Kernel) -> frozenset[str]:
    """The dimensions a kernel names itself (``ir.program.dims_named_by``), memoised."""
    return _kernel_structure(kernel)[2]
