"""Graphviz DOT of block programs, in the spirit of the paper's figures: global
arrays as boxes, each kernel a cluster of its expression DAG, loads and stores as
the only edges that cross between global memory and a kernel."""

from __future__ import annotations

from .expr import Expr
from .printer import format_expr, format_index
from .program import Program


def _label(n: Expr) -> str:
    if n.op == "load":
        return f"load {n.attr.array}[{', '.join(map(str, n.attr.index))}]"
    if n.op == "const":
        return format_expr(n)
    if n.op == "reduce":
        return f"{n.attr.combiner} over {n.attr.var} in {n.attr.dim}"
    if n.op == "map":
        return f"map {n.attr.var} in {n.attr.dim}"
    if n.op == "proj":
        return f".{n.attr}"
    if n.op in ("pos", "runmax"):
        return format_expr(n)
    return n.op


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def program_dot_lines(p: Program, prefix: str, title: str) -> list[str]:
    lines = [f"  subgraph cluster_{prefix} {{", f"    label={_quote(title)};",
             "    style=rounded; color=gray40;"]
    role = {n: "input" for n in p.inputs} | {n: "output" for n in p.outputs}
    for a in p.arrays:
        if role.get(a.name) is None and p.producer(a.name) is None:
            continue
        colour = {"input": "lightblue", "output": "palegreen"}.get(role.get(a.name), "mistyrose")
        lines.append(f"    {prefix}_arr_{a.name} [shape=box, style=filled, fillcolor={colour}, "
                     f"label={_quote(a.name + '[' + ', '.join(a.dims) + ']')}];")
    for k in p.kernels:
        kid = f"{prefix}_k_{k.name}"
        loops = ", ".join(f"{v} in {d}" for v, d in k.loops)
        lines += [f"    subgraph cluster_{kid} {{", f"      label={_quote(f'kernel {k.name} for {loops}')};",
                  "      style=filled; fillcolor=lightyellow; color=goldenrod;"]
        ids: dict[Expr, str] = {}
        edges = []
        for s in k.stores:
            for n in s.value.walk():
                if n in ids:
                    continue
                ids[n] = f"{kid}_n{len(ids)}"
                shape = "ellipse" if n.op != "load" else "cds"
                lines.append(f"      {ids[n]} [shape={shape}, label={_quote(_label(n))}];")
                for c in n.args:
                    edges.append(f"    {ids[c]} -> {ids[n]};")
                if n.op == "load":
                    edges.append(f"    {prefix}_arr_{n.attr.array} -> {ids[n]} "
                                 f"[color=blue, label=load];")
            idx = ", ".join(format_index(i) for i in s.index)
            sid = f"{kid}_store_{s.array}"
            lines.append(f"      {sid} [shape=cds, style=filled, fillcolor=white, "
                         f"label={_quote(f'store {s.array}[{idx}]')}];")
            edges.append(f"    {ids[s.value]} -> {sid};")
            edges.append(f"    {sid} -> {prefix}_arr_{s.array} [color=red, label=store];")
        lines.append("    }")
        lines.extend(edges)
    lines.append("  }")
    return lines


def to_dot(*programs: tuple[str, Program]) -> str:
    """One DOT graph with a cluster per (title, program), e.g. before and after."""
    lines = ["digraph blockbuster {", "  rankdir=TB; compound=true; fontname=Helvetica;",
             "  node [fontname=Helvetica, fontsize=10]; edge [fontsize=8];"]
    for i, (title, p) in enumerate(programs):
        lines += program_dot_lines(p, f"p{i}", title)
    lines.append("}")
    return "\n".join(lines) + "\n"
