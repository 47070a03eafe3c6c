"""The built-in workloads, written with the tensor builder (unfused block programs).

Each workload has fixed dimension names; ``sizes`` overrides dimension sizes and
``blocks`` block sizes. Some workloads also take integer parameters that are not
dimensions, given like sizes (``workload("llama_block", NH=8, KVH=2, layers=4)``).
Unknown names are a :class:`UsageError`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Callable

import attrs

from ..errors import UsageError
from ..ir.program import Program
from .builder import GraphBuilder
from .tensors import DEFAULT_BLOCK


@attrs.frozen
class Workload:
    name: str
    description: str
    dims: dict[str, int]             # default sizes
    # Smallest default block sizes (default: min(size, 64)): a larger dimension's
    # default block grows with it up to DEFAULT_BLOCK (see default_block).
    blocks: dict[str, int]
    build: Callable[..., Program]    # (sizes, blocks) -> Program
    derived: dict[str, str] = attrs.field(factory=dict)   # dim -> dim whose size it copies
    # Integer parameters that are not dimensions (head counts, layers): given like
    # sizes, passed to ``build`` with them, never blocked.
    params: dict[str, int] = attrs.field(factory=dict)
    # Largest accepted value of a parameter: each layer or head is program structure
    # (kernels, arrays) built eagerly, so an unbounded count grows memory without end.
    param_max: dict[str, int] = attrs.field(factory=dict)


#: Default blocks aim at this many blocks per dimension (enough for every core and
#: for fusion to hold rows) before they grow past a workload's smallest default.
BLOCKS_PER_DIM = 4


def default_block(size: int, smallest: int) -> int:
    """A dimension's default block: the workload's smallest default (chosen for its
    small default sizes), grown with the dimension to about BLOCKS_PER_DIM blocks,
    at most DEFAULT_BLOCK (a power of two). Tiny blocks on a large dimension make many
    block steps and re-read every weight once per block: Llama at T=256 with 16-row
    blocks fuses to 5 kernels per call and 43 MB of modeled traffic, with 64-row
    blocks to 4 kernels and 18 MB. The tuner (blockbuster.tuning) starts here."""
    grown = smallest
    while grown * 2 <= min(DEFAULT_BLOCK, size // BLOCKS_PER_DIM):
        grown *= 2
    return max(smallest, grown)


def _sizes(w: Workload, sizes: dict, blocks: dict) -> tuple[dict, dict]:
    for d in list(sizes) + list(blocks):
        if d not in w.dims and (d in blocks or d not in w.params):
            params = f"; parameters: {', '.join(w.params)}" if w.params else ""
            raise UsageError(f"workload {w.name} has no dimension '{d}' "
                             f"(dimensions: {', '.join(w.dims)}{params})")
    for what, given in (("sizes", sizes), ("block sizes", blocks)):
        for d, v in given.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                kind = "parameter" if d in w.params and given is sizes else "dimension"
                raise UsageError(f"{kind} {d}: {what} must be positive integers, got {v!r}")
            if given is sizes and d in w.param_max and v > w.param_max[d]:
                raise UsageError(f"parameter {d}: at most {w.param_max[d]} for workload "
                                 f"{w.name}, got {v}")
    full = dict(w.dims)
    for d, src in w.derived.items():
        if d not in sizes and src in sizes:
            full[d] = sizes[src]
    full.update({d: v for d, v in sizes.items() if d in w.dims})
    full_blocks = {d: min(full[d], blocks[d] if d in blocks
                          else default_block(full[d], w.blocks.get(d, DEFAULT_BLOCK)))
                   for d in full}
    full.update(w.params)
    full.update({d: v for d, v in sizes.items() if d in w.params})
    return full, full_blocks


def _attention(s: dict, b: dict) -> Program:
    g = GraphBuilder("attention")
    for d in ("N", "S", "D"):
        g.dim(d, s[d], b[d])
    q, k, v = g.input("Q", "N", "D"), g.input("K", "S", "D"), g.input("V", "S", "D")
    scores = g.binary("mul", g.matmul(q, k, transpose_b=True), 1.0 / math.sqrt(s["D"]))
    out = g.matmul(g.softmax(scores), v, name="O")
    return g.build(out)


def _layernorm_matmul(s: dict, b: dict) -> Program:
    g = GraphBuilder("layernorm_matmul")
    for d in ("M", "K", "N"):
        g.dim(d, s[d], b[d])
    x, gamma, beta = g.input("X", "M", "K"), g.weight("gamma", "K"), g.weight("beta", "K")
    w = g.weight("W", "K", "N")
    out = g.matmul(g.layer_norm(x, gamma, beta, 1e-5), w, name="Y")
    return g.build(out)


def _rmsnorm_ffn_swiglu(s: dict, b: dict) -> Program:
    g = GraphBuilder("rmsnorm_ffn_swiglu")
    for d in ("M", "D", "H"):
        g.dim(d, s[d], b[d])
    x, gain = g.input("X", "M", "D"), g.weight("g", "D")
    w1, w3, w2 = g.weight("W1", "D", "H"), g.weight("W3", "D", "H"), g.weight("W2", "H", "D")
    h = g.rms_norm(x, gain, 1e-6)
    gated = g.binary("mul", g.unary("silu", g.matmul(h, w1)), g.matmul(h, w3))
    return g.build(g.matmul(gated, w2, name="Y"))


def _paper_figure(s: dict, b: dict) -> Program:
    """The paper's introductory figure: two sibling computations that both read B
    (an elementwise sum over blocks (i, j), a row sum over j for each i)."""
    g = GraphBuilder("paper_figure")
    for d in ("M", "N"):
        g.dim(d, s[d], b[d])
    a, bb = g.input("A", "M", "N"), g.input("B", "M", "N")
    return g.build(g.binary("add", a, bb, name="C"), g.row_reduce("sum", bb, name="d"))


def _llama_block(s: dict, b: dict) -> Program:
    """A stack of ``layers`` Llama decoder layers (pre-RMSNorm, rotary GQA causal
    attention, SwiGLU FFN). Heads: see :meth:`GraphBuilder.rope_heads`."""
    nh, nkv, layers, width = s["NH"], s["KVH"], s["layers"], s["E"]
    if width % nh:
        raise UsageError(f"llama_block: E={width} is not divisible by NH={nh}")
    if nh % nkv:
        raise UsageError(f"llama_block: KVH={nkv} does not divide NH={nh}")
    hd = width // nh
    if hd % 2:
        raise UsageError(f"llama_block: the head size E/NH={hd} must be even (rotary)")
    g = GraphBuilder("llama_block")
    for d in ("T", "E", "F"):
        g.dim(d, s[d], b[d])
    g.dim("QD", width, hd)          # query columns: block h is query head h
    g.dim("KD", nkv * hd, hd)       # key/value columns: block g is kv head g
    g.dim("HD", hd, hd)             # the columns of one head
    g.point_dim("H", nh)
    g.point_dim("G", nkv)
    x = g.input("X", "T", "E")
    suffix = (lambda n, l: n) if layers == 1 else (lambda n, l: f"{n}_{l}")
    weights = []
    for layer in range(layers):
        spec = (("g1", "E"), ("Wq", "E", "QD"), ("Wk", "E", "KD"), ("Wv", "E", "KD"),
                ("Wo", "QD", "E"), ("g2", "E"), ("W1", "E", "F"), ("W3", "E", "F"),
                ("W2", "F", "E"))
        weights.append({n: g.weight(suffix(n, layer), *dims) for n, *dims in spec})
    cos, sin = g.weight("cos", "T", "HD"), g.weight("sin", "T", "HD")
    for layer, w in enumerate(weights):
        h = g.rms_norm(x, w["g1"], 1e-6)
        q = g.rope_heads(g.matmul(h, w["Wq"]), cos, sin, "H")
        k = g.rope_heads(g.matmul(h, w["Wk"]), cos, sin, "G")
        v = g.matmul(h, w["Wv"])
        o = g.causal_attention(q, k, v, 1.0 / math.sqrt(hd))
        u = g.binary("add", x, g.merge_heads_matmul(o, w["Wo"]))
        z = g.rms_norm(u, w["g2"], 1e-6)
        gated = g.binary("mul", g.unary("silu", g.matmul(z, w["W1"])), g.matmul(z, w["W3"]))
        out = "Y" if layer == layers - 1 else f"Y_{layer}"
        x = g.binary("add", u, g.matmul(gated, w["W2"]), name=out)
    return g.build(x)


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("attention", "O = softmax(Q·Kᵀ/√D)·V (softmax over keys)",
             {"N": 256, "S": 256, "D": 64}, {"N": 64, "S": 64, "D": 64}, _attention,
             derived={"S": "N"}),
    Workload("layernorm_matmul", "Y = LayerNorm(X)·W (eps 1e-5, then ·gamma + beta)",
             {"M": 256, "K": 256, "N": 256}, {"M": 64, "K": 64, "N": 64}, _layernorm_matmul),
    Workload("rmsnorm_ffn_swiglu", "Y = (silu(h·W1) ⊙ (h·W3))·W2, h = RMSNorm(X)·g",
             {"M": 128, "D": 256, "H": 512}, {"M": 64, "D": 64, "H": 64}, _rmsnorm_ffn_swiglu),
    Workload("paper_figure", "C = A + B and d = rowsum(B) (the paper's first figure: "
             "two outputs sharing the loads of B)",
             {"M": 256, "N": 256}, {"M": 64, "N": 64}, _paper_figure),
    Workload("llama_block", "Llama decoder layers (NH=4 KVH=2 layers=1): u = X + causal "
             "RoPE GQA attention(RMSNorm(X)), Y = u + SwiGLU(RMSNorm(u))",
             {"T": 64, "E": 64, "F": 128}, {"T": 16, "E": 32, "F": 32}, _llama_block,
             params={"NH": 4, "KVH": 2, "layers": 1},
             param_max={"NH": 1024, "KVH": 1024, "layers": 64}),
)}


def workload(name: str, blocks: dict[str, int] | None = None, **sizes: int) -> Program:
    """The unfused block program of a built-in workload.

    ``blockbuster.workload("attention", N=200, blocks={"N": 64})``.
    """
    w = WORKLOADS.get(name)
    if w is None:
        raise UsageError(f"unknown workload '{name}' (available: {', '.join(WORKLOADS)})")
    if blocks is not None and not isinstance(blocks, Mapping):
        raise UsageError(f"blocks: expected a dict of block sizes by dimension "
                         f"(blocks={{'N': 64}}), got {type(blocks).__name__}")
    full, full_blocks = _sizes(w, integer_sizes(sizes), integer_sizes(blocks or {}))
    return w.build(full, full_blocks)


def integer_sizes(values: Mapping) -> dict:
    """Sizes as Python ints where they are integers of another kind (``np.int64``,
    what NumPy arithmetic on sizes gives); anything else is left for ``_sizes`` to
    refuse."""
    return {d: int(v) if isinstance(v, numbers.Integral) and not isinstance(v, bool)
            else v for d, v in values.items()}
