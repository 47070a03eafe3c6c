"""One kernel as one ``@triton.jit`` function.

The kernel's parallel loops are the launch grid: one program instance per
combination of their block indices, flattened into ``tl.program_id(0)`` and split
back into one digit per loop (a one-block loop is no digit: its index is 0). Every
value is then placed (:func:`blockbuster.ir.placement.place`, the rule the cost
model counts with: in the innermost scope binding one of its variables, hoisted out
of every other loop) and lowered once per binding of its free variables.
"""

from __future__ import annotations

from blockbuster.ir.expr import Expr
from blockbuster.ir.placement import Binder, place
from blockbuster.ir.program import Kernel

from .expressions import emit
from .stores import emit_store
from .values import Binding, Frame, Namer, arange, indent, padded


class KernelGenerator:
    def __init__(self, module, kernel: Kernel):
        self.m = module
        self.kernel = kernel
        self.names = Namer()
        self.grid = 1

    def generate(self) -> list[str]:
        k, dims = self.kernel, self.m.dims
        root = Frame(None)
        lines = root.lines
        lines.append("pid = tl.program_id(0)")
        multi = [(v, dims[d]) for v, d in k.loops if dims[d].nblocks > 1]
        for v, d in k.loops:
            if dims[d].nblocks == 1:
                root.binds[v] = Binding(v, 0)
        rest = "pid"
        for pos, (v, d) in enumerate(reversed(multi)):
            name = self.names.fresh(v + "_")
            if pos == len(multi) - 1:
                lines.append(f"{name} = {rest}  # {v} in {d.name}")
            else:
                lines.append(f"{name} = {rest} % {d.nblocks}  # {v} in {d.name}")
                nxt = self.names.fresh("rest")
                lines.append(f"{nxt} = {rest} // {d.nblocks}")
                rest = nxt
            root.binds[v] = Binding(v, name)
            self.grid *= d.nblocks
        for d in self.m.program.dims:
            lines.append(f"{arange(d)} = tl.arange(0, {padded(d)})")
        for store in k.stores:
            emit_store(self, store, root)
        args = ", ".join(self.m.arg_names[a] for a in self.m.kernel_arrays(k))
        return ["@triton.jit", f"def {self.m.kernel_fn(k)}({args}):",
                f'    """kernel {k.name}: for {", ".join(f"{v} in {d}" for v, d in k.loops)}'
                f' (grid {self.grid})"""', *indent(lines)]

    def value(self, node: Expr, frame: Frame):
        """``node`` seen from ``frame``: emitted once per binding of its free
        variables, in the scope placement chooses."""
        frames = frame.chain()
        binders, owners = [], [frames[0]]
        for f in frames:
            for var in f.binds:
                binders.append(Binder(var))
                owners.append(f)
        target = owners[place(node.free_vars, binders)]
        key = (node, tuple(id(frame.resolve(v)) for v in sorted(node.free_vars)))
        hit = target.memo.get(key)
        if hit is None:
            hit = target.memo[key] = emit(self, node, target)
        return hit
