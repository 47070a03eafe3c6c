"""Type inference for block expressions: :class:`TypeChecker` types an expression in
the scope of its kernel (ranks, dimension agreement, combiner arities, bound block
indices), :class:`LenientTypeChecker` one out of its kernel; both fail with an
:class:`~blockbuster.errors.IRError` naming the node (:func:`snippet`)."""

from __future__ import annotations

from typing import Mapping

from ..errors import IRError
from .combiners import COMBINERS
from .expr import Expr
from .index import IConst, IVar, Idx, free_vars as idx_free_vars
from .ops import OPS, OpTypeError, check_arity
from .program import Program
from .types import SCALAR, ArrayType, BlockType, TupleType


# A scope maps a bound variable to (dimension, rows of its running max or None).
Scope = Mapping[str, tuple[str, str | None]]


def snippet(e: Expr) -> str:
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

    def _load_type(self, e: Expr) -> BlockType:
        return self.block_type_of_array(e.attr.array)

    def _pos_type(self, e: Expr) -> BlockType:
        return BlockType((e.attr.dim,))

    def type_of(self, e: Expr, scope: Scope, where: str = ""):
        key = (e, tuple(sorted((v, scope[v]) for v in e.free_vars if v in scope)))
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        t = self._infer(e, scope, where)
        self._memo[key] = t
        return t

    def _fail(self, e: Expr, where: str, message: str):
        raise IRError(f"{where}: {message} in `{snippet(e)}`")

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
            return self._load_type(e)
        if op == "const":
            return SCALAR
        if op == "pos":
            if e.attr.dim not in self.dims:
                self._fail(e, where, f"unknown dimension '{e.attr.dim}'")
            self._check_index(e, e.attr.index, e.attr.dim, scope, where)
            return self._pos_type(e)
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
            result = OPS[op].result_type(arg_types, e.attr)
        except OpTypeError as err:
            self._fail(e, where, f"{op}: {err}")
        if op == "relabel":
            self._check_relabel_extents(e, arg_types, where)
        return result

    def _check_relabel_extents(self, e: Expr, arg_types, where: str) -> None:
        """``relabel(p, a)`` views ``a``'s columns as ``p``'s dimension: their blocks
        must be as wide (a head of 16 columns cannot be 8 positions)."""
        # (a subclass may mark an axis, "QD@1": the dimension is the part before the @)
        positions, block = (self.dims[t.axes[at].split("@")[0]]
                            for t, at in ((arg_types[0], 0), (arg_types[1], -1)))
        if positions.block != block.block:
            self._fail(e, where, f"relabel: blocks of {block.name} ({block.block} columns) "
                                 f"cannot be taken as {positions.name} (blocks of "
                                 f"{positions.block})")

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
        self._check_blocks_combined(e, types[comb.head:], inner, where)
        try:
            outs = comb.output_types(types)
        except OpTypeError as err:
            self._fail(e, where, f"{a.combiner}: {err}")
        return outs[0] if len(outs) == 1 else TupleType(tuple(outs))

    def _check_blocks_combined(self, e: Expr, passengers, inner: Scope, where: str) -> None:
        """A reduction over ``d`` combines its passengers' blocks of successive
        indices element by element; a passenger with an axis of ``d`` itself (``sum(n
        in N: X[m, n])``) then adds blocks of ``d`` to one another, which a ragged
        last block cannot join (its extent differs from the others')."""
        d = self.dims.get(e.attr.dim)
        if d is None or d.point or d.size % d.block == 0 or d.size <= d.block:
            return
        if not any(isinstance(t, BlockType) and d.name in t.axes for t in passengers):
            return
        # Typed again with the axes the reduction's own index picks renamed: an axis
        # of d picked by another index (a square weight's columns, a causal mask's
        # rows) is no concern.
        var, head = e.attr.var, COMBINERS[e.attr.combiner].head
        marked = _MarkedAxes(self.program, var, d.name)
        try:
            retyped = [marked.type_of(b, inner, where) for b in e.args[head:]]
        except IRError:
            return
        if any(isinstance(t, BlockType) and marked.mark in t.axes for t in retyped):
            self._fail(e, where, f"{e.attr.combiner} over {d.name} combines blocks along "
                                 f"{d.name} itself, and {d.name} = {d.size} in blocks of "
                                 f"{d.block} ends in a block of {d.size % d.block}: reduce "
                                 f"within each block first (e.g. rowsum inside the sum)")


class _MarkedAxes(TypeChecker):
    """Types with every block axis of dimension ``dim`` that the index ``var`` picks
    (a load's subscript, a position) named ``mark`` instead."""

    def __init__(self, program: Program, var: str, dim: str):
        super().__init__(program)
        self.var, self.dim, self.mark = var, dim, f"{dim}@{var}"

    def _picked(self, ix, d: str) -> bool:
        return d == self.dim and isinstance(ix, IVar) and ix.name == self.var

    def _load_type(self, e: Expr) -> BlockType:
        dims = self.arrays[e.attr.array].dims
        return BlockType(tuple(self.mark if self._picked(ix, d) else d
                               for ix, d in zip(e.attr.index, dims) if not self.dims[d].point))

    def _pos_type(self, e: Expr) -> BlockType:
        return BlockType((self.mark if self._picked(e.attr.index, e.attr.dim) else e.attr.dim,))


def _ragged(d) -> bool:
    return not d.point and d.size > d.block and d.size % d.block != 0


class _ConstantBlocks(TypeChecker):
    """Types with every block axis of a ragged dimension that a constant block index
    picks named after that block (``M@1``): such a block has one extent for every
    iteration, a block a loop picks the last block's extent at the last index."""

    def _named(self, ix, d: str) -> str:
        return f"{d}@{ix.value}" if isinstance(ix, IConst) and _ragged(self.dims[d]) else d

    def _load_type(self, e: Expr) -> BlockType:
        dims = self.arrays[e.attr.array].dims
        return BlockType(tuple(self._named(ix, d) for ix, d in zip(e.attr.index, dims)
                               if not self.dims[d].point))

    def _pos_type(self, e: Expr) -> BlockType:
        return BlockType((self._named(e.attr.index, e.attr.dim),))


def constant_ragged_block(program: Program, value: Expr) -> tuple[Expr, str] | None:
    """The first load (or position) in ``value`` that picks a block of a ragged
    dimension by a constant index, with that dimension; None if there is none."""
    dims = program.dim_map
    for node in value.walk():
        if node.op == "load":
            pairs = zip(node.attr.index, program.array_map[node.attr.array].dims)
        elif node.op == "pos":
            pairs = [(node.attr.index, node.attr.dim)]
        else:
            continue
        for ix, d in pairs:
            if isinstance(ix, IConst) and d in dims and _ragged(dims[d]):
                return node, d
    return None


def check_constant_blocks(program: Program, value: Expr, scope: Scope, stored,
                          where: str) -> None:
    """A block picked by a constant index of a ragged dimension must not meet, nor be
    stored as, blocks a loop picks along that dimension (``add(X[m, n], X[1, n])``
    with ``M`` ragged): their extents differ at the last block, and no backend can
    combine them (``IRError``). ``stored``: the block type the store expects."""
    found = constant_ragged_block(program, value)
    if found is None:
        return
    checker = _ConstantBlocks(program)
    try:
        t = checker.type_of(value, scope, where)
        while isinstance(t, ArrayType):
            t = t.elem
        clash = t != stored
    except IRError:
        clash = True
    if clash:
        node, d = found
        dim = program.dim_map[d]
        raise IRError(f"{where}: `{snippet(node)}` picks a block of {d} by a constant, "
                      f"and {d} = {dim.size} in blocks of {dim.block} ends in a block of "
                      f"{dim.size % dim.block}: that block cannot meet blocks the loops "
                      f"pick along {d} (their extents differ)")


class LenientTypeChecker(TypeChecker):
    """Types a sub-expression out of its kernel (a rule pattern's instance, a guard's
    argument): block indices are not checked against any scope."""

    def _check_index(self, e, ix, dim, scope, where):
        return None

    def type_out_of_context(self, e: Expr):
        """The type of ``e`` with each free variable taken as bound, over no known
        dimension (``IRError`` if ill-typed)."""
        return self.type_of(e, {v: ("?", "?") for v in e.free_vars})
