"""Blockbuster: block-level AI operator fusion.

The public API, with stable names::

    import blockbuster as bb
    p = bb.workload("attention", N=200, blocks={"N": 64})   # unfused block program
    fused = bb.fuse(p).program                              # rewrite with the rules
    run = bb.compile(fused, backend="reference")            # callable(**arrays) -> outputs
    out = run(Q=q, K=k, V=v)["O"]
    print(bb.format_program(fused), bb.cost(fused).global_bytes)

Importing the package is cheap: each function imports its subsystem (lark, NumPy,
the backends) on first use, so ``python -m blockbuster --help`` and plugins that only
need the IR do not pay for the rest.
"""

from __future__ import annotations

from .errors import (BackendError, BlockbusterError, IRError, SourceError, UntrustedRulesError,
                     UsageError)

__version__ = "0.1.0"

__all__ = [
    "workload", "from_torch", "fuse", "compile", "cost", "parse_program", "format_program", "verify",
    "load_rules", "Limits",
    "BlockbusterError", "UsageError", "IRError", "BackendError", "SourceError",
    "UntrustedRulesError",
    "__version__",
]


def workload(name: str, blocks: dict[str, int] | None = None, **sizes: int):
    """The unfused block program of a built-in workload (``UsageError`` if unknown).

    ``sizes`` override dimension sizes (``N=200``), ``blocks`` block sizes. Without
    ``blocks``, :func:`compile` may choose other blocks for it (see there).
    """
    from .frontend.workloads import integer_sizes, workload as _workload
    from .tuning.origins import remember
    from .tuning.targets import workload_tunable
    program = _workload(name, blocks=blocks, **sizes)     # checks them
    sizes, blocks = integer_sizes(sizes), integer_sizes(blocks or {})
    return remember(program, workload_tunable(name, sizes, dict(blocks or {}), base=program))


def fuse(program, rules=None, limits=None, hardware=None, step_check=None,
         verify_steps=False, progress=None, trust_rules=False):
    """Rewrite ``program`` with the fusion rules; returns a ``FusionResult``
    (``program``, ``trace``, ``stop_reason``, ``seconds``).

    ``rules``: a RuleSet (``blockbuster.load_rules(path)``) or rule file path(s),
    default the shipped default rules. The rules of your own files are checked for
    soundness and stability first (once per file content: the verdict is cached) and
    an unsound or unstable one raises ``UntrustedRulesError``; ``trust_rules=True``
    skips the check. ``limits``: ``blockbuster.Limits``; ``verify_steps``: re-run the
    reference interpreter after every step and raise at the first step that changes
    the outputs (use small sizes: the interpreter is slow). A program too large to be
    one fusion candidate is fused by candidate selection (``result.pieces`` lists the
    chosen fused pieces); ``progress`` shows a progress bar (default: when stderr is a
    terminal).

    ``hardware``: the machine the pricing decisions (hold or recompute, what fits the
    local tier) are made for — a ``blockbuster.cost.Hardware``, or a backend (a
    registered name or a Backend object) whose own description is used. Default:
    ``blockbuster.cost.DEFAULT_HARDWARE``, the reference backend's generic 2-core
    CPU. Fuse with the hardware of the backend you will compile with
    (``fuse(p, hardware="numba")``): the same program may fuse differently on another.
    """
    from .select.selection import fuse_program
    _check_program(program, "fuse")
    if limits is not None:
        from .rewrite.engine import Limits
        if not isinstance(limits, Limits):
            raise UsageError(f"limits: expected a blockbuster.Limits (Limits(max_steps=..., "
                             f"max_seconds=...)), got {type(limits).__name__}")
    hardware = resolve_hardware(hardware)
    given = rules
    rules = _rule_set(rules)
    if given is not None and not trust_rules:
        from .rulecheck import require_trusted
        require_trusted(rules, hardware, "trust_rules=True")
    if verify_steps:
        from .checks.verify_steps import StepVerifier
        step_check = StepVerifier(program)
    result = fuse_program(program, rules, limits=limits, hardware=hardware,
                          step_check=step_check, progress=progress)
    from .tuning.origins import origin, remember
    from .tuning.targets import fused_origin, fuser
    made = origin(program)
    if made is not None and step_check is None:     # compile may re-derive it
        remember(result.program, fused_origin(made, fuser(rules, hardware, limits),
                                              rules, hardware))
    return result


def _check_program(program, what: str) -> None:
    from .ir.program import Program
    if not isinstance(program, Program):
        raise UsageError(f"{what}: expected a block program (blockbuster.workload(...), "
                         f"parse_program(text), GraphBuilder.build(...)), got "
                         f"{type(program).__name__}")


def _rule_set(rules):
    """A RuleSet from what ``fuse`` accepts: None (the default rules), a RuleSet, or
    one or more rule file paths (as ``torch.compile``'s ``rules`` option)."""
    import os
    from .dsl.ast import RuleSet
    from .dsl.loader import default_rules, load_rules
    if rules is None:
        return default_rules()
    if isinstance(rules, RuleSet):
        return rules
    paths = [rules] if isinstance(rules, (str, os.PathLike)) else rules
    if (isinstance(paths, (list, tuple)) and paths
            and all(isinstance(r, (str, os.PathLike)) for r in paths)):
        return load_rules(*paths)
    raise UsageError(f"rules: expected a RuleSet (blockbuster.load_rules(path)) or rule "
                     f"file paths, got {type(rules).__name__}")


def from_torch(fn, *example_inputs, weights="bind", blocks=None, name=None):
    """The unfused block program of a PyTorch function or module (needs the torch
    extra). See :func:`blockbuster.frontend.pytorch.from_torch`."""
    from .frontend.pytorch import from_torch as _from_torch
    return _from_torch(fn, *example_inputs, weights=weights, blocks=blocks, name=name)


def resolve_hardware(hardware=None):
    """The one place a missing hardware becomes a description: a ``Hardware`` as
    given, a backend (name or object) its own ``hardware``, None
    ``blockbuster.cost.DEFAULT_HARDWARE`` (the reference backend's)."""
    from .cost.hardware import DEFAULT_HARDWARE, Hardware
    if hardware is None:
        return DEFAULT_HARDWARE
    if isinstance(hardware, str):
        from .backends.registry import get_backend
        hardware = get_backend(hardware)
    if isinstance(hardware, Hardware):
        return hardware
    own = getattr(hardware, "hardware", None)
    if isinstance(own, Hardware):
        return own
    raise UsageError(f"hardware must be a blockbuster.cost.Hardware or a backend, "
                     f"got {type(hardware).__name__}")


def load_rules(*paths):
    """Load and statically check .bbr rule files into a RuleSet."""
    from .dsl.loader import load_rules as _load
    return _load(*paths)


def __getattr__(name):
    # Light import: Limits lives with the engine, loaded on first use.
    if name == "Limits":
        from .rewrite.engine import Limits
        return Limits
    raise AttributeError(f"module 'blockbuster' has no attribute {name!r}")


def compile(program, backend="reference", tune=None, **options):  # noqa: A001 - the API's name
    """Compile ``program`` with a backend (a registered name or a Backend object);
    ``options`` go to the backend (e.g. ``dtype``, ``threads`` for numba).

    Returns ``compiled(**arrays) -> {output name: array}``; ``compiled.program`` is
    the program compiled.

    ``tune`` (``"model"``, ``"measure"`` or ``"off"``; default
    ``$BLOCKBUSTER_TUNE``, else ``"model"``): a program made by :func:`workload`
    without ``blocks`` (and fused from one by :func:`fuse`) is derived again with
    the block sizes chosen for this backend (:mod:`blockbuster.tuning`; cached on
    disk): ``compiled.program`` then has those blocks. Other programs are compiled
    as they are.
    """
    _check_program(program, "compile")
    from .backends.base import Backend
    if isinstance(backend, str):
        from .backends.registry import get_backend
        backend = get_backend(backend)
    elif not isinstance(backend, Backend):
        raise UsageError(f"compile: backend must be a backend's name (`python -m blockbuster "
                         f"backends` lists them) or a Backend, got {type(backend).__name__}")
    from .tuning import resolve_mode
    mode = resolve_mode(tune, "model")
    if mode != "off":
        from .tuning import tune as _tune
        from .tuning.origins import origin
        made = origin(program)
        if made is not None and made.sizes:
            tuned = _tune(made, backend, mode)
            if tuned.blocks != {d: program.dim(d).block for d in made.sizes}:
                program = tuned.program or made.derive(tuned.blocks)
    try:
        return backend.compile(program, **options)
    except TypeError as err:
        unknown = _unknown_option(err, options)
        if unknown is None:
            raise
        raise UsageError(f"compile: backend '{backend.name}' takes no option "
                         f"'{unknown}'") from None


def _unknown_option(err: TypeError, options: dict) -> str | None:
    """The option of ``options`` that a backend's compiler refused as an unexpected
    keyword (Python's own TypeError names it), else None: another TypeError is a bug."""
    import re
    found = re.search(r"unexpected keyword argument '(\w+)'", str(err))
    return found.group(1) if found and found.group(1) in options else None


# ``cost`` is both the API function and the subpackage ``blockbuster.cost``, and
# importing a subpackage rebinds the parent's attribute to the module. A plain
# ``def cost`` here would be silently replaced by the module (or, defined after it,
# would break ``import blockbuster.cost.model``). So the subpackage itself is made
# callable: ``blockbuster.cost(program)`` prices a program, ``blockbuster.cost.Hardware``
# still names the class. The cost package imports only attrs and the IR: cheap.
import types as _types  # noqa: E402

from . import cost  # noqa: E402


class _CallableCostModule(_types.ModuleType):
    def __call__(self, program, hardware=None):
        """Data movement, FLOPs, footprint and a roofline time estimate of ``program``
        (``cost(program, hardware=None) -> Cost``) on ``hardware``: as for
        :func:`blockbuster.fuse`, a ``Hardware``, a backend, or None for
        ``DEFAULT_HARDWARE``."""
        _check_program(program, "cost")
        return self.cost(program, resolve_hardware(hardware))


cost.__class__ = _CallableCostModule


def parse_program(text: str, filename: str = "<program>", check: bool = True):
    """Parse the text form of a block program (``SourceError`` on bad syntax);
    verify it unless ``check`` is false."""
    from .ir.parser import parse_program as _parse
    if not isinstance(text, str):
        raise UsageError(f"parse_program: expected the program's text (a str; read a file "
                         f"with pathlib.Path(...).read_text()), got {type(text).__name__}")
    return _parse(text, filename=filename, check=check)


def format_program(program) -> str:
    """The text form of a block program (``parse_program`` reads it back)."""
    from .ir.printer import format_program as _format
    return _format(program)


def verify(program):
    """Raise ``IRError`` naming the offending node if ``program`` is ill-formed;
    return the program otherwise."""
    from .ir.verify import verify as _verify
    return _verify(program)
