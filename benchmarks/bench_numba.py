"""Speed of the Numba backend's generated fused kernels against the peers a user would pick.

    python benchmarks/bench_numba.py                      # the issue-13 sizes
    python benchmarks/bench_numba.py --quick              # small sizes (a minute)
    python benchmarks/bench_numba.py --only attention --block N=128 --block S=128

Per case, in one process, on the same float32 inputs (threads: ``--threads``, default 2):

* ``numpy``  -- the unfused computation as a NumPy user writes it (BLAS matmuls,
                in-place softmax / normalisation; OpenBLAS on the same threads);
* ``torch``  -- PyTorch eager (``torch.set_num_threads``); attention is
                ``scaled_dot_product_attention`` (PyTorch's own CPU flash kernel),
                causal attention with ``is_causal=True``;
* ``fused``  -- the block program fused by ``blockbuster.fuse`` for this CPU (candidate
                selection, as ``blockbuster run`` does), generated
                and JIT-compiled by the Numba backend. Blocks: chosen as ``blockbuster
                run`` chooses them by default (``--tune measure``: the cost model's
                best few and the defaults timed, cached in $BLOCKBUSTER_CACHE/tuning;
                the first run of a case tunes, later runs read the cache), or
                ``--tune model``/``off``, or set by hand with ``--block``.

Every output is first checked against the float64 oracle. Timing: ``--repeat`` rounds
(default 5) over the variants, interleaved; in each round a variant gets one untimed
call and then one timed call (threads of the previous variant -- Numba's, OpenBLAS's,
PyTorch's -- spin for a while after their work), so that load from the other users of
this shared machine hits every variant alike. The best time of the rounds is reported;
the spread (median / best) is printed so noise is visible.

The machine's peak is measured, not assumed: the best of 5 float32 GEMMs of 2048³
through NumPy's BLAS on the same threads (printed as "peak"). Each variant's GFLOP/s
counts the matmul FLOPs of the computation (2 per multiply-add; attention 4·N·S·D,
causal half of it), and "%peak" is fused GFLOP/s over that peak. The arithmetic
ceiling is measured too (``fma_peak.py``: vector FMAs on registers, every thread at
once; printed as "FMA peak", and "%FMA" is fused GFLOP/s over it): a workload whose
time is nearly all matmul FLOPs cannot beat NumPy by more than NumPy's distance from
that ceiling.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

from threadpoolctl import threadpool_limits     # pip install -e '.[bench]'

from blockbuster.frontend.builder import GraphBuilder
from blockbuster.frontend.workloads import workload
from blockbuster.tuning.measure import per_call
from blockbuster.oracles import oracle
import blockbuster
from blockbuster import fuse
from blockbuster.validate import (DEFAULT_TOLERANCE, compare, random_inputs,
                                  tolerance_from_baseline)
from blockbuster_numba import backend as numba_backend
from fma_peak import fma_peak                     # benchmarks/, beside this file

F32 = np.float32

# --------------------------------------------------------------------------------------
# NumPy, as a user writes it (unfused; BLAS matmuls; in-place elementwise work)
# --------------------------------------------------------------------------------------


def numpy_attention(Q, K, V):
    s = Q @ K.T
    s *= F32(1.0 / math.sqrt(Q.shape[1]))
    s -= s.max(axis=1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=1, keepdims=True)
    return {"O": s @ V}


def numpy_causal_attention(Q, K, V):
    q, k = Q[0], K[0]
    s = q @ k.T
    s *= F32(1.0 / math.sqrt(q.shape[1]))
    s[np.triu_indices(s.shape[0], 1)] = -np.inf
    s -= s.max(axis=1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=1, keepdims=True)
    return {"O": (s @ V)[None]}


def numpy_layernorm_matmul(X, gamma, beta, W):
    mean = X.mean(axis=1, keepdims=True)
    xc = X - mean
    var = np.mean(xc * xc, axis=1, keepdims=True)
    xc *= 1.0 / np.sqrt(var + F32(1e-5))
    xc *= gamma
    xc += beta
    return {"Y": xc @ W}


def numpy_rmsnorm_ffn_swiglu(X, g, W1, W3, W2):
    h = X * (1.0 / np.sqrt(np.mean(X * X, axis=1, keepdims=True) + F32(1e-6)))
    h *= g
    a = h @ W1
    b = h @ W3
    with np.errstate(over="ignore"):
        a /= 1 + np.exp(-a)          # silu, in place
    a *= b
    return {"Y": a @ W2}


# --------------------------------------------------------------------------------------
# PyTorch eager
# --------------------------------------------------------------------------------------


def torch_variant(name):
    import torch
    import torch.nn.functional as F

    def run(**x):
        t = {k: torch.from_numpy(v) for k, v in x.items()}
        with torch.inference_mode():
            if name == "attention":
                o = F.scaled_dot_product_attention(t["Q"][None], t["K"][None], t["V"][None])[0]
                return {"O": o.numpy()}
            if name == "causal_attention":
                o = F.scaled_dot_product_attention(t["Q"], t["K"], t["V"][None], is_causal=True)
                return {"O": o.numpy()}
            if name == "layernorm_matmul":
                X = t["X"]
                h = F.layer_norm(X, (X.shape[1],), t["gamma"], t["beta"], 1e-5)
                return {"Y": (h @ t["W"]).numpy()}
            if name == "rmsnorm_ffn_swiglu":
                X = t["X"]
                h = X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + 1e-6) * t["g"]
                return {"Y": ((F.silu(h @ t["W1"]) * (h @ t["W3"])) @ t["W2"]).numpy()}
            if name == "llama_block":
                return {"Y": torch_llama_layer(t).numpy()}
        raise KeyError(name)
    return run


def torch_llama_layer(t):
    """One Llama decoder layer as PyTorch eager runs it (what a Hugging Face layer
    computes): RMSNorm, q/k/v, rotary, causal GQA SDPA, Wo + residual, RMSNorm,
    SwiGLU FFN + residual."""
    import torch
    import torch.nn.functional as F
    X, cos, sin = t["X"], t["cos"], t["sin"]
    T, head = X.shape[0], cos.shape[1]
    nh, nkv = t["Wq"].shape[1] // head, t["Wk"].shape[1] // head

    def norm(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g

    def rope(x):
        half = head // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    h = norm(X, t["g1"])
    q = rope((h @ t["Wq"]).view(T, nh, head).transpose(0, 1))
    k = rope((h @ t["Wk"]).view(T, nkv, head).transpose(0, 1))
    v = (h @ t["Wv"]).view(T, nkv, head).transpose(0, 1)
    o = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True,
                                       enable_gqa=True)[0]
    u = X + o.transpose(0, 1).reshape(T, nh * head) @ t["Wo"]
    z = norm(u, t["g2"])
    return u + (F.silu(z @ t["W1"]) * (z @ t["W3"])) @ t["W2"]



# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------


def causal_attention(T: int, D: int, blocks: dict) -> "Program":
    """One head of causal attention, built with the tensor builder (the same operator
    as the Llama workload's): Q[1, T, D], K[1, T, D], V[T, D] -> O[1, T, D]."""
    g = GraphBuilder("causal_attention")
    g.dim("T", T, min(T, blocks.get("T", 64)))
    g.dim("HD", D, D)
    g.dim("KD", D, D)
    g.point_dim("H", 1)
    g.point_dim("G", 1)
    q, k, v = g.input("Q", "H", "T", "HD"), g.input("K", "G", "T", "HD"), g.input("V", "T", "KD")
    return g.build(g.causal_attention(q, k, v, 1.0 / math.sqrt(D), name="O"))


def causal_oracle(Q, K, V):
    q, k, v = (np.asarray(a, np.float64) for a in (Q[0], K[0], V))
    s = q @ k.T / math.sqrt(q.shape[1])
    s[np.triu_indices(s.shape[0], 1)] = -np.inf
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return {"O": ((p / p.sum(axis=1, keepdims=True)) @ v)[None]}


def numpy_llama_block(**x):
    """The oracle's NumPy layer on float32 arrays (it stays in float32)."""
    from blockbuster.oracles import oracle_float32
    return oracle_float32("llama_block", x)


NUMPY = {"attention": numpy_attention, "causal_attention": numpy_causal_attention,
         "layernorm_matmul": numpy_layernorm_matmul,
         "rmsnorm_ffn_swiglu": numpy_rmsnorm_ffn_swiglu, "llama_block": numpy_llama_block}

_LLAMA = {"T": 2048, "E": 2048, "NH": 16, "KVH": 4, "F": 5632}
#: matmul FLOPs of one Llama layer: projections, attention (causal half), FFN.
_LLAMA_FLOPS = (2 * 2048 * 2048 * (2048 + 2 * 512 + 2048) + 2 * 2 * 16 * 2048 * 2049 // 2 * 128
                + 6 * 2048 * 2048 * 5632)

#: (label, workload, sizes, matmul FLOPs)
FULL = [
    ("attention N=S=4096 D=64", "attention", {"N": 4096, "D": 64}, 4 * 4096 * 4096 * 64),
    ("causal attention T=4096 D=64", "causal_attention", {"T": 4096, "D": 64},
     2 * 4096 * 4097 * 64),
    ("attention N=S=16384 D=64", "attention", {"N": 16384, "D": 64}, 4 * 16384 ** 2 * 64),
    ("layernorm_matmul 2048^3", "layernorm_matmul", {"M": 2048, "K": 2048, "N": 2048},
     2 * 2048 ** 3),
    ("rmsnorm_ffn_swiglu 2048x1024x2816", "rmsnorm_ffn_swiglu",
     {"M": 2048, "D": 1024, "H": 2816}, 6 * 2048 * 1024 * 2816),
    ("llama layer T=E=2048 16/4 F=5632", "llama_block", _LLAMA, _LLAMA_FLOPS),
]
QUICK = [
    ("attention N=S=1024 D=64", "attention", {"N": 1024, "D": 64}, 4 * 1024 * 1024 * 64),
    ("causal attention T=1024 D=64", "causal_attention", {"T": 1024, "D": 64},
     2 * 1024 * 1025 * 64),
    ("layernorm_matmul 512^3", "layernorm_matmul", {"M": 512, "K": 512, "N": 512}, 2 * 512 ** 3),
    ("rmsnorm_ffn_swiglu 512x256x704", "rmsnorm_ffn_swiglu", {"M": 512, "D": 256, "H": 704},
     6 * 512 * 256 * 704),
]
VARIANTS = ("numpy", "torch", "fused")


def build(name, sizes, blocks):
    """(unfused program, fused program, inputs, float64 oracle outputs)."""
    if name == "causal_attention":
        unfused = causal_attention(sizes["T"], sizes["D"], blocks)
    else:
        dims = workload(name, **sizes).dims
        own = {d: v for d, v in blocks.items() if any(x.name == d for x in dims)}
        # Through the public API, so that `compile(..., tune=...)` can re-derive the
        # program at the blocks it chooses (hand-set blocks turn tuning off).
        unfused = blockbuster.workload(name, blocks=own or None, **sizes)
    fused = fuse(unfused, hardware=numba_backend.hardware).program   # as `run` fuses
    inputs = random_inputs(unfused, seed=0)
    want = causal_oracle(**inputs) if name == "causal_attention" else oracle(name, inputs)
    return unfused, fused, inputs, want


def measure_peak(threads: int, n: int = 2048, rounds: int = 5) -> float:
    """GFLOP/s of the best of ``rounds`` float32 GEMMs n³ through NumPy's BLAS."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((n, n)).astype(F32)
    b = rng.standard_normal((n, n)).astype(F32)
    best = math.inf
    with threadpool_limits(threads, user_api="blas"):
        a @ b
        for _ in range(rounds):
            t = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best / 1e9


def bench_case(case, blocks: dict, repeat: int, threads: int, tune: str) -> dict:
    label, name, sizes, flops = case
    unfused, fused, inputs, want = build(name, sizes, blocks)
    t0 = time.perf_counter()
    compiled = blockbuster.compile(fused, backend=numba_backend, tune=tune)
    prepare_s = time.perf_counter() - t0
    fused = compiled.program
    tv = torch_variant(name)
    # Weights bound once, as a user runs a layer (a PyTorch module holds its weights):
    # weight preparation, if the fusion made any, runs here and not in the timed calls.
    call, call_inputs = per_call(compiled, inputs)
    runs = {"numpy": lambda: NUMPY[name](**inputs), "torch": lambda: tv(**inputs),
            "fused": lambda: call(call_inputs)}
    errors = {}
    # A deep program carries more float32 rounding than the default tolerance: every
    # variant is held to 4x what NumPy in float32 achieves (validate's rule for `run`).
    with threadpool_limits(threads, user_api="blas"):
        baseline = compare(runs["numpy"](), want).max_rel_error
    tolerance = max(DEFAULT_TOLERANCE, tolerance_from_baseline(baseline))
    for v in VARIANTS:
        with threadpool_limits(threads, user_api="blas"):
            check = compare(runs[v](), want, tolerance)
        errors[v] = check.max_rel_error
        if not check.passed:
            raise SystemExit(f"{label}: {v} is wrong: {check}")
    times = {v: [] for v in VARIANTS}
    for _ in range(repeat):
        for v in VARIANTS:
            with threadpool_limits(threads, user_api="blas"):
                runs[v]()                          # untimed: the previous variant's
                t = time.perf_counter()            # threads settle
                runs[v]()
                times[v].append(time.perf_counter() - t)
    blk = {d.name: d.block for d in fused.dims if not d.point}
    return {"label": label, "flops": flops, "blocks": blk, "errors": errors,
            "best": {v: min(ts) for v, ts in times.items()},
            "median": {v: float(np.median(ts)) for v, ts in times.items()},
            "kernels": len(fused.kernels), "compile_s": compiled.compile_seconds,
            "prepare_s": prepare_s}


def print_table(results, peak: float, fma: float) -> None:
    head = (f"{'case':<36}{'numpy ms':>9}{'torch ms':>9}{'fused ms':>9} |"
            f"{'f/numpy':>8}{'f/torch':>8}{'f/best':>7} |{'GFLOP/s':>8}{'%peak':>6}{'%FMA':>5}"
            f" | spread (median/best) n/t/f")
    print(head)
    print("-" * len(head))
    for r in results:
        b, med = r["best"], r["median"]
        best_peer = min(b["numpy"], b["torch"])
        gf = r["flops"] / b["fused"] / 1e9
        spread = "/".join(f"{med[v] / b[v]:.2f}" for v in VARIANTS)
        print(f"{r['label']:<36}{1e3 * b['numpy']:>9.1f}{1e3 * b['torch']:>9.1f}"
              f"{1e3 * b['fused']:>9.1f} |{b['fused'] / b['numpy']:>7.2f}x"
              f"{b['fused'] / b['torch']:>7.2f}x{b['fused'] / best_peer:>6.2f}x |"
              f"{gf:>8.1f}{100 * gf / peak:>5.0f}%{100 * gf / fma:>4.0f}% | {spread}")
    print("times: best of the interleaved rounds; f/x: fused time over x's (below 1: fused "
          "is faster); GFLOP/s: matmul FLOPs of fused; %peak: of the measured BLAS peak; "
          "%FMA: of the measured FMA peak")
    for r in results:
        blk = " ".join(f"{d}={v}" for d, v in r["blocks"].items())
        errs = ", ".join(f"{v} {e:.1e}" for v, e in r["errors"].items())
        print(f"  {r['label']}: blocks {blk}; {r['kernels']} kernel(s); compile "
              f"{r['compile_s']:.1f} s (with tuning {r['prepare_s']:.1f} s); max rel error "
              f"vs float64: {errs}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes")
    ap.add_argument("--repeat", type=int, default=5, help="interleaved rounds (best of)")
    ap.add_argument("--threads", type=int, default=2, help="threads of every variant")
    ap.add_argument("--only", default="", help="comma-separated substrings of case labels")
    ap.add_argument("--block", action="append", default=[], metavar="DIM=INT",
                    help="block size of the fused program (repeatable; turns tuning off)")
    ap.add_argument("--tune", choices=("measure", "model", "off"), default="measure",
                    help="how the fused program's blocks are chosen without --block: as "
                         "`blockbuster run` does by default (measure; cached in "
                         "$BLOCKBUSTER_CACHE/tuning), the cost model alone, or the "
                         "workload's defaults (off)")
    args = ap.parse_args(argv)
    blocks = {}
    for item in args.block:
        d, _, v = item.partition("=")
        if not v.isdigit() or int(v) < 1:
            raise SystemExit(f"--block {item}: expected DIM=positive integer")
        blocks[d] = int(v)
    import torch
    torch.set_num_threads(args.threads)
    os.environ.setdefault("NUMBA_NUM_THREADS", str(args.threads))
    hw = numba_backend.hardware
    peak = measure_peak(args.threads)
    fma = fma_peak(args.threads)
    print(f"machine: {hw.cores} cores, L2 {hw.local_capacity_bytes >> 10} KiB/core; load "
          f"average {os.getloadavg()[0]:.2f}; threads {args.threads}; numpy {np.__version__}, "
          f"torch {torch.__version__}")
    print(f"peak: {peak:.1f} GFLOP/s (best of 5 float32 GEMMs 2048^3, NumPy/OpenBLAS, "
          f"{args.threads} threads; {100 * peak / fma:.0f}% of the FMA peak, "
          f"{fma:.1f} GFLOP/s: fma_peak.py)")
    results = []
    for case in (QUICK if args.quick else FULL):
        if args.only and not any(s and s in case[0] for s in args.only.split(",")):
            continue
        r = bench_case(case, blocks, args.repeat, args.threads, args.tune)
        results.append(r)
        print(f"  {case[0]}: " + ", ".join(f"{v} {1e3 * r['best'][v]:.1f} ms"
                                           for v in VARIANTS), flush=True)
    print()
    print_table(results, peak, fma)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
