"""Capturing a PyTorch function or module as an ATen graph (``torch.export``).

Decompositions run down to ATen operators, except the few high-level operators the
importer lowers as a whole (linear, softmax, layer norm, attention, ...): keeping
them gives the fusion rules the structure they know and the error messages the
operator the user wrote.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import warnings

from .dims import ImportError_


def require_torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError_("importing PyTorch models needs torch: "
                           "pip install 'blockbuster[torch]'") from exc
    return torch


def extra_decompositions(torch) -> dict:
    """Operators torch.export keeps whole that the importer takes as their
    decompositions (torch's own, into means, variances and elementwise arithmetic):
    batch norm (its running statistics in eval mode, the batch's otherwise:
    ``F.instance_norm``), group norm. ``einsum`` of two operands is the importer's own
    (:mod:`.einsum`: matmuls over batch axes, no merged axes)."""
    from torch._decomp import decomposition_table
    from .einsum import decompose_einsum
    aten = torch.ops.aten
    wanted = [("_native_batch_norm_legit_no_training", "default"),
              ("_native_batch_norm_legit", "default"),
              ("_native_batch_norm_legit", "no_stats"),
              ("native_batch_norm", "default"),
              ("native_group_norm", "default")]
    table = {}
    for packet, overload in wanted:
        op = getattr(getattr(aten, packet, None), overload, None)
        if op is not None and op in decomposition_table:
            table[op] = decomposition_table[op]
    table[torch.ops.aten.einsum.default] = decompose_einsum(torch)
    return table


def kept_ops(torch) -> list:
    aten = torch.ops.aten
    names = ["linear.default", "scaled_dot_product_attention.default",
             "layer_norm.default", "softmax.int", "log_softmax.int", "gelu.default",
             "silu.default", "rms_norm.default", "matmul.default", "embedding.default",
             "softplus.default"]
    ops = []
    for n in names:
        packet, _, overload = n.partition(".")
        if hasattr(aten, packet):
            ops.append(getattr(getattr(aten, packet), overload))
    return ops


def export(fn, example_inputs: tuple, strict: bool | None = None):
    """``torch.export`` of ``fn`` (a module or a function) at the example inputs.
    ``strict=False`` for graphs already traced by TorchDynamo (strict export runs
    TorchDynamo again, which must not nest inside a torch.compile backend)."""
    torch = require_torch()
    module = fn if isinstance(fn, torch.nn.Module) else _FunctionModule(fn)
    was_training = module.training
    module.eval()
    try:
        with warnings.catch_warnings(), _torch_logs_quiet():
            # torch's deprecation chatter is not the user's, nor TorchDynamo's list
            # of attributes a forward sets (Hugging Face layers set some): the
            # import computes outputs only, and refuses writes to buffers below
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.filterwarnings("ignore", message=".*side effects happened",
                                    category=UserWarning)
            # with autograd on, as a forward pass that could be trained: modules
            # with an inference fast path (``nn.TransformerEncoderLayer`` under
            # ``no_grad``: one fused ATen operator) trace their operators instead
            with torch.enable_grad(), _cache_off(module, len(example_inputs)):
                ep = _export(torch, module, tuple(example_inputs), strict)
            # The input guards torch.export keeps for running the program again: a
            # graph handed over by TorchDynamo can leave its own sources in them
            # (``L['kwargs']...``, from a key/value cache's sizes), which fail as
            # Python when run_decompositions retraces ("name 'L' is not defined").
            # The import specialises to these sizes anyway (each new size is a new
            # program), so it checks none of them.
            if getattr(ep, "_guards_code", None):
                ep._guards_code = []
            table = torch.export.default_decompositions()
            for op in kept_ops(torch):
                table.pop(op, None)
            table.update(extra_decompositions(torch))
            ep = ep.run_decompositions(table)
            _refuse_mutations(ep)           # functionalised: writes are outputs now
            return ep
    except ImportError_:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ImportError_(f"torch.export could not capture the model: {first}"
                           f"{_grouped_inputs_hint(example_inputs)}") from None
    finally:
        module.train(was_training)


@contextlib.contextmanager
def _torch_logs_quiet():
    """torch's own loggers off while capturing: a model that fails to trace (an input
    of the wrong shape) made torch log its traceback (40 lines) before the one-line
    error raised below says the same. ``TORCH_LOGS`` set: the user asked for them."""
    if os.environ.get("TORCH_LOGS"):
        yield
        return
    import logging

    def torch_record(record) -> bool:
        return not (record.name == "torch" or record.name.startswith("torch."))
    # Each logger that handles torch's records (torch's own, and any a record
    # propagates to: loggers torch creates while tracing have no handlers) drops them.
    handlers = {h for lg in (logging.getLogger("torch"), logging.root) for h in lg.handlers}
    handlers |= {h for name in list(logging.root.manager.loggerDict)
                 if name.startswith("torch.")
                 for h in getattr(logging.getLogger(name), "handlers", ())}
    if logging.lastResort is not None:          # (records no handler takes)
        handlers.add(logging.lastResort)
    for h in handlers:
        h.addFilter(torch_record)
    try:
        yield
    finally:
        for h in handlers:
            h.removeFilter(torch_record)


def _refuse_mutations(ep) -> None:
    """An import error where the model writes an input or a buffer in place
    (``x.mul_(2)``, a running mean, a static key/value cache, BatchNorm in training
    mode): the programs compute outputs only, so the write would be lost, and with it
    what the model's next call reads (under ``torch.compile`` such a graph stays in
    PyTorch)."""
    sig = ep.graph_signature
    inputs = sorted(set(getattr(sig, "user_inputs_to_mutate", {}).values()))
    buffers = sorted(set(getattr(sig, "buffers_to_mutate", {}).values()))
    if inputs or buffers:
        what = ", ".join([f"input '{n}'" for n in inputs] + [f"buffer '{n}'" for n in buffers])
        raise ImportError_(f"the model updates {what} in place: in-place writes to inputs "
                           f"and buffers are not supported (write the new value to an "
                           f"output instead)")


def _grouped_inputs_hint(example_inputs) -> str:
    """A hint when an example input is itself a tuple or list (``from_torch(model,
    (x,))``): torch.export's own message is about the tuple having no ``dtype``."""
    for i, x in enumerate(example_inputs):
        if isinstance(x, (tuple, list)):
            return (f" (example input {i} is a {type(x).__name__}: give each input as its "
                    f"own argument, from_torch(model, x, mask), not one {type(x).__name__} "
                    f"of them)")
    return ""


def cache_off_kwargs(fn, given: int | tuple = 0) -> dict:
    """``{"use_cache": False}`` for a callable whose ``forward`` (or call) takes a
    ``use_cache`` argument that the call does not give (``given``: the number of
    positional arguments, or the names of keyword ones), else ``{}``.

    A Hugging Face decoder called as users call it (``model(ids)``) returns its
    key/value cache, an object torch.export cannot return; a whole sequence's
    forward pass does not need it, and its outputs stay the same without it."""
    try:
        params = list(inspect.signature(getattr(fn, "forward", fn)).parameters)
    except (TypeError, ValueError):
        return {}
    if "use_cache" not in params:
        return {}
    if isinstance(given, int):
        if params.index("use_cache") < given:
            return {}
    elif "use_cache" in given:
        return {}
    return {"use_cache": False}


class _cache_off:
    """While exporting ``module``: its ``forward`` called with ``use_cache=False``
    where the call leaves it out (see ``cache_off_kwargs``); restored after."""

    def __init__(self, module, given: int):
        self.module, self.kwargs = module, cache_off_kwargs(module, given)

    def __enter__(self):
        if self.kwargs:
            self.saved = self.module.__dict__.get("forward")
            self.module.forward = functools.partial(self.module.forward, **self.kwargs)
        return self

    def __exit__(self, *exc):
        if self.kwargs:
            if self.saved is None:
                del self.module.forward
            else:
                self.module.forward = self.saved
        return False


def _export(torch, module, inputs, strict):
    """Strict export (TorchDynamo) records the whole user stack of every node, so
    errors can name the model's own line; non-strict export traces more models."""
    if strict is None:
        try:
            return torch.export.export(module, inputs, strict=True)
        except Exception:
            strict = False
    return torch.export.export(module, inputs, strict=strict)


def _FunctionModule(fn):
    torch = require_torch()

    class FunctionModule(torch.nn.Module):
        def forward(self, *args):
            return fn(*args)
    FunctionModule.__name__ = getattr(fn, "__name__", "function")
    # torch.export names the graph's inputs after forward's parameters: give forward
    # the function's own (``x``, ``mask``), not ``args_0``, ``args_1``.
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):      # a builtin or a callable without a signature
        params = []
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if params and all(p.kind in positional for p in params):
        self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        FunctionModule.forward.__signature__ = inspect.Signature(
            [self_param] + params)
    return FunctionModule()


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _torch_dir() -> str:
    import torch
    return os.path.dirname(os.path.abspath(torch.__file__))


def source_line(node) -> str:
    """``file:line`` of the model code that made ``node`` (outside torch itself)."""
    trace = node.meta.get("stack_trace") or ""
    frames = [ln.strip() for ln in trace.splitlines() if ln.strip().startswith("File ")]
    skip = (_torch_dir(), _PACKAGE_DIR)
    for frame in reversed(frames):
        if not any(s in frame for s in skip):
            try:
                path = frame.split('"')[1]
                line = frame.split("line ")[1].split(",")[0]
                return f"{path}:{line}"
            except IndexError:
                continue
    return _module_of(node) or "<unknown source>"


def _module_of(node) -> str | None:
    """The innermost module that made ``node`` (``self_attn (MultiheadAttention)``),
    for code inside torch itself (``nn.TransformerEncoderLayer``), whose export
    records no line of the model's own."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return None
    path, cls = list(stack.values())[-1]
    cls = getattr(cls, "__qualname__", None) or str(cls)
    if "FunctionModule" in cls:       # capture's wrapper of a plain function
        return None
    cls = cls.rsplit(".", 1)[-1]
    path = re.sub(r"^L\['[^']*'\]\.?", "", str(path or ""))   # TorchDynamo's root: L['fn']
    return f"module {path} ({cls})" if path else f"module {cls}"
