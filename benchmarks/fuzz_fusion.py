"""Differential fuzzing of fusion: random builder programs, unfused vs fused, every backend.

    python benchmarks/fuzz_fusion.py --programs 2000 --backends reference --seed 0
    python benchmarks/fuzz_fusion.py --programs 300 --backends numba --max-ops 8

Each random, well-formed tensor program (matmuls with square and transposed
operands, elementwise and broadcast ops, row and column reductions, softmax,
log-softmax, LayerNorm, RMSNorm, several outputs, shared intermediates; ragged and
whole blocks) is lowered by the builder, fused with ``blockbuster.fuse``, and run
unfused and fused in float32 on each backend, at normal, large (x100) and offset
(+1e3) inputs. The yardstick is an independent float64 evaluation of the *tensor*
graph written from the math with NumPy (never the block-program interpreter).

Failure classes (a program counts once per class):

* ``wrong``       fused float32 error > 4 x the unfused (or NumPy float32) error of the
                  same computation + 8 ulps of the output's magnitude;
* ``unfused_wrong`` the unfused block program is itself off by more than 16 x NumPy
                  float32's error + 16 ulps (a lowering or backend bug, e.g. a shadowed
                  binder);
* ``nonfinite``   fused output NaN/inf where the unfused output is finite;
* ``exception``   an exception that is not a ``BlockbusterError`` (a crash);
* ``error``       a ``BlockbusterError`` from fusing, compiling or running a program the
                  builder accepted;
* ``bytes``       fused per-call bytes (``blockbuster.cost``) above the unfused ones.

The first failure of each class is minimised (fewer outputs, operations bypassed,
smaller dimensions) and printed. The fuse time of every program is summarised.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import traceback
from dataclasses import dataclass, field, replace

import numpy as np

import blockbuster as bb
from blockbuster.errors import BlockbusterError
from blockbuster.frontend.builder import GraphBuilder
from blockbuster.ir import ops

CLASSES = ("wrong", "unfused_wrong", "nonfinite", "exception", "error", "bytes")
SCALES = {"normal": (1.0, 0.0), "large": (100.0, 0.0), "offset": (1.0, 1000.0)}
EPS32 = float(np.finfo(np.float32).eps)
_ERF = np.vectorize(math.erf, otypes=[np.float64])


def _one(x):
    return x.dtype.type(1)


def _dt(f):
    """A float64 math function applied in the operand's dtype."""
    return lambda x: f(x).astype(x.dtype)


# The independent yardstick for each unary operator, from the math, in the operand's
# dtype. The fuzzer draws from every registered unary operator (the registry's
# ``domain`` says which take any real and which get |x| + 1): each needs a line here.
UNARY_MATH = {
    "exp": np.exp, "neg": np.negative, "tanh": np.tanh, "abs": np.abs, "square": np.square,
    "sigmoid": lambda x: _one(x) / (_one(x) + np.exp(-x)),
    "silu": lambda x: x / (_one(x) + np.exp(-x)),
    "ones": np.ones_like,
    "relu": lambda x: np.where(x > 0, x, x.dtype.type(0)),
    "erf": _dt(_ERF),
    "gelu": _dt(lambda x: x * 0.5 * (1.0 + _ERF(x / math.sqrt(2.0)))),
    "gelu_tanh": _dt(lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi)
                                                        * (x + 0.044715 * x ** 3)))),
    "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda y: _one(y) / np.sqrt(y),
    "recip": lambda y: _one(y) / y,
    "sin": np.sin, "cos": np.cos, "log1p": np.log1p, "expm1": np.expm1,
}
UNARY = tuple(n for n in ops.UNARY if ops.OPS[n].domain == "real")
POSITIVE = tuple(n for n in ops.UNARY if ops.OPS[n].domain == "positive")  # of |x| + 1
_MISSING = sorted(set(UNARY + POSITIVE) - set(UNARY_MATH))


# --------------------------------------------------------------------------------------
# Programs as plain data (so that they can be shrunk), built twice: by the builder and
# by the float64 evaluator below.
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    kind: str
    args: tuple[int, ...] = ()
    param: object = None
    dims: tuple[str, ...] = ()


@dataclass(frozen=True)
class Spec:
    dims: tuple[tuple[str, int, int], ...]       # (name, size, block)
    nodes: tuple[Node, ...]
    outputs: tuple[int, ...]

    def live(self) -> list[int]:
        """Indices of the nodes the outputs need, in order."""
        need, stack = set(), list(self.outputs)
        while stack:
            i = stack.pop()
            if i not in need:
                need.add(i)
                stack.extend(self.nodes[i].args)
        return sorted(need)


def _pick(rng, items):
    return items[int(rng.integers(len(items)))]


def random_spec(rng: np.random.Generator, max_ops: int = 10) -> Spec:
    ndims = int(rng.integers(2, 5))
    dims = []
    for i in range(ndims):
        size = int(_pick(rng, (1, 2, 3, 5, 7, 8, 12, 16, 17, 24, 33)))
        block = size if rng.random() < 0.4 else int(rng.integers(1, size + 1))
        dims.append((f"{'MKNE'[i]}", size, block))
    names = [d[0] for d in dims]
    nodes: list[Node] = []

    def add(node: Node) -> int:
        nodes.append(node)
        return len(nodes) - 1

    def new_input(d: tuple[str, ...], weight: bool = False) -> int:
        return add(Node("input", (), weight, d))

    for _ in range(int(rng.integers(1, 3))):
        new_input((_pick(rng, names), _pick(rng, names)))

    def choose(pred) -> int | None:
        cands = [i for i, n in enumerate(nodes) if pred(n)]
        if not cands:
            return None
        # prefer recent nodes (chains), but reuse older ones too (shared intermediates)
        weights = np.arange(1, len(cands) + 1, dtype=float) ** 2
        return cands[int(rng.choice(len(cands), p=weights / weights.sum()))]

    two_d = lambda n: len(n.dims) == 2  # noqa: E731
    n_ops = int(rng.integers(2, max_ops + 1))
    for _ in range(n_ops):
        kind = _pick(rng, ("matmul", "matmul", "unary", "positive", "binary", "binary",
                           "broadcast", "row_reduce", "col_reduce", "softmax",
                           "log_softmax", "rms_norm", "layer_norm"))
        a = choose(two_d)
        if a is None:
            break
        m, k = nodes[a].dims
        if kind == "matmul":
            square = rng.random() < 0.35
            n = k if square else _pick(rng, names)
            transpose = rng.random() < 0.3
            b = choose(lambda x: x.dims == ((n, k) if transpose else (k, n))
                       and x.kind != "input") if rng.random() < 0.3 else None
            if b is None:
                b = new_input((n, k) if transpose else (k, n), weight=True)
            add(Node("matmul", (a, b), transpose, (m, n)))
        elif kind == "unary":
            add(Node("unary", (a,), _pick(rng, UNARY), (m, k)))
        elif kind == "positive":
            add(Node("positive", (a,), _pick(rng, POSITIVE), (m, k)))
        elif kind == "binary":
            op = _pick(rng, ("add", "sub", "mul", "max", "min", "div"))
            if op == "div" or rng.random() < 0.25:
                value = float(_pick(rng, (2.891, 0.125, -1.5, 3.0)))
                add(Node("scalar", (a,), ("div" if op in ("max", "min") else op, value), (m, k)))
            else:
                b = choose(lambda x, d=(m, k): x.dims == d and x is not nodes[a])
                if b is None:
                    b = new_input((m, k))
                add(Node("binary", (a, b), op, (m, k)))
        elif kind == "broadcast":
            axis = int(rng.integers(2))
            vdim = (m, k)[axis]
            v = choose(lambda x: x.dims == (vdim,))
            if v is None:
                v = new_input((vdim,), weight=rng.random() < 0.5)
            add(Node("broadcast", (a, v), (_pick(rng, ("add", "sub", "mul")), axis), (m, k)))
        elif kind in ("row_reduce", "col_reduce"):
            comb = _pick(rng, ("sum", "max", "mean"))
            add(Node(kind, (a,), comb, (m,) if kind == "row_reduce" else (k,)))
        elif kind in ("softmax", "log_softmax"):
            add(Node(kind, (a,), None, (m, k)))
        elif kind == "rms_norm":
            add(Node("rms_norm", (a, new_input((k,), weight=True)), 1e-6, (m, k)))
        else:
            add(Node("layer_norm", (a, new_input((k,), True), new_input((k,), True)), 1e-5,
                     (m, k)))
    computed = [i for i, n in enumerate(nodes) if n.kind != "input"]
    if not computed:
        add(Node("unary", (0,), "tanh", nodes[0].dims))
        computed = [len(nodes) - 1]
    outputs = {computed[-1]}
    for i in computed[:-1]:
        if rng.random() < 0.2:
            outputs.add(i)
    return Spec(tuple(dims), tuple(nodes), tuple(sorted(outputs)))


# --------------------------------------------------------------------------------------
# The builder side
# --------------------------------------------------------------------------------------

def build_program(spec: Spec):
    """(unfused block program, {node index: array name} of inputs and outputs)."""
    g = GraphBuilder("fuzz")
    for name, size, block in spec.dims:
        g.dim(name, size, block)
    t: dict[int, object] = {}
    for i in spec.live():
        n = spec.nodes[i]
        a = [t[j] for j in n.args]
        if n.kind == "input":
            t[i] = (g.weight if n.param else g.input)(f"in{i}", *n.dims)
        elif n.kind == "matmul":
            t[i] = g.matmul(a[0], a[1], transpose_b=n.param)
        elif n.kind == "unary":
            t[i] = g.unary(n.param, a[0])
        elif n.kind == "positive":
            t[i] = g.unary(n.param, g.binary("add", g.unary("abs", a[0]), 1.0))
        elif n.kind == "scalar":
            t[i] = g.binary(n.param[0], a[0], n.param[1])
        elif n.kind == "binary":
            t[i] = g.binary(n.param, a[0], a[1])
        elif n.kind == "broadcast":
            op, axis = n.param
            t[i] = g.binary(op, a[0], a[1], along=("rows", "cols")[axis])
        elif n.kind == "row_reduce":
            t[i] = g.row_reduce("sum" if n.param == "mean" else n.param, a[0],
                                mean=n.param == "mean")
        elif n.kind == "col_reduce":
            t[i] = g.col_reduce("sum" if n.param == "mean" else n.param, a[0],
                                mean=n.param == "mean")
        elif n.kind == "softmax":
            t[i] = g.softmax(a[0])
        elif n.kind == "log_softmax":
            t[i] = g.log_softmax(a[0])
        elif n.kind == "rms_norm":
            t[i] = g.rms_norm(a[0], a[1], n.param)
        elif n.kind == "layer_norm":
            t[i] = g.layer_norm(a[0], a[1], a[2], n.param)
        else:
            raise ValueError(n.kind)
    program = g.build(*(t[i] for i in spec.outputs))
    names = {i: t[i].name for i in spec.live()
             if spec.nodes[i].kind == "input" or i in spec.outputs}
    return program, names


# --------------------------------------------------------------------------------------
# The independent evaluation: the tensor graph, from the math, in NumPy
# --------------------------------------------------------------------------------------

def _rows(v, x):
    return v[:, None] if x.ndim == 2 else v


def evaluate(spec: Spec, inputs: dict[int, np.ndarray], dtype) -> dict[int, np.ndarray]:
    """Every live node's value, computed in ``dtype`` directly from the math."""
    v: dict[int, np.ndarray] = {}
    one = dtype(1)
    with np.errstate(all="ignore"):
        for i in spec.live():
            n = spec.nodes[i]
            a = [v[j] for j in n.args]
            if n.kind == "input":
                out = inputs[i].astype(dtype)
            elif n.kind == "matmul":
                out = a[0] @ (a[1].T if n.param else a[1])
            elif n.kind == "unary":
                out = UNARY_MATH[n.param](a[0])
            elif n.kind == "positive":
                out = UNARY_MATH[n.param](np.abs(a[0]) + one)
            elif n.kind == "scalar":
                op, c = n.param
                out = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                       "div": np.divide}[op](a[0], dtype(c))
            elif n.kind == "binary":
                out = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                       "max": np.maximum, "min": np.minimum}[n.param](a[0], a[1])
            elif n.kind == "broadcast":
                op, axis = n.param
                vec = a[1][:, None] if axis == 0 else a[1][None, :]
                out = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op](a[0], vec)
            elif n.kind in ("row_reduce", "col_reduce"):
                axis = 1 if n.kind == "row_reduce" else 0
                out = {"sum": np.sum, "max": np.max, "mean": np.mean}[n.param](a[0], axis=axis)
            elif n.kind in ("softmax", "log_softmax"):
                s = a[0] - a[0].max(axis=1, keepdims=True)
                e = np.exp(s)
                total = e.sum(axis=1, keepdims=True)
                out = e / total if n.kind == "softmax" else s - np.log(total)
            elif n.kind == "rms_norm":
                ms = np.mean(a[0] * a[0], axis=1, keepdims=True)
                out = a[0] / np.sqrt(ms + dtype(n.param)) * a[1]
            elif n.kind == "layer_norm":
                c = a[0] - a[0].mean(axis=1, keepdims=True)
                var = np.mean(c * c, axis=1, keepdims=True)
                out = c / np.sqrt(var + dtype(n.param)) * a[1] + a[2]
            v[i] = np.asarray(out, dtype)
    return v


# --------------------------------------------------------------------------------------
# One program: run it everywhere, classify
# --------------------------------------------------------------------------------------

@dataclass
class Failure:
    cls: str
    backend: str
    scale: str
    detail: str


@dataclass
class Outcome:
    failures: list[Failure] = field(default_factory=list)
    fuse_seconds: float | None = None

    def classes(self) -> set[str]:
        return {f.cls for f in self.failures}


def make_inputs(spec: Spec, seed: int, scale: str) -> dict[int, np.ndarray]:
    mul, off = SCALES[scale]
    rng = np.random.default_rng(seed)
    sizes = {name: size for name, size, _ in spec.dims}
    return {i: (rng.standard_normal(tuple(sizes[d] for d in n.dims)) * mul + off)
            .astype(np.float32)
            for i, n in enumerate(spec.nodes) if n.kind == "input"}


def _err(x: np.ndarray, truth: np.ndarray, mask: np.ndarray) -> float:
    if not mask.any():
        return 0.0
    d = np.abs(x.astype(np.float64)[mask] - truth[mask])
    return float("inf") if not np.isfinite(d).all() else float(d.max())


def _project_error(err: BaseException) -> bool:
    return isinstance(err, BlockbusterError)


def check_program(spec: Spec, backends: list[str], seed: int, compiled_cache=None,
                  only: tuple[str, str] | None = None) -> Outcome:
    """Classify ``spec``'s failures. ``only=(backend, scale)`` checks just that case
    (used while minimising)."""
    out = Outcome()

    def fail(cls, backend, scale, detail):
        out.failures.append(Failure(cls, backend, scale, detail))

    try:
        program, names = build_program(spec)
    except Exception as err:   # the generator only makes well-formed programs
        fail("exception" if not _project_error(err) else "error", "-", "-",
             f"builder: {type(err).__name__}: {err}")
        return out
    t0 = time.perf_counter()
    try:
        fused = bb.fuse(program, progress=False).program
    except Exception as err:
        fail("error" if _project_error(err) else "exception", "-", "-",
             f"fuse: {type(err).__name__}: {err}")
        return out
    out.fuse_seconds = time.perf_counter() - t0
    if only is None or only[0] == "-":
        try:
            before, after = bb.cost(program).per_call_bytes, bb.cost(fused).per_call_bytes
            if after > before:
                fail("bytes", "-", "-", f"per-call bytes {before} -> {after}")
        except Exception as err:
            fail("error" if _project_error(err) else "exception", "-", "-",
                 f"cost: {type(err).__name__}: {err}")
    if only == ("-", "-"):
        return out                   # a program-level failure: no need to run it
    for backend in backends:
        if only is not None and only[0] not in ("-", backend):
            continue
        runs = {}
        for label, prog in (("unfused", program), ("fused", fused)):
            try:
                runs[label] = bb.compile(prog, backend)
            except Exception as err:
                fail("error" if _project_error(err) else "exception", backend, "-",
                     f"compile {label}: {type(err).__name__}: {err}")
        if len(runs) < 2:
            continue
        for scale in SCALES:
            if only is not None and only[1] not in ("-", scale):
                continue
            _check_scale(spec, names, runs, backend, scale, seed, fail)
    return out


def _check_scale(spec, names, runs, backend, scale, seed, fail):
    inputs = make_inputs(spec, seed, scale)
    feed = {names[i]: x for i, x in inputs.items() if i in names}
    truth = evaluate(spec, inputs, np.float64)
    np32 = evaluate(spec, inputs, np.float32)
    got = {}
    for label, run in runs.items():
        try:
            with np.errstate(all="ignore"):
                got[label] = run(**feed)
        except Exception as err:
            fail("error" if _project_error(err) else "exception", backend, scale,
                 f"run {label}: {type(err).__name__}: {err}")
            return
    for i in spec.outputs:
        name, t = names[i], truth[i]
        unf, fus = np.asarray(got["unfused"][name]), np.asarray(got["fused"][name])
        mask = np.isfinite(t)
        introduced = np.isfinite(unf) & ~np.isfinite(fus)
        if introduced.any():
            where = tuple(int(w[0]) for w in np.nonzero(introduced))
            fail("nonfinite", backend, scale,
                 f"output {name}{list(where)}: fused {fus[where]}, unfused {unf[where]}, "
                 f"float64 {t[where]:.6g} ({int(introduced.sum())} elements)")
            continue
        mag = float(np.abs(t[mask]).max()) if mask.any() else 0.0
        ulp = EPS32 * mag
        e_unf, e_fus, e_np = _err(unf, t, mask), _err(fus, t, mask), _err(np32[i], t, mask)
        base = max(e_unf, e_np)
        # A block program sums block by block where NumPy sums pairwise: a few times
        # less accurate is float32 rounding; a lowering bug is far beyond this.
        if e_unf > 16 * e_np + 256 * ulp:
            fail("unfused_wrong", backend, scale,
                 f"output {name}: unfused error {e_unf:.3g}, NumPy float32 {e_np:.3g}, "
                 f"magnitude {mag:.3g}")
        if e_fus > 4 * base + 8 * ulp:
            fail("wrong", backend, scale,
                 f"output {name}: fused error {e_fus:.3g} vs unfused {e_unf:.3g}, "
                 f"NumPy float32 {e_np:.3g}, magnitude {mag:.3g}")


# --------------------------------------------------------------------------------------
# Minimisation
# --------------------------------------------------------------------------------------

def _shrinks(spec: Spec):
    """Smaller variants of ``spec``: fewer outputs, bypassed nodes, smaller dims."""
    if len(spec.outputs) > 1:
        for o in spec.outputs:
            yield replace(spec, outputs=tuple(x for x in spec.outputs if x != o))
    for i in reversed(spec.live()):
        n = spec.nodes[i]
        if n.kind == "input":
            continue
        for j in n.args:             # route i's users (and outputs) to an argument
            if spec.nodes[j].dims == n.dims and (spec.nodes[j].kind != "input"
                                                 or i not in spec.outputs):
                nodes = tuple(replace(m, args=tuple(j if a == i else a for a in m.args))
                              for m in spec.nodes)
                outputs = tuple(sorted({j if o == i else o for o in spec.outputs}))
                if all(spec.nodes[o].kind != "input" for o in outputs):
                    yield replace(spec, nodes=nodes, outputs=outputs)
    for k, (name, size, block) in enumerate(spec.dims):
        for new in sorted({1, 2, size // 2, size - 1} - {size}):
            if 1 <= new < size:
                dims = list(spec.dims)
                dims[k] = (name, new, min(block, new))
                yield replace(spec, dims=tuple(dims))
        if block != size:
            dims = list(spec.dims)
            dims[k] = (name, size, size)
            yield replace(spec, dims=tuple(dims))


def minimise(spec: Spec, failure: Failure, backends, seed: int, budget: int = 60) -> Spec:
    only = (failure.backend, failure.scale)
    tries = 0
    improved = True
    while improved and tries < budget:
        improved = False
        for cand in _shrinks(spec):
            tries += 1
            if tries > budget:
                break
            try:
                if failure.cls in check_program(cand, backends, seed, only=only).classes():
                    spec, improved = cand, True
                    break
            except Exception:
                continue
    return spec


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------

@dataclass
class Report:
    programs: int = 0
    counts: dict = field(default_factory=lambda: {c: 0 for c in CLASSES})
    first: dict = field(default_factory=dict)      # class -> (seed, spec, failure)
    fuse_seconds: list = field(default_factory=list)


def fuzz(programs: int, backends: list[str], seed: int, max_ops: int = 10,
         progress=None) -> Report:
    report = Report()
    for p in range(programs):
        pseed = seed * 1_000_003 + p
        spec = random_spec(np.random.default_rng(pseed), max_ops)
        outcome = check_program(spec, backends, pseed)
        report.programs += 1
        if outcome.fuse_seconds is not None:
            report.fuse_seconds.append(outcome.fuse_seconds)
        for f in outcome.failures:
            if f.cls not in report.first and progress:
                print(f"  first {f.cls}: program seed {pseed}, {f.backend}, {f.scale}: "
                      f"{f.detail}", flush=True)
            report.first.setdefault(f.cls, (pseed, spec, f))
        for cls in outcome.classes():
            report.counts[cls] += 1
        if progress:
            progress(p + 1, report)
    return report


def fuse_times(report: Report) -> str:
    ts = np.array(report.fuse_seconds)
    if not ts.size:
        return "fuse time: -"
    return (f"fuse time (wall): median {np.median(ts) * 1e3:.1f} ms, p95 "
            f"{np.percentile(ts, 95) * 1e3:.1f} ms, max {ts.max() * 1e3:.1f} ms")


def describe(spec: Spec) -> str:
    try:
        return bb.format_program(build_program(spec)[0])
    except Exception as err:  # pragma: no cover - a builder failure is itself the finding
        return f"(the builder fails: {err})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=200)
    ap.add_argument("--backends", default="reference",
                    help="comma-separated backend names (default: reference)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-ops", type=int, default=10, help="operations per program, at most")
    ap.add_argument("--no-minimise", action="store_true")
    args = ap.parse_args(argv)
    if _MISSING:
        print(f"fuzz_fusion: no float64 yardstick for registered operators {_MISSING}: "
              "add them to UNARY_MATH", file=sys.stderr)
        return 2
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        try:
            from blockbuster.backends.registry import get_backend
            get_backend(b)
        except BlockbusterError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    start = time.perf_counter()

    every = 10 if args.programs <= 500 else 50

    def progress(done, report):
        if done % every == 0 or done == args.programs:
            bad = ", ".join(f"{c} {n}" for c, n in report.counts.items() if n)
            print(f"  {done}/{args.programs} programs, {time.perf_counter() - start:.0f} s; "
                  f"{fuse_times(report)}{'; ' + bad if bad else ''}", flush=True)

    report = fuzz(args.programs, backends, args.seed, args.max_ops, progress)
    print(f"\n{report.programs} programs on {', '.join(backends)} (seed {args.seed}), "
          f"scales {', '.join(SCALES)}:")
    for cls in CLASSES:
        print(f"  {cls:<14}{report.counts[cls]:>6}")
    print(fuse_times(report))
    for cls, (pseed, spec, failure) in report.first.items():
        small = spec if args.no_minimise else minimise(spec, failure, backends, pseed)
        print(f"\n== {cls}: program seed {pseed}, backend {failure.backend}, "
              f"inputs {failure.scale}: {failure.detail}")
        again = check_program(small, backends, pseed,
                              only=(failure.backend, failure.scale)).failures
        detail = next((f.detail for f in again if f.cls == cls), failure.detail)
        print(f"minimised ({detail}):")
        print(describe(small))
    return 1 if any(report.counts.values()) else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception:
        traceback.print_exc()
        sys.exit(3)
