"""Gradients through ``torch.compile(backend="blockbuster")``.

A compiled graph computes its forward pass only (block programs have no backward).
Called with autograd on and an input that requires grad (a module's parameters do,
unless the caller runs under ``torch.no_grad()``), the graph's outputs need a
gradient function; without one, ``loss.backward()`` left the compiled module's
parameters without gradients, silently. :func:`differentiable` wraps the compiled
graph so that such a call runs it under :class:`_Recomputed`: the forward values
are the compiled graph's, and the backward pass runs the original graph (the FX
graph TorchDynamo handed over, in eager PyTorch) again on the saved inputs and
differentiates that — what activation checkpointing does. Gradients are eager
PyTorch's, at the price of one more eager forward in the backward pass; a call
that needs no gradient (``torch.no_grad()``, ``torch.inference_mode()``, inputs
that require none) runs the compiled graph alone, as before.

A graph that draws random numbers (dropout in training mode) runs in eager
PyTorch, forward and backward, whenever gradients are needed: a recomputation
would draw other numbers than the forward did.
"""

from __future__ import annotations

import warnings

#: Names of the torch functions and tensor methods that draw random numbers, as they
#: appear in a TorchDynamo graph's nodes (``torch.rand_like``, ``x.bernoulli_``); the
#: dropout family and attention's ``dropout_p`` are looked at apart. Whole names: a
#: substring would take ``F.normalize`` for ``normal``.
_RANDOM_NAMES = frozenset({
    "rand", "randn", "rand_like", "randn_like", "randint", "randint_like", "randperm",
    "bernoulli", "bernoulli_", "multinomial", "normal", "normal_", "poisson", "rrelu",
    "rrelu_", "uniform_", "exponential_", "geometric_", "cauchy_", "log_normal_",
    "random_"})


def differentiable(compiled, graph_module, report=warnings.warn):
    """``compiled`` (a callable from the graph's inputs to its outputs) with
    gradients: see the module's docstring. ``graph_module``: TorchDynamo's graph,
    run eagerly to differentiate. ``report(message)``: says (once) that a graph
    runs eagerly."""
    if compiled is graph_module:
        return compiled                    # all of it left to PyTorch: autograd as is
    random = _draws_random_numbers(graph_module)

    def run(*args):
        import torch
        if not (torch.is_grad_enabled() and _needs_grad(args)):
            return compiled(*args)
        if random:
            _say_once(run, report, "the graph draws random numbers (dropout in training "
                                   "mode) and a gradient is needed: it runs in eager "
                                   "PyTorch, forward and backward (under torch.no_grad() "
                                   "it is compiled)")
            return graph_module(*args)
        return _Recomputed.apply(compiled, graph_module, *args)

    return run


def _needs_grad(args) -> bool:
    return any(getattr(a, "requires_grad", False) for a in args)


def _draws_random_numbers(graph_module) -> bool:
    return any(_draws(node, graph_module) for node in graph_module.graph.nodes
               if node.op in ("call_function", "call_method", "call_module"))


def _draws(node, graph_module) -> bool:
    """Whether ``node`` draws random numbers: a dropout in training mode with p > 0
    (``F.dropout(x, 0.1, False)`` of a model in eval mode does not), an attention
    with ``dropout_p`` > 0, a ``torch.rand``-like call."""
    target = node.target
    if node.op == "call_module":
        module = graph_module.get_submodule(target)
        if "dropout" in type(module).__name__.lower():
            return bool(module.training) and getattr(module, "p", 1.0) != 0
        return False
    name = (target if isinstance(target, str) else getattr(target, "__name__", "")).lower()
    if "dropout" in name:       # F.dropout(input, p=0.5, training=True, inplace=False)
        return _argument(node, 2, "training", True) is not False and \
            _argument(node, 1, "p", 0.5) != 0
    if name == "scaled_dot_product_attention":
        return _argument(node, 4, "dropout_p", 0.0) != 0
    return name in _RANDOM_NAMES


def _argument(node, position: int, keyword: str, default):
    """A call's argument by position or keyword (a graph node where it is computed:
    then not a known constant)."""
    if keyword in node.kwargs:
        return node.kwargs[keyword]
    return node.args[position] if len(node.args) > position else default


def _say_once(holder, report, message: str) -> None:
    if getattr(holder, "_told", False):
        return
    holder._told = True
    report(message)


def _function():
    import torch

    class Recomputed(torch.autograd.Function):
        """Forward: the compiled graph (no autograd inside). Backward: the eager
        graph again on the saved inputs, differentiated."""

        @staticmethod
        def forward(ctx, compiled, graph_module, *args):
            ctx.graph_module = graph_module
            ctx.slots = [isinstance(a, torch.Tensor) for a in args]
            ctx.others = [None if t else a for a, t in zip(args, ctx.slots)]
            ctx.wants = [t and a.requires_grad for a, t in zip(args, ctx.slots)]
            ctx.save_for_backward(*(a for a, t in zip(args, ctx.slots) if t))
            outs = compiled(*args)
            single = not isinstance(outs, (tuple, list))
            ctx.single = single
            outs = (outs,) if single else tuple(outs)
            ctx.mark_non_differentiable(*(o for o in outs if isinstance(o, torch.Tensor)
                                          and not o.is_floating_point()))
            return outs[0] if single else outs

        @staticmethod
        def backward(ctx, *grads):
            # Grad mode is on here only for a backward pass that builds a graph
            # (create_graph=True: a gradient penalty's double backward): then the
            # recomputation runs on the saved inputs themselves, so the gradients
            # returned are functions of them; otherwise on detached copies.
            create = torch.is_grad_enabled()
            saved = iter(ctx.saved_tensors)
            args = []
            for is_tensor, other, wants in zip(ctx.slots, ctx.others, ctx.wants):
                if not is_tensor:
                    args.append(other)
                elif create:
                    args.append(next(saved))
                else:
                    args.append(next(saved).detach().requires_grad_(wants))
            with torch.enable_grad():
                outs = ctx.graph_module(*args)
            outs = (outs,) if not isinstance(outs, (tuple, list)) else tuple(outs)
            pairs = [(o, g) for o, g in zip(outs, grads)
                     if isinstance(o, torch.Tensor) and o.requires_grad and g is not None]
            wanted = [a for a, w in zip(args, ctx.wants) if w]
            found = (torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs],
                                         allow_unused=True, create_graph=create)
                     if pairs and wanted else [None] * len(wanted))
            found = iter(found)
            return (None, None, *(next(found) if w else None for w in ctx.wants))

    return Recomputed


class _Lazy:
    """``torch.autograd.Function`` subclass made on first use (torch is optional)."""

    _cls = None

    def apply(self, *args):
        if _Lazy._cls is None:
            _Lazy._cls = _function()
        return _Lazy._cls.apply(*args)


_Recomputed = _Lazy()
