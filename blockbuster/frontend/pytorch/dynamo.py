"""``torch.compile(model, backend="blockbuster")``.

TorchDynamo hands over an FX graph and example inputs (parameters among them). The
graph is exported to ATen operators and lowered as a whole; when a node cannot be
lowered, it stays in eager PyTorch and the rest is split into convex regions
(``CapabilityBasedPartitioner``), each lowered, fused with the rules and compiled
on its own. Fused programs are cached on disk (:mod:`blockbuster.fusion_cache`) and
Numba caches its machine code, so a second process compiles in a fraction of the
time. A region's parameters are read when it is compiled; if one changes (its
``_version`` moves, it is replaced, an optimizer steps it or a sample of its values
differs: :mod:`.stamps`), the region is compiled again. With gradients needed, a
compiled graph's backward pass recomputes the original graph (:mod:`.autograd`).

Options (``torch.compile(..., options={...})``): ``backend`` (a registered backend
name; default the best installed: Numba, else the reference interpreter), ``rules``
(a .bbr path or a list of them; default the shipped rules; checked for soundness
and stability first, as by ``blockbuster.fuse``, unless ``trust_rules`` is True),
``blocks`` (block sizes by dimension name) and ``hardware`` (a
``blockbuster.cost.Hardware``; default the backend's), ``tune`` (``"model"``,
``"measure"`` or ``"off"``; default ``$BLOCKBUSTER_TUNE``, else ``"model"``): without ``blocks``, each region's free
block sizes (every tiled dimension not split into heads) are chosen for the backend
by :mod:`blockbuster.tuning`, each candidate lowered and fused again; the choice is
cached on disk.
"""

from __future__ import annotations

import copy
import operator
import os
import threading
import warnings

import attrs
import numpy as np

from ...errors import BlockbusterError, UntrustedRulesError, UsageError
from .dims import ImportError_
from .layouts import as_traced, output_layouts

_OPTIONS = ("backend", "rules", "trust_rules", "blocks", "hardware", "tune")

#: Compiles take turns: graphs compiled from several threads at once (export,
#: lowering, a region rebuilt after its weights changed) share PyTorch's tracing
#: state and this library's caches.
_COMPILE_LOCK = threading.RLock()


@attrs.frozen
class CompileOptions:
    backend: str
    rules: object = None          # a RuleSet, or None for the default rules
    blocks: dict | None = None
    hardware: object = None
    tune: str = "model"

    @classmethod
    def parse(cls, options) -> "CompileOptions":
        options = dict(options or {})
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            raise UsageError(f"torch.compile(backend='blockbuster'): unknown option "
                             f"{unknown[0]!r} (options: {', '.join(_OPTIONS)})")
        from ...backends.registry import default_backend_name, get_backend
        name = options.get("backend") or default_backend_name()
        backend = get_backend(name)                 # a clear error if unknown
        rules = options.get("rules")
        if rules is not None and not hasattr(rules, "rules"):
            from ...dsl.loader import load_rules
            rules = load_rules(*([rules] if isinstance(rules, str) else rules))
        hardware = options.get("hardware") or backend.hardware
        trust = options.get("trust_rules", False)
        if not isinstance(trust, bool):
            raise UsageError(f"torch.compile(backend='blockbuster'): option 'trust_rules' "
                             f"must be True or False, got {trust!r}")
        if rules is not None and not trust:     # as blockbuster.fuse: checked first
            from ...rulecheck import require_trusted
            require_trusted(rules, hardware, "options={'trust_rules': True}")
        from ...tuning import resolve_mode
        from .dims import check_blocks
        blocks = options.get("blocks")
        return cls(name, rules, None if blocks is None else check_blocks(blocks),
                   hardware, resolve_mode(options.get("tune"), "model"))


def blockbuster_backend(gm, example_inputs, options=None, **_ignored):
    """The ``torch_dynamo_backends`` entry point."""
    from .autograd import differentiable
    with _COMPILE_LOCK:
        opts = CompileOptions.parse(options)
        _scalar_inputs_as_tensors(gm, example_inputs)
        if any(_symbolic(t) for t in example_inputs):
            # dynamic shapes: one program per size
            return differentiable(Specializing(gm, opts), gm, _report)
        return differentiable(compile_graph(gm, list(example_inputs), opts), gm, _report)


_ARITHMETIC = {operator.add, operator.sub, operator.mul, operator.truediv, operator.pow}


def _scalar_inputs_as_tensors(gm, example_inputs) -> None:
    """A Python number TorchDynamo made an input (a sampling temperature changed
    between calls) reaches the graph as a 0-d tensor read with ``.item()``, which
    torch.export cannot capture (the whole graph went back to PyTorch). Where the
    number only meets tensors in arithmetic (``logits / t``), the 0-d tensor is used
    as it is: the same values, and one program for every temperature."""
    import torch
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    changed = False
    for node, example in zip(placeholders, example_inputs):
        if not (isinstance(example, torch.Tensor) and example.dim() == 0
                and example.dtype.is_floating_point):
            continue
        for item in [u for u in node.users if u.op == "call_method" and u.target == "item"]:
            if all(u.op == "call_function" and u.target in _ARITHMETIC
                   and any(isinstance(a, torch.fx.Node) and a is not item
                           for a in u.args) for u in item.users):
                item.replace_all_uses_with(node)
                gm.graph.erase_node(item)
                changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()


def _symbolic(x) -> bool:
    import torch
    if isinstance(x, torch.Tensor):
        return any(not isinstance(s, int) for s in x.shape)
    return not isinstance(x, (int, float, bool))


class Specializing:
    """A graph TorchDynamo compiled with symbolic sizes: block programs have fixed
    sizes, so each concrete input signature is compiled on its first call (sizes
    and integer arguments are the key) and reused after."""

    def __init__(self, gm, opts: CompileOptions):
        self.gm, self.opts = gm, opts
        self.compiled: dict = {}
        # TorchDynamo drops the placeholders' sources once the backend returns: which
        # inputs are buffers is read now, for the compiles on the first calls.
        self.sources = _sources(gm)

    def __call__(self, *args):
        key = tuple(tuple(a.shape) if hasattr(a, "shape") else a for a in args)
        fn = self.compiled.get(key)
        if fn is None:
            with _COMPILE_LOCK:
                fn = self.compiled.get(key)
                if fn is None:
                    fn = self.compiled[key] = compile_graph(self.gm, list(args), self.opts,
                                                            self.sources)
        return fn(*args)


class FallbackWarning(UserWarning):
    """Part of a graph given to ``torch.compile(backend="blockbuster")`` runs in
    eager PyTorch (an operator Blockbuster does not lower, or a region it could not
    compile); the message says which and why. Silence it with
    ``warnings.filterwarnings("ignore", category=FallbackWarning)``."""


def _report(message: str) -> None:
    if os.environ.get("BLOCKBUSTER_VERBOSE"):
        print(f"blockbuster: {message}")
    warnings.warn(f"blockbuster: {message}", FallbackWarning, stacklevel=3)


def compile_graph(gm, example_inputs: list, opts: CompileOptions,
                  sources: list | None = None):
    from .capture import export
    params = _state_positions(gm, example_inputs, sources)
    try:
        ep = export(gm, tuple(example_inputs), strict=False)
    except ImportError_ as exc:
        _report(f"the whole graph is left to PyTorch: {exc}{_runtime_number_hint(exc)}")
        return gm
    unsupported: set[str] = set()
    limit = sum(1 for _ in ep.graph.nodes)
    for _ in range(limit + 1):
        try:
            if not unsupported:
                try:
                    whole = WholeGraph(ep, example_inputs, params, opts)
                    _check_block_names(opts, [whole])
                    return whole
                except ImportError_ as exc:
                    if exc.node is not None:
                        raise
                    # nothing to blame: compile the graph as regions, each of which
                    # is left to PyTorch alone if it cannot be compiled
                except (UsageError, UntrustedRulesError):
                    raise                              # the user's to fix
                except BlockbusterError as exc:        # a bug: say so, run eagerly
                    _report(f"the whole graph is left to PyTorch after an internal "
                            f"error: {type(exc).__name__}: {exc}")
                    return gm
            run = _partitioned(ep, example_inputs, params, opts, unsupported)
            _check_block_names(opts, run.regions)
            return run
        except ImportError_ as exc:
            if exc.node is None or exc.node in unsupported:
                raise
            _report(f"left to PyTorch: {exc}")
            unsupported.add(exc.node)              # stays in eager PyTorch
        except _NoRegion as exc:
            _report(f"the whole graph is left to PyTorch: {exc}")
            return gm
    _report("the whole graph is left to PyTorch: no part of it could be lowered")
    return gm


def _runtime_number_hint(exc) -> str:
    """Why the capture failed where TorchDynamo made a Python number an input: a number
    that changed between calls becomes a runtime value, and an operator taking it as
    an argument (``eps=``, a clamp bound, an exponent) reads it back with ``.item()``
    (``aten._local_scalar_dense``), which a program cannot express."""
    if "_local_scalar_dense" not in str(exc):
        return ""
    return (" (a Python number passed to an operator as an argument -- eps=, a clamp "
            "bound, an exponent -- changed between calls, and TorchDynamo now passes it "
            "as a runtime value; such numbers are fused only in arithmetic with tensors. "
            "Keep it constant, or set torch._dynamo.config.specialize_float = True: one "
            "compile per value)")


class _NoRegion(Exception):
    pass


def _check_block_names(opts: CompileOptions, regions: list) -> None:
    """Say (once per graph) which names of the ``blocks`` option no dimension of the
    graph's regions has: a typo would otherwise leave every block as chosen."""
    if not opts.blocks or not regions:
        return
    dims = sorted({d.name for r in regions for d in r.lowered.program.dims if not d.point})
    unknown = sorted(set(opts.blocks) - set(dims))
    if unknown:
        _report(f"blocks: no dimension {', '.join(unknown)} in this graph's compiled "
                f"regions (their tiled dimensions: {', '.join(dims) or 'none'}); "
                f"those block sizes are not used")


def _state_positions(gm, example_inputs, sources: list | None = None) -> tuple:
    """Positions of the inputs that are the module's state, not the caller's data:
    parameters, and buffers (a rotary embedding's ``inv_freq``: what is computed
    from them alone, such as the cos/sin tables, is then evaluated once at import).
    ``sources``: the placeholders' source names, read while TorchDynamo still had
    them (:class:`Specializing`); else from ``gm``."""
    import torch
    if sources is None:
        sources = _sources(gm)
    out = []
    for i, t in enumerate(example_inputs):
        source = sources[i] if i < len(sources) else ""
        if isinstance(t, torch.nn.Parameter) or (
                isinstance(t, torch.Tensor) and "._buffers[" in source):
            out.append(i)
    return tuple(out)


def _sources(gm) -> list[str]:
    """Each placeholder's source name (``L['self']._buffers['inv_freq']``; "" where
    unknown)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return [str(getattr(getattr(n.meta.get("grapharg"), "source", None), "name", ""))
            for n in placeholders]


class CompiledRegion:
    """A lowered, fused and compiled graph: called with torch tensors (the graph's
    inputs, parameters included), returns a tuple of torch tensors."""

    def __init__(self, source_of, inputs: list, params: tuple, opts: CompileOptions,
                 name: str):
        self._source_of = source_of              # inputs -> GraphSource
        self._params = params
        self._opts = opts
        self._name = name
        self._build(inputs)

    def _build(self, inputs: list) -> None:
        from ...backends.registry import get_backend
        from ...fusion_cache import cached_fuse
        from .lower import lower
        source = self._source_of(inputs)
        low = lower(source, self._name, self._opts.blocks)
        backend = get_backend(self._opts.backend)
        self.tuning = self._tune(source, low, backend)
        if self.tuning is not None:
            low = lower(source, self._name, self.tuning.blocks)
        program = low.program.evolve(params=dict(low.weights))
        fused = cached_fuse(program, self._opts.rules, self._opts.hardware)
        self.program = fused
        self.compiled = _compile_bound(backend, fused)
        self.lowered = low
        self._layouts = output_layouts(source.graph)
        self._stamp = self._stamps(inputs)

    def _tune(self, source, low, backend):
        """The blocks of the region's free dimensions (None: as lowered), chosen when
        the user gave no ``blocks``."""
        from ...fusion_cache import cached_fuse
        from ...ir.printer import format_program
        from ...tuning import Tunable, tune
        from ...tuning.cache import rules_digest
        from .lower import lower
        opts = self._opts
        if opts.blocks or opts.tune == "off":
            return None
        free = {d.name: d.size for d in low.program.dims
                if not d.point and d.name not in low.fixed_blocks}
        if not free:
            return None

        def derive(blocks):
            relowered = lower(source, self._name, blocks)
            return cached_fuse(relowered.program.evolve(params=dict(relowered.weights)),
                               opts.rules, opts.hardware)
        structure = f"torch region for {opts.hardware!r}\n{format_program(low.program)}"
        tunable = Tunable(self._name, structure, free,
                          {d: low.program.dim(d).block for d in free}, derive,
                          rules_digest(opts.rules))
        return tune(tunable, backend, opts.tune)

    def _stamps(self, inputs) -> tuple:
        """What identifies the region's constant inputs (:mod:`.stamps`)."""
        from .stamps import Stamp
        return tuple(Stamp(inputs[i]) for i in self._params)

    def _changed(self, inputs) -> bool:
        return not all(s.matches(inputs[i]) for i, s in zip(self._params, self._stamp))

    def __call__(self, *inputs):
        import torch
        if self._changed(inputs):
            with _COMPILE_LOCK:
                if self._changed(inputs):
                    self._build(list(inputs))       # a parameter changed: recompile
        lowered, compiled, layouts = self.lowered, self.compiled, self._layouts
        user = [t for i, t in enumerate(inputs) if i not in self._params
                and hasattr(t, "shape")]
        feeds = {b.name: _numpy(t) for b, t in zip(lowered.inputs, user)}
        out = compiled(**feeds)
        return tuple(as_traced(torch.from_numpy(np.ascontiguousarray(out[b.name]))
                                .reshape(b.shape).to(dtype or torch.float32), stride)
                     for b, (dtype, stride) in zip(lowered.outputs, layouts))


def _compile_bound(backend, program):
    """The region's program compiled with the model's parameters bound: weight
    preparation (a norm's gain folded into the next weight matrix, say) runs once,
    here, not on every call. The parameters are the region's own float32 copies and
    the region is rebuilt when one changes (``CompiledRegion._changed``): bound as
    they are, and constant for the bound program's life (a backend may keep what it
    derives from them, as Numba keeps its packed matmul operands)."""
    from ...backends.base import bind_weights
    params = program.params or {}
    if not program.weights or any(w not in params for w in program.weights):
        return backend.compile(program)
    return bind_weights(program, backend.name, lambda part: backend.compile(part).run,
                        {w: params[w] for w in program.weights}, snapshot=True)


class WholeGraph(CompiledRegion):
    def __init__(self, ep, example_inputs, params, opts):
        from .lower import source_from_export

        def source_of(inputs):
            return source_from_export(ep, inputs, params)
        super().__init__(source_of, example_inputs, params, opts, "torch_graph")


def _numpy(t) -> np.ndarray:
    return t.detach().to("cpu", dtype=_float32()).contiguous().numpy()


def _float32():
    import torch
    return torch.float32


def _support(unsupported: set, dynamic: set):
    """What the partitioner may put in a region: lowerable, input-dependent nodes."""
    from torch.fx.passes.operator_support import OperatorSupportBase

    from .aten import HANDLERS

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node) -> bool:
            return (node.op == "call_function" and node.name not in unsupported
                    and node.name in dynamic and str(node.target) in HANDLERS
                    and not _integer(node))
    return Support()


def _integer(node) -> bool:
    """An integer tensor (indices: a region computes in float32, so index
    arithmetic stays in PyTorch)."""
    val = node.meta.get("val")
    dtype = getattr(val, "dtype", None)
    return dtype is not None and not dtype.is_floating_point and str(dtype) != "torch.bool"


def _partitioned(ep, example_inputs, params, opts, unsupported):
    """Supported regions compiled, the rest left to eager PyTorch."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.utils.fuser_utils import fuse_by_partitions
    from .lower import GraphSource, flat_inputs, input_dependent, record_graph, record_values

    specs = ep.graph_signature.input_specs
    kind = {s.arg.name: s.kind.name for s in specs}
    users = [s.arg.name for s in specs if s.kind.name == "USER_INPUT"]
    param_names = {users[i] for i in params}
    dynamic = input_dependent(ep.graph, kind)
    recorded = record_values(ep, example_inputs)
    gm = copy.deepcopy(ep.graph_module)             # partitioning rewrites the graph
    partitions = CapabilityBasedPartitioner(gm, _support(unsupported, dynamic),
                                            allows_single_node_partition=True
                                            ).propose_partitions()
    if not partitions:
        raise _NoRegion("no part of it could be lowered")
    fused_gm = fuse_by_partitions(gm, [{n: None for n in p.nodes} for p in partitions],
                                  always_return_tuple=True)
    # the regions' arguments include the fuser's own getitem nodes (one region's
    # output read by another): record the values of the fused graph's nodes too
    recorded = {**recorded, **record_graph(fused_gm, flat_inputs(ep, example_inputs))}
    # ... and which of them depend on the inputs: another region's output (read
    # through those getitem nodes) is data, never a constant of the region
    dynamic = dynamic | input_dependent(fused_gm.graph, kind)
    regions: list = []
    for node in list(fused_gm.graph.nodes):
        if node.op != "call_module" or not node.target.startswith("fused_"):
            continue
        sub = getattr(fused_gm, node.target)
        arg_names = [a.name for a in node.args]
        positions = tuple(i for i, a in enumerate(arg_names)
                          if a in param_names or a not in dynamic)

        def source_of(inputs, sub=sub, positions=positions):
            kinds = {}
            for i, ph in enumerate(n for n in sub.graph.nodes if n.op == "placeholder"):
                kinds[ph.name] = "PARAMETER" if i in positions else "USER_INPUT"
            values = record_graph(sub, inputs)
            return GraphSource(sub.graph, kinds, {n: n for n in kinds}, values)
        inputs = [recorded[a] for a in arg_names]
        try:
            region = CompiledRegion(source_of, inputs, positions, opts, node.target)
        except ImportError_ as exc:
            if exc.node is not None:
                raise                                  # that node stays in PyTorch
            _report(f"a region of {len(sub.graph.nodes)} nodes is left to PyTorch: {exc}")
            continue
        except BlockbusterError as exc:                # a bug: say so, run eagerly
            _report(f"a region of {len(sub.graph.nodes)} nodes is left to PyTorch "
                    f"after an internal error: {type(exc).__name__}: {exc}")
            continue
        setattr(fused_gm, node.target, _RegionModule(region))
        regions.append(region)
    fused_gm.recompile()
    constants = {**ep.state_dict, **getattr(ep, "constants", {})}

    def run(*args):
        it = iter(args)
        flat = [next(it) if s.kind.name == "USER_INPUT" else constants[s.target]
                for s in specs]
        return fused_gm(*flat)
    run.regions = regions
    return run


def _region_module():
    import torch

    class RegionModule(torch.nn.Module):
        def __init__(self, region):
            super().__init__()
            self.region = region

        def forward(self, *inputs):
            return self.region(*inputs)
    return RegionModule


def _RegionModule(region):
    return _region_module()(region)
