"""A small tensor-level builder that lowers to *unfused* block programs.

Every primitive operation becomes one kernel and every intermediate tensor a global
array: the starting point the fusion rules work from. Tensors have named dimensions:
the last one or two are tiled into blocks, leading ones (batch, heads) are *point*
dimensions iterated one index at a time (``g.point_dim("B", 4)``; a ``[B, T, E]``
tensor has ``[T, E]`` blocks). Broadcasting follows the names: an operand whose
dimensions are a subsequence of the other's is repeated over the missing ones
(``x - mean(x)`` subtracts a per-row vector, ``x * gamma`` scales columns).

Heads, slices and key/value heads shared by several query heads are *views*
(:meth:`split_heads`, :meth:`merge_heads`, :meth:`slice`): no kernel, no copy; the
kernels that use them read the underlying array. The tensor layer that lowers all
of this, :mod:`blockbuster.frontend.tensors`, is the PyTorch importer's too.
"""

from __future__ import annotations

import numbers
import re

from ..errors import IRError, UsageError
from ..ir.program import Kernel, Program
from ..ir.types import Dim, GlobalArray
from ..ir.verify import verify
from .builder_elementwise import ElementwiseOps
from .builder_heads import HeadOps
from .builder_reductions import ReductionOps
from .builder_tensor import Tensor          # re-exported: the builder's tensors
from .builder_views import ViewOps
from .tensors import DEFAULT_BLOCK
from .tensors import values as V
from .tensors.kernels import KernelEmitter, binder_name
from .tensors.values import Value


class _NamedDims:
    """The tensor layer's planner for the builder: an axis is the name of a dimension
    the user declared (nothing is left to decide)."""

    planning = False

    def __init__(self, dims: dict[str, Dim]):
        self._dims = dims
        self.made: set[str] = set()      # dimensions made by new(), not the user

    def dim(self, name: str) -> Dim:
        return self._dims[name]

    def unify(self, a: str, b: str, what: str) -> str:
        if a != b:
            raise IRError(f"{what}: dimensions {a} and {b} differ")
        return a

    def mark_tiled(self, axis: str) -> None:
        pass

    def new(self, size: int, hint: str) -> str:
        """A dimension the tensor layer needs and the user did not declare (the unit
        axis a scalar's value is stored along): a fresh name."""
        name, n = hint, 0
        while name in self._dims:
            n += 1
            name = f"{hint}{n}"
        self._dims[name] = Dim(name, size, size)
        self.made.add(name)
        return name

    def mark_point(self, axis: str) -> None:
        d = self._dims[axis]
        self._dims[axis] = Dim(d.name, d.size, 1, True)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def _identifier(kind: str, name) -> str:
    """``name``, if the text form can write it (what ``NAME`` of the grammar reads:
    the program must round-trip through ``format_program``/``parse_program``)."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name) or name == "inf":
        raise UsageError(f"{kind} name {name!r}: a name is letters, digits and '_', not "
                         f"starting with a digit (and not 'inf')")
    return name


def _integer(value):
    """A size as a Python int where it is an integer of another kind (``np.int64``)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return value


class GraphBuilder(ElementwiseOps, ReductionOps, HeadOps, ViewOps):
    """Writes an unfused block program: declare dimensions and inputs, apply
    operators (one kernel each; the operators live in the mixins), then :meth:`build`."""

    def __init__(self, name: str):
        self.name = _identifier("program", name)
        self.dims: dict[str, Dim] = {}
        self.inputs: list[Tensor] = []
        self.weights: list[str] = []
        self.outputs: list[str] = []
        self.arrays: dict[str, Tensor] = {}
        self._counter = 0
        self._registered = 0                 # tensor-layer arrays already in self.arrays
        self._k = KernelEmitter(_NamedDims(self.dims), fresh=self._fresh)
        self.kernels: list[Kernel] = self._k.kernels
        # Dimensions declared without a block: the compiler may choose theirs
        # (blockbuster.tuning), unless an operator's meaning depends on the blocks.
        self._free_blocks: list[str] = []
        self._blocks_fixed_by: str | None = None

    # -- declarations ----------------------------------------------------------
    def dim(self, name: str, size: int, block: int | None = None) -> str:
        name, size, block = self._new_dim(name), _integer(size), _integer(block)
        if not isinstance(size, int) or size < 1:
            raise UsageError(f"dimension {name}: size must be a positive integer, got {size!r}")
        if block is None:
            block = min(size, DEFAULT_BLOCK)
            self._free_blocks.append(name)
        if not isinstance(block, int) or block < 1:
            raise UsageError(f"dimension {name}: block size must be a positive integer, "
                             f"got {block!r}")
        self.dims[name] = Dim(name, size, min(block, size))
        return name

    def input(self, name: str, *dims: str) -> Tensor:
        name = self._new_name(_identifier("array", name))
        for d in dims:
            if d not in self.dims:
                raise IRError(f"input {name}: unknown dimension '{d}'")
        t = Tensor(name, tuple(dims), owner=self)
        self.inputs.append(t)
        self.arrays[name] = t
        return t

    def weight(self, name: str, *dims: str) -> Tensor:
        """An input that is a model parameter (the same on every call)."""
        t = self.input(name, *dims)
        self.weights.append(name)
        return t

    def point_dim(self, name: str, size: int) -> str:
        """A dimension iterated one index at a time (heads): absent from block types."""
        name, size = self._new_dim(name), _integer(size)
        if not isinstance(size, int) or size < 1:
            raise UsageError(f"dimension {name}: size must be a positive integer, got {size!r}")
        self.dims[name] = Dim(name, size, 1, point=True)
        return name

    # -- plumbing ----------------------------------------------------------------
    def _fresh(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    _var = staticmethod(binder_name)     # the tensor layer's binder names

    @classmethod
    def _distinct(cls, *bases: str) -> tuple[str, ...]:
        """One binder name per base, all different (see ``_var``)."""
        names: list[str] = []
        for b in bases:
            names.append(cls._var(b, names))
        return tuple(names)

    # -- tensors as views of arrays (the shared tensor layer) --------------------------
    def _value(self, t: Tensor) -> Value:
        self._check_own(t)
        if t.view is not None:
            return t.view
        shape = tuple(self.dims[d].size for d in t.dims)
        return V.array_value(self._k.planner, t.name, shape, t.dims)

    def _check_own(self, t, what: str = "") -> None:
        if not isinstance(t, Tensor):
            raise UsageError(f"build: outputs are tensors of this builder, got {t!r}" if what
                             else f"expected a tensor, got {t!r}")
        if t.owner is not None and t.owner is not self:
            other = getattr(t.owner, "name", "?")
            raise UsageError(f"{what}tensor {t.name} belongs to builder '{other}', not "
                             f"'{self.name}': a program is built by one builder")

    def _view(self, v: Value, of: Tensor) -> Tensor:
        return Tensor(of.name, tuple(a for a in v.axes if a is not None), v, owner=self)

    def _array_out(self, v: Value) -> Tensor:
        """The tensor of the last kernel's output array (registering every array the
        tensor layer made on the way, in order)."""
        made = list(self._k.arrays.values())
        for a in made[self._registered:]:
            self.arrays[a.name] = Tensor(a.name, a.dims, owner=self)
        self._registered = len(made)
        return self.arrays[v.array]

    def _new_dim(self, name: str) -> str:
        name = _identifier("dimension", name)
        if name in self.dims:
            raise IRError(f"dimension {name} is declared twice")
        return name

    def _new_name(self, name: str | None) -> str | None:
        if name is not None:
            _identifier("array", name)
        if name is not None and name in self.arrays:
            raise IRError(f"array {name} is defined twice")
        return name
    # -- result ----------------------------------------------------------------
    def build(self, *outputs: Tensor) -> Program:
        """The program computing ``outputs`` (a view becomes a copy kernel's array)."""
        for t in outputs:
            self._check_own(t, "build: ")
            if t.view is None and any(t.name == i.name for i in self.inputs):
                raise IRError(f"build: {t.name} is an input; an output is computed by "
                              f"an operator")
        outputs = tuple(self.copy(t) if isinstance(t, Tensor) and t.view is not None
                        else t for t in outputs)
        out_names = tuple(t.name for t in outputs)
        in_names = tuple(t.name for t in self.inputs)
        rest = tuple(n for n in self.arrays if n not in in_names and n not in out_names)
        order = in_names + out_names + rest   # the canonical order the printer writes
        arrays = tuple(GlobalArray(n, self.arrays[n].dims) for n in order)
        program = verify(Program(self.name, tuple(self.dims.values()), arrays, in_names,
                                 out_names, tuple(self.kernels), tuple(self.weights)))
        if self._blocks_fixed_by is None:
            from ..tuning.origins import reblock_tunable, remember
            tunable = reblock_tunable(program, self._free_blocks)
            if tunable is not None:
                remember(program, tunable)
        return program

    def _fixes_blocks(self, op: str) -> None:
        """``op`` means something that depends on the blocks (heads are column blocks,
        slices and concatenation are whole blocks, ``rotate_half`` works per block):
        the program is compiled at the blocks it was built with."""
        self._blocks_fixed_by = self._blocks_fixed_by or op
