"""What the command line runs: a built-in workload, a program file, or a model.

``TARGET`` is one of

* a built-in workload name (``attention``): validated against its NumPy oracle;
* ``PATH.bbp``, a program in the text form: validated against the reference
  interpreter running the *unfused* program in float64;
* ``module.py:factory``, a Python file whose ``factory()`` returns a ``Program`` (as
  a program file) or ``(torch module or function, example inputs)``: imported with
  :func:`blockbuster.from_torch` and validated against PyTorch eager in float64.

Each becomes a :class:`Subject`: the unfused program, the inputs to run it on and an
oracle (inputs -> expected outputs).
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import traceback
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Callable

import attrs
import numpy as np

from .errors import UsageError
from .ir.program import Program


@attrs.frozen
class Subject:
    label: str                                   # the report's "workload"
    kind: str                                    # workload, program, torch
    program: Program
    make_inputs: Callable[[Program, int], dict]  # (fused program, seed) -> arrays
    oracle: Callable[[dict], dict]               # inputs -> float64 outputs
    # inputs -> the same math run unfused in float32 (NumPy or PyTorch eager, as a
    # user would run it): its error against the oracle sets the tolerance of the
    # fused program (validate.tolerance_from_baseline); None: the fixed default.
    baseline: Callable[[dict], dict] | None = None


def is_factory(target: str) -> bool:
    path, sep, attr = target.rpartition(":")
    return bool(sep) and path.endswith(".py") and attr.isidentifier()


def load_subject(target: str, sizes: dict | None = None, blocks: dict | None = None,
                 inputs_file: str | None = None) -> Subject:
    sizes, blocks = dict(sizes or {}), dict(blocks or {})
    if is_factory(target):
        subject = _from_factory(target, sizes, blocks)
    elif target.endswith(".bbp"):
        subject = _program_subject(target, _read_program(target), sizes, blocks)
    elif Path(target).suffix or "/" in target:
        raise UsageError(f"{target}: not a workload, a .bbp program or module.py:factory")
    else:
        subject = _workload_subject(target, sizes, blocks)
    if inputs_file is not None:
        subject = attrs.evolve(subject, make_inputs=_inputs_from(inputs_file, subject))
    return subject


# --- built-in workloads ------------------------------------------------------------------

def _workload_subject(name: str, sizes: dict, blocks: dict) -> Subject:
    from .frontend.workloads import workload
    from .oracles import oracle, oracle_float32
    from .validate import random_inputs
    program = workload(name, blocks=blocks, **sizes)
    return Subject(name, "workload", program, lambda p, seed: random_inputs(p, seed=seed),
                   lambda inputs: oracle(name, inputs),
                   lambda inputs: oracle_float32(name, inputs))


# --- program files --------------------------------------------------------------------------

def _read_program(path: str) -> Program:
    from .dsl.loader import read_text
    from .ir.parser import parse_program
    try:
        text = read_text(Path(path))      # not UTF-8 or binary: FILE:LINE:COL, exit 2
    except OSError as err:
        raise UsageError(f"cannot read {path}: {err.strerror}") from None
    return parse_program(text, filename=path)


def _resize(program: Program, sizes: dict, blocks: dict, what: str) -> Program:
    from .errors import IRError
    from .ir.types import Dim
    from .ir.verify import verify
    known = {d.name for d in program.dims}
    for name in list(sizes) + list(blocks):
        if name not in known:
            raise UsageError(f"{what}: no dimension {name} (dimensions: "
                             f"{', '.join(sorted(known))})")
    for d in program.dims:
        if d.point and d.name in blocks:
            raise UsageError(f"{what}: --block {d.name}: {d.name} is a point dimension "
                             f"(iterated one index at a time), it has no block size")
    dims = []
    for d in program.dims:
        size = sizes.get(d.name, d.size)
        block = 1 if d.point else min(blocks.get(d.name, d.block), size)
        dims.append(Dim(d.name, size, block, d.point))
    for message in stale_means(program, sizes):
        warnings.warn(f"{what}: {message}", ResizeWarning, stacklevel=2)
    try:
        resized = verify(program.evolve(dims=tuple(dims)))
    except IRError as err:            # the file parsed; these sizes break it
        given = " ".join(f"--size {n}={v}" for n, v in sizes.items()) + "".join(
            f" --block {n}={v}" for n, v in blocks.items())
        raise IRError(f"{what} with {given.strip()}: {err}") from None
    # A builder program whose blocks the compiler may choose stays so at other sizes
    # (hand-set blocks are an experiment: reproduced as given).
    from .tuning.origins import origin, reblock_tunable, remember
    made = origin(program)
    if made is not None and not blocks and resized is not program:
        tunable = reblock_tunable(resized, made.sizes)
        if tunable is not None:
            remember(resized, tunable)
    return resized


class ResizeWarning(UserWarning):
    """``--size`` changed a dimension that a constant of the program was written for
    (a mean's ``1/size``): the constant stays as written."""


def load_again(target: str, sizes: dict, blocks: dict, inputs_file: str | None = None
               ) -> Subject:
    """:func:`load_subject` once more, at the blocks tuning chose: what it had to say
    about the sizes (:class:`ResizeWarning`) was said the first time."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResizeWarning)
        return load_subject(target, sizes, blocks, inputs_file)


def stale_means(program: Program, sizes: dict) -> list[str]:
    """What resizing ``program`` to ``sizes`` leaves stale: each product of a sum
    over a resized dimension and the constant 1/(its size in the program) -- a mean
    written for the old size, which the new size does not rescale (the program's
    constants are the user's to change)."""
    old = {d.name: d.size for d in program.dims}
    changed = {n for n, v in sizes.items() if n in old and v != old[n]}
    found: list[str] = []
    for k in program.kernels:
        for node in {n for st in k.stores for n in st.value.walk() if n.op == "mul"}:
            for a, b in (node.args, node.args[::-1]):
                if not (a.op == "const" and b.op == "reduce" and b.attr.combiner == "sum"
                        and b.attr.dim in changed and b.attr.lo is None and b.attr.hi is None):
                    continue
                dim, n = b.attr.dim, old[b.attr.dim]
                if a.attr != 0 and abs(a.attr * n - 1.0) <= 1e-6:
                    note = (f"kernel {k.name} multiplies a sum over {dim} by {a.attr:g} = "
                            f"1/{n}, {dim}'s size as written: with --size {dim}="
                            f"{sizes[dim]} it stays 1/{n} (no longer a mean over {dim}); "
                            f"write the program at that size to rescale it")
                    if note not in found:
                        found.append(note)
    return found


def _program_subject(label: str, program: Program, sizes: dict, blocks: dict) -> Subject:
    from .validate import random_inputs
    program = _resize(program, sizes, blocks, label)

    def make_inputs(p: Program, seed: int) -> dict:
        arrays = random_inputs(p, seed=seed)
        for name, value in (program.params or {}).items():
            arrays[name] = np.asarray(value, dtype=np.float32)
        return arrays
    return Subject(label, "program", program, make_inputs,
                   lambda inputs: reference_run(program, inputs, np.float64),
                   lambda inputs: reference_run(program, inputs, np.float32))


def reference_float64(program: Program, inputs: dict) -> dict:
    """The reference interpreter on the unfused program, in float64."""
    return reference_run(program, inputs, np.float64)


def reference_run(program: Program, inputs: dict, dtype) -> dict:
    """The reference interpreter on the unfused program, computing in ``dtype``
    (float64: a program file's oracle; float32: its baseline, what the program
    achieves unfused in the precision it runs in)."""
    from .backends.reference import backend
    run = backend.compile(program, dtype=dtype)
    return dict(run(**{k: np.asarray(v, dtype=dtype) for k, v in inputs.items()}))


# --- Python factories -----------------------------------------------------------------------

def _from_factory(target: str, sizes: dict, blocks: dict) -> Subject:
    path, _, attr = target.rpartition(":")
    made = _call_factory(path, attr)
    if isinstance(made, Program):
        return _program_subject(target, made, sizes, blocks)
    if isinstance(made, tuple) and len(made) == 2:
        if sizes:
            raise UsageError(f"{target}: --size does not apply to a PyTorch model (its "
                             f"example inputs fix the sizes)")
        model, example = made
        if isinstance(example, Mapping):     # keyword arguments: a tokenizer's output
            model, example = _keyword_call(target, model, example)
        return torch_subject(target, model, tuple(example) if isinstance(
            example, (list, tuple)) else (example,), blocks)
    raise UsageError(f"{target}: the factory must return a Program or "
                     f"(torch module or function, example inputs), got {type(made).__name__}")


def _keyword_call(target: str, model, example: Mapping) -> tuple:
    """``model(**example)`` as a module of positional arguments named after the keys
    (the program's inputs are ``input_ids``, ``attention_mask``, ...)."""
    import torch
    from .frontend.pytorch.capture import cache_off_kwargs
    names = list(example)
    extra = cache_off_kwargs(model, tuple(names))     # a decoder's cache: not exported
    bad = [n for n in names if not (isinstance(n, str) and n.isidentifier())]
    if bad:
        raise UsageError(f"{target}: example input names must be Python identifiers, "
                         f"got {bad[0]!r}")

    class KeywordCall(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model            # a module's parameters and dtype go with it

        def forward(self, *args):
            return self.model(**dict(zip(names, args)), **extra)
    KeywordCall.__name__ = type(model).__name__ if isinstance(model, torch.nn.Module) \
        else getattr(model, "__name__", "model")
    # torch.export names the graph's inputs after forward's parameters
    KeywordCall.forward.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
         for n in ["self"] + names])
    return KeywordCall().eval(), tuple(example.values())


def _call_factory(path: str, attr: str):
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{path}: no such file")
    name = f"_blockbuster_factory_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    # registered, as an imported module is: torch.export's strict capture (which
    # records the model's own source lines for error messages) looks it up by name
    sys.modules[name] = module
    sys.path.insert(0, str(file.resolve().parent))
    try:
        spec.loader.exec_module(module)
        factory = getattr(module, attr, None)
        if not callable(factory):
            raise UsageError(f"{path}: no function {attr}()")
        return factory()
    except UsageError as err:
        where = _where_in(err, file, path)
        if not where:
            raise
        raise UsageError(f"{err}{where}") from err
    except Exception as err:            # the original stays the cause: --debug shows it
        raise UsageError(f"{path}:{attr}(): {type(err).__name__}: {err}"
                         f"{_where_in(err, file, path)}") from err
    finally:
        sys.path.remove(str(file.resolve().parent))


def _where_in(err: BaseException, file: Path, shown: str) -> str:
    """`` (at FILE:LINE)``: the last line of the user's file that the error passed
    through (where it was raised, or the call that led out of the file), else ''."""
    mine = file.resolve()
    lines = [f.lineno for f in traceback.extract_tb(err.__traceback__)
             if Path(f.filename).resolve() == mine]
    return f" (at {shown}:{lines[-1]})" if lines else ""


def torch_subject(label: str, model, example: tuple, blocks: dict) -> Subject:
    import torch

    from .frontend.pytorch import lower_module
    low = lower_module(model, *example, blocks=blocks or None)
    known = {d.name for d in low.program.dims}
    for name in blocks or {}:
        if name not in known:          # a typo would run at the default blocks unsaid
            raise UsageError(f"{label}: no dimension {name} (dimensions: "
                             f"{', '.join(sorted(known))})")
    program = low.program.evolve(params=dict(low.weights))
    # tensors are the program's inputs; other arguments (a Python float) were
    # specialised by the export and are passed to the eager model as given
    tensors = [i for i, t in enumerate(example) if isinstance(t, torch.Tensor)]
    by_name = {b.name: example[i] for b, i in zip(low.inputs, tensors)}

    def make_inputs(p: Program, seed: int) -> dict:
        arrays = {b.name: _array(by_name[b.name]).reshape(p.shape(b.name))
                  for b in low.inputs}
        return arrays

    def eager(inputs: dict, dtype) -> dict:
        """The model run eagerly in ``dtype`` (float64: the oracle; float32: what
        the user's own PyTorch gives, the validation baseline)."""
        np_dtype = np.float64 if dtype is torch.float64 else np.float32
        args = list(example)
        for b, i in zip(low.inputs, tensors):
            args[i] = _like(torch.from_numpy(np.asarray(inputs[b.name], dtype=np_dtype)
                                             ).reshape(b.shape), by_name[b.name])
        out = _eager(model, args, dtype)
        return {b.name: o.detach().numpy().reshape(program.shape(b.name))
                for b, o in zip(low.outputs, out)}

    def oracle(inputs: dict) -> dict:
        from .validate import OracleUnavailable
        try:
            return eager(inputs, torch.float64)
        except Exception as err:       # noqa: BLE001 - the user's model, in float64
            # A function (not a module) closing over float32 modules cannot be
            # converted: validation falls back to float32 eager and says why.
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise OracleUnavailable(f"float64 eager fails ({type(err).__name__}: "
                                    f"{first})") from None

    def baseline(inputs: dict) -> dict:
        return eager(inputs, torch.float32)
    return Subject(label, "torch", program, make_inputs, oracle, baseline)


def _like(t, example):
    """float64 for floating inputs; integer inputs (token ids) keep their dtype."""
    return t if example.dtype.is_floating_point else t.round().to(example.dtype)


def _array(t) -> np.ndarray:
    return t.detach().to("cpu").float().numpy()


def _eager(model, args, dtype) -> list:
    import copy

    import torch

    from .frontend.pytorch.capture import cache_off_kwargs
    extra = cache_off_kwargs(model, len(args))       # called as the export called it
    if isinstance(model, torch.nn.Module):
        model = copy.deepcopy(model).to(dtype).eval()
    default = torch.get_default_dtype()
    try:
        # Tensors the model makes without a dtype (XGLM's `torch.full((),
        # finfo(dtype).min)`) in the dtype it runs in: float64's min overflows float32.
        torch.set_default_dtype(dtype)
        with torch.no_grad():
            out = model(*args, **extra)
    finally:
        torch.set_default_dtype(default)
    # flattened as torch.export flattens outputs (a Hugging Face ModelOutput too)
    return [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]


# --- --inputs FILE.npz ------------------------------------------------------------------------

def _inputs_from(path: str, subject: Subject):
    not_npz = UsageError(f"--inputs {path}: not a NumPy .npz archive of arrays by name "
                         "(numpy.savez writes one)")
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        raise not_npz from None
    if not isinstance(data, np.lib.npyio.NpzFile):     # a .npy array, say
        raise not_npz
    given = {}
    with data:
        for k in data.files:
            try:
                given[k] = np.asarray(data[k])
            except ValueError as err:
                if "allow_pickle" in str(err):      # saved from an object array
                    raise UsageError(f"--inputs {path}: {k} holds Python objects, not "
                                     "real numbers") from None
                raise UsageError(f"--inputs {path}: {k}: {err}") from None
            except (OSError, EOFError) as err:
                raise UsageError(f"--inputs {path}: {k}: {err}") from None
    for name, value in given.items():
        if value.dtype.kind not in "biuf":
            raise UsageError(f"--inputs {path}: {name} holds {value.dtype} values, not "
                             "real numbers")
    program = subject.program
    unknown = sorted(set(given) - set(program.inputs))
    if unknown:
        raise UsageError(f"--inputs {path}: {unknown[0]} is not an input of "
                         f"{program.name} (inputs: {', '.join(program.inputs)})")

    def make_inputs(p: Program, seed: int) -> dict:
        arrays = subject.make_inputs(p, seed)
        for name, value in given.items():
            # The same shape, up to axes of length 1: a transposed or flattened array
            # holds the right number of values in the wrong places.
            if ([n for n in value.shape if n != 1]
                    != [n for n in p.shape(name) if n != 1]):
                raise UsageError(f"--inputs {path}: {name} has shape {value.shape}, the "
                                 f"program needs {p.shape(name)}")
            arrays[name] = value.astype(np.float32).reshape(p.shape(name))
        return arrays
    return make_inputs
