"""The backend interface: what every plugin (and the reference interpreter) provides.

A :class:`Backend` turns a block program into a :class:`CompiledProgram`: a callable
taking NumPy arrays by input name and returning the outputs by name. A backend only
supplies ``compile_fn(program, **options) -> run``, where ``run`` maps checked input
arrays to output arrays; verification, timing and the checks on the caller's arrays
live here, once, so every backend rejects a missing or mis-shaped input with the same
one-line :class:`~blockbuster.errors.BackendError`.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

import attrs
import numpy as np

from ..cost.hardware import Hardware
from ..errors import BackendError
from .frozen import freeze
from ..ir.program import Program
from ..ir.verify import verify

Arrays = dict[str, np.ndarray]
#: What ``compile_fn`` returns: checked inputs by name -> outputs by name.
Runner = Callable[[Arrays], Mapping[str, np.ndarray]]


@attrs.frozen(kw_only=True, eq=False)
class CompiledProgram:
    """A program ready to run: ``compiled(X=x, W=w)`` or ``compiled({"X": x, ...})``."""

    program: Program
    backend: str
    run: Runner = attrs.field(repr=False)
    compile_seconds: float = 0.0
    # The backend's compiler for a part of the program (weight preparation and the
    # per-call rest), used by ``bind``.
    compile_part: Callable[[Program], Runner] | None = attrs.field(default=None, repr=False)

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.program.inputs

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.program.outputs

    def __call__(self, arrays: Mapping[str, Any] | None = None, /, **kwargs) -> Arrays:
        given = _by_name(arrays, "a compiled program")
        for name in kwargs:
            if name in given:
                raise BackendError(f"input '{name}' is given twice (in the dict and as a keyword)")
        given.update(kwargs)
        for name, value in (self.program.params or {}).items():
            if name in self.program.inputs:    # an imported model's own parameters
                given.setdefault(name, value)
        results = self.run(self.check_inputs(given))
        for name in self.program.outputs:
            if name not in results:
                raise BackendError(f"backend '{self.backend}' did not compute output "
                                   f"'{name}' of program {self.program.name}")
        return {name: results[name] for name in self.program.outputs}

    def bind(self, arrays: Mapping[str, Any] | None = None, /, **weights) -> "BoundProgram":
        """Bind the program's weights once: the weight-preparation kernels run now,
        once, and the returned callable takes only the other inputs.

        Contract: the weights are copied when bound. Changing the caller's arrays
        afterwards does not change the bound program; call ``bind`` again with the new
        weights (that reruns the preparation)."""
        given = _by_name(arrays, "bind")
        given.update(weights)
        p = self.program
        for name, value in (p.params or {}).items():
            if name in p.weights:
                given.setdefault(name, value)
        missing = [w for w in p.weights if w not in given]
        extra = [n for n in given if n not in p.weights]
        if extra:
            raise BackendError(f"bind takes the weights of program {p.name} "
                               f"({', '.join(p.weights) or 'none'}), not: {', '.join(extra)}")
        if missing:
            raise BackendError(f"bind: missing weight '{missing[0]}' of program {p.name}")
        if self.compile_part is None:
            raise BackendError(f"backend '{self.backend}' cannot compile parts of a program")
        checked = {n: self.check_array(n, given[n], "weight") for n in p.weights}
        bound = {n: np.array(v, copy=True) for n, v in checked.items()}   # the snapshot
        return bind_weights(p, self.backend, self.compile_part, bound, snapshot=True)

    def check_inputs(self, given: Mapping[str, Any]) -> Arrays:
        """The caller's arrays as NumPy arrays, or a BackendError naming the first problem."""
        p = self.program
        for name in sorted(given):
            if name not in p.inputs:
                listed = ", ".join(p.inputs) or "none"
                raise BackendError(f"program {p.name} has no input '{name}' (its inputs: {listed})")
        checked: Arrays = {}
        for name in p.inputs:
            if name not in given:
                declared = f"{name}[{', '.join(p.array(name).dims)}]"
                raise BackendError(f"missing input '{name}' of program {p.name} "
                                   f"({declared}, shape {p.shape(name)})")
            checked[name] = self.check_array(name, given[name])
        return checked

    def check_array(self, name: str, value, what: str = "input") -> np.ndarray:
        """``value`` as the program's input ``name`` (a NumPy array of its shape, axes
        of length 1 aside), or a BackendError saying what is wrong with it."""
        p = self.program
        declared = f"{name}[{', '.join(p.array(name).dims)}]"
        expected = p.shape(name)
        try:
            arr = np.asarray(value)
        except Exception as err:  # ragged nested lists and the like
            raise BackendError(f"{what} '{name}' is not an array: {err}") from None
        if arr.dtype.kind not in "biuf":
            raise BackendError(f"{what} '{name}' has dtype {arr.dtype}; "
                               "a real numeric array is needed")
        if arr.shape != expected and _squeezed(arr.shape) == _squeezed(expected):
            arr = arr.reshape(expected)    # e.g. a PyTorch [1, T, E] for [T, E]
        if arr.shape != expected:
            raise BackendError(f"{what} '{name}' has shape {arr.shape}, but program "
                               f"{p.name} declares {declared} with shape {expected}")
        return _owned_layout(arr)


@attrs.frozen(eq=False)
class BoundProgram:
    """A compiled program with its weights bound (``CompiledProgram.bind``): call it
    with the other inputs; weight preparation already ran, once."""

    per_call: CompiledProgram
    fixed: Arrays = attrs.field(repr=False)     # bound weights and prepared arrays
    weight_prep_kernels: int = 0
    weights: tuple[str, ...] = ()               # the names bound

    @property
    def inputs(self) -> tuple[str, ...]:
        """What a call takes: the program's inputs that are not weights."""
        return tuple(n for n in self.per_call.inputs if n not in self.fixed)

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.per_call.outputs

    @property
    def program(self):
        """The program a call runs: the per-call part (weight preparation split off)."""
        return self.per_call.program

    @property
    def kernels_per_call(self) -> int:
        return len(self.per_call.program.kernels)

    def __call__(self, arrays: Mapping[str, Any] | None = None, /, **kwargs) -> Arrays:
        given = _by_name(arrays, "a bound program")
        given.update(kwargs)
        for name in given:
            if name in self.fixed or name in self.weights:
                raise BackendError(f"'{name}' is bound; call bind() again to change it")
            if name not in self.inputs:
                raise BackendError(f"program {self.program.name} has no input '{name}' "
                                   f"(its inputs once bound: {', '.join(self.inputs) or 'none'})")
        return self.per_call({**given, **self.fixed})


def bind_weights(program: Program, backend: str, compile_part: Callable[[Program], Runner],
                 weights: Arrays, snapshot: bool = False) -> "BoundProgram":
    """``program`` split into weight preparation and the per-call rest, each compiled
    by ``compile_part``; the preparation runs now on ``weights`` (every weight of the
    program, used as they are: no copy). :meth:`CompiledProgram.bind` binds a
    snapshot of the caller's arrays (``snapshot``: they are this library's own, and
    registered as constant, :mod:`.frozen`); the torch backend binds a model's
    parameters without compiling the whole program first. The prepared arrays are
    constant either way."""
    from ..ir.prep import split_weight_prep
    split = split_weight_prep(program)
    prepared: Arrays = {}
    if split.prep is not None:
        prep = CompiledProgram(program=split.prep, backend=backend,
                               run=compile_part(split.prep))
        prepared = dict(prep({n: weights[n] for n in split.prep.inputs}))
    per_call = CompiledProgram(program=split.per_call, backend=backend,
                               run=compile_part(split.per_call))
    for value in ({**weights, **prepared} if snapshot else prepared).values():
        freeze(value)
    fixed = {n: v for n, v in {**weights, **prepared}.items() if n in split.per_call.inputs}
    return BoundProgram(per_call, fixed, len(split.prep.kernels) if split.prep else 0,
                        program.weights)


def as_dtype(dtype, backend: str) -> np.dtype:
    """``np.dtype(dtype)``, or a one-line :class:`BackendError` naming the backend for
    what NumPy cannot read as a dtype (``dtype=3``, ``dtype="f32"``)."""
    try:
        return np.dtype(dtype)
    except (TypeError, ValueError):
        raise BackendError(f"{backend}: dtype must be a NumPy floating-point dtype "
                           f"(np.float32, \"float64\"), got {dtype!r}") from None


def _by_name(arrays, what: str) -> dict:
    """The arrays of a positional argument: a mapping of names to arrays. An array
    passed by position has no name to go by (and ``arrays or {}`` would ask NumPy for
    its truth value)."""
    if arrays is None:
        return {}
    if not isinstance(arrays, Mapping):
        raise BackendError(f"{what} takes its arrays by name (keywords NAME=array, or a "
                           f"dict of them), got a {type(arrays).__name__} by position")
    return dict(arrays)


def _squeezed(shape) -> tuple:
    return tuple(s for s in shape if s != 1)


def _owned_layout(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous, writeable array with ``arr``'s values. Compiled kernels are
    specialised on layout and writeability (Numba rejects a read-only array outright);
    a copy is made only when the caller's array is read-only or not C-contiguous."""
    if arr.flags.c_contiguous and arr.flags.writeable:
        return arr
    return np.array(arr, order="C", copy=True)


@attrs.frozen(kw_only=True, eq=False)
class Backend:
    """A named way to run block programs.

    ``hardware`` (required) describes the machine the backend runs on, for the cost
    model: fusion for this backend prices and decides with it (``blockbuster.fuse(p,
    hardware=backend)``, ``blockbuster run/show --backend``). ``compile_fn(program,
    **options)`` returns a :data:`Runner`. ``lowered_ops``/``lowered_combiners``: the
    registry entries (``blockbuster.ir.ops.OPS``, ``blockbuster.ir.combiners.COMBINERS``)
    this backend has a lowering for, read from the backend's own lowering table; the
    conformance suite requires all of them. A backend whose run times say nothing
    about ``hardware`` (an emulator of it) defines ``timings_meaningful = False``:
    measured block tuning then ranks by the cost model alone. ``generates_source``:
    False for a backend that runs programs without generating source (an
    interpreter), so that ``run --emit-source`` is refused before any work.
    """

    name: str
    description: str
    compile_fn: Callable[..., Runner] = attrs.field(repr=False)
    hardware: Hardware = attrs.field(validator=attrs.validators.instance_of(Hardware))
    lowered_ops: frozenset = frozenset()
    lowered_combiners: frozenset = frozenset()
    #: Whether compiled programs carry the ``source`` they were generated from (None:
    #: not said; ``run --emit-source`` then finds out after compiling).
    generates_source: bool | None = None

    def compile(self, program: Program, **options) -> CompiledProgram:
        start = time.perf_counter()
        verify(program)  # backends may assume a well-formed program
        run = self.compile_fn(program, **options)
        return CompiledProgram(program=program, backend=self.name, run=run,
                               compile_seconds=time.perf_counter() - start,
                               compile_part=lambda part: self.compile_fn(part, **options))
