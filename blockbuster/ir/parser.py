"""Parse the text form of block programs (what :mod:`.printer` writes)."""

from __future__ import annotations

import math

import lark

from ..errors import IRError, ProgramSourceError, SourceError
from . import expr as E
from .depth import MAX_DEPTH, expr_depth
from .grammar import error_at, parse
from .index import IBin, IConst, IVar
from .ops import check_arity
from .program import Kernel, Program, Store
from .types import Dim, GlobalArray
from .verify import verify


def build_index(tree) -> object:
    """A block-index tree (``ivar``/``iconst``/``iadd``...) to an :class:`Idx`."""
    if isinstance(tree, lark.Token):
        return IVar(str(tree)) if tree.type == "NAME" else IConst(int(tree))
    kind = tree.data
    if kind == "ivar":
        return IVar(str(tree.children[0]))
    if kind == "iconst":
        return IConst(int(tree.children[0]))
    op = {"iadd": "+", "isub": "-", "imul": "*", "ifloordiv": "//"}[kind]
    return IBin(op, build_index(tree.children[0]), build_index(tree.children[1]))


#: Nodes that may have several outputs (``t.0``, ``t.1``): a reduction with several
#: bodies, or what is not known yet (a rule's pattern variable, a map or proj of one).
_MAY_BE_TUPLE = frozenset({"reduce", "map", "pvar", "proj", "get"})


def parse_number(tree) -> float:
    tok = tree.children[0]
    text = str(tok)
    if tok.type == "INF":
        return -math.inf if text.startswith("-") else math.inf
    return float(text)


class TermBuilder:
    """Builds expressions from term trees. ``resolve_ref`` decides what a bare name
    means: a let binding in a program, a pattern variable in a rule."""

    def __init__(self, text: str, filename: str):
        self.text = text
        self.filename = filename

    def error(self, node, message: str) -> SourceError:
        return error_at(getattr(node, "meta", node), message, self.text, self.filename)

    def resolve_ref(self, name: str, node):
        raise self.error(node, f"unknown name '{name}'")

    def build(self, tree):
        kind = tree.data
        ch = tree.children
        if kind == "ref":
            return self.resolve_ref(str(ch[0]), ch[0])
        if kind == "number":
            value = parse_number(tree)
            if math.isinf(value) and tree.children[0].type != "INF":
                # 1e999 would silently become inf: say so (inf is written `inf`).
                raise self.error(tree.children[0], f"number {tree.children[0]} is out of "
                                 "the float range (write inf or -inf for an infinity)")
            return E.const(value)
        if kind == "load":
            return E.load(str(ch[0]), *(build_index(c) for c in ch[1:] if c is not None))
        if kind == "pos":
            return E.pos(str(ch[0]), build_index(ch[1]))
        if kind == "proj":
            base = self.build(ch[0])
            if base.op == "const" and ch[0].data == "number":
                # `1.2.3` reads as the number 1.2 and `.3`: name the slip, not const().
                number = ch[0].children[0]
                raise self.error(number, f"'{number}.{ch[1]}' is not a number (one "
                                 "decimal point at most)")
            if base.op not in _MAY_BE_TUPLE:     # an operator: always one value
                raise self.error(ch[1], f"'.{ch[1]}' picks an output of a multi-output "
                                 f"reduction, but {base.op}(...) has one value")
            return E.proj(base, int(ch[1]))
        if kind == "call":
            return self.build_call(tree, str(ch[0]), [c for c in ch[1:] if c is not None])
        if kind == "binder":
            return self.build_binder(tree)
        raise self.error(tree, f"unexpected {kind}")  # pragma: no cover - grammar bug

    def build_call(self, tree, name: str, args):
        if name == "runmax":
            if len(args) != 1 or args[0].data != "ref":
                raise self.error(tree, "runmax takes the loop variable of its "
                                       "online_softmax: runmax(j)")
            return E.runmax(str(args[0].children[0]))
        if name == "get":
            if len(args) != 2 or args[1].data != "ref":
                raise self.error(tree, "get takes a map array and a loop variable: get(a, d)")
            return E.get(self.build(args[0]), str(args[1].children[0]))
        message = check_arity(name, len(args))
        if message:
            raise self.error(tree.children[0], message)
        return E.call(name, *(self.build(a) for a in args))

    def build_range(self, rng):
        if rng.data == "full_range":
            return str(rng.children[0]), None, None
        dim, lo, _colon, hi = rng.children
        return (str(dim), None if lo is None else build_index(lo),
                None if hi is None else build_index(hi))

    def build_binder(self, tree):
        name, var, rng, *bodies = tree.children
        dim, lo, hi = self.build_range(rng)
        built = [self.build(b) for b in bodies]
        if str(name) == "map":
            if len(built) != 1 or lo is not None or hi is not None:
                raise self.error(tree, "map takes one body over a whole dimension: "
                                       "map(n in N: e)")
            return E.map_(str(var), dim, built[0])
        return E.reduce(str(name), str(var), dim, *built, lo=lo, hi=hi)


class _ProgramBuilder(TermBuilder):
    def __init__(self, text, filename):
        super().__init__(text, filename)
        self.lets: dict[str, E.Expr] = {}
        self._depths: dict = {}
        # Where things are declared, for the verifier's errors: array name -> its
        # declaration, kernel name -> (its header, its stores' nodes).
        self.array_nodes: dict = {}
        self.kernel_nodes: dict = {}

    def bounded(self, node, value: E.Expr) -> E.Expr:
        """``value``, unless let bindings chained it deeper than :data:`MAX_DEPTH`."""
        if expr_depth(value, self._depths) > MAX_DEPTH:
            raise self.error(node, f"expression nested deeper than {MAX_DEPTH} levels "
                                   "(through its let bindings)")
        return value

    def where(self, err: IRError):
        """The text node an :class:`IRError` of the verifier is about, if it says."""
        if err.kernel in self.kernel_nodes:
            header, stores = self.kernel_nodes[err.kernel]
            if err.store is not None and err.store < len(stores):
                return stores[err.store]
            return header
        return self.array_nodes.get(err.array)

    def resolve_ref(self, name, node):
        if name in self.lets:
            return self.lets[name]
        raise self.error(node, f"unknown name '{name}' (not a let binding of this kernel)")

    def program(self, tree) -> Program:
        name, *items = tree.children
        dims, arrays, inputs, outputs, kernels, weights = [], [], [], [], [], []
        for item in items:
            if item.data in ("tiled_dim", "point_dim") and any(
                    d.name == str(item.children[0]) for d in dims):
                raise self.error(item, f"dimension {item.children[0]} is declared twice")
            if item.data == "array_decl" and str(item.children[1]) in self.array_nodes:
                raise self.error(item.children[1], f"array {item.children[1]} is declared "
                                 "twice")
            if item.data == "kernel" and str(item.children[0]) in self.kernel_nodes:
                raise self.error(item.children[0], f"kernel '{item.children[0]}' is "
                                 "defined twice")
            if item.data == "tiled_dim":
                n, size, block = item.children
                dims.append(self._dim(item, str(n), int(size), int(block), False))
            elif item.data == "point_dim":
                n, size = item.children
                dims.append(self._dim(item, str(n), int(size), 1, True))
            elif item.data == "array_decl":
                role, n, *dnames = item.children
                self.array_nodes[str(n)] = n
                arrays.append(GlobalArray(str(n), tuple(str(d) for d in dnames if d is not None)))
                {"input": inputs, "weight": inputs, "output": outputs}.get(str(role), []).append(str(n))
                if str(role) == "weight":
                    weights.append(str(n))
            else:
                kernels.append(self.kernel(item))
        return Program(str(name), tuple(dims), tuple(arrays), tuple(inputs),
                       tuple(outputs), tuple(kernels), tuple(weights))

    def _dim(self, node, name, size, block, point):
        if size < 1 or block < 1:
            raise self.error(node, f"dimension {name}: sizes must be positive")
        return Dim(name, size, block, point)

    def kernel(self, tree) -> Kernel:
        name, *rest = tree.children
        self.lets = {}
        loops, stores = [], []
        self.kernel_nodes[str(name)] = (name, store_nodes := [])
        for item in rest:
            if item.data == "loop":
                loops.append((str(item.children[0]), str(item.children[1])))
            elif item.data == "let":
                let_name, value = item.children
                if str(let_name) in self.lets:
                    raise self.error(item, f"let '{let_name}' is bound twice")
                self.lets[str(let_name)] = self.bounded(item, self.build(value))
            else:
                array, *subs, value = item.children
                index = tuple(None if _is_colon(sub.children[0]) else build_index(sub.children[0])
                              for sub in subs)
                stores.append(Store(str(array), index, self.bounded(item, self.build(value))))
                store_nodes.append(item)
        return Kernel(str(name), tuple(loops), tuple(stores))


def _is_colon(node) -> bool:
    return isinstance(node, lark.Token) and node.type == "COLON"


def parse_program(text: str, filename: str = "<program>", check: bool = True) -> Program:
    """Parse a block program; verify it unless ``check`` is false."""
    tree = parse(text, "program", filename)
    builder = _ProgramBuilder(text, filename)
    program = builder.program(tree)
    if not check:
        return program
    try:
        return verify(program)
    except IRError as err:
        node = builder.where(err)
        if node is None:              # about the whole program: the file, at least
            raise type(err)(f"{filename}: {err}") from None
        located = builder.error(node, str(err))
        raise ProgramSourceError(str(err), located.filename, located.line, located.column,
                                 located.excerpt) from None
