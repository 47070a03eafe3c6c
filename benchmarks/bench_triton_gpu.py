"""The Triton backend's generated kernels against PyTorch on a CUDA GPU.

    python benchmarks/bench_triton_gpu.py            # on a machine with an NVIDIA GPU
    python benchmarks/bench_triton_gpu.py --quick    # smaller sizes
    python benchmarks/bench_triton_gpu.py --json     # one JSON object

Two comparisons, float32 on both sides (PyTorch's TF32 is left off, its default for
matmuls; the generated ``tl.dot`` is ``input_precision="ieee"``):

* attention ``O = softmax(Q·Kᵀ/√D)·V``: the fused block program (one kernel, online
  softmax) against ``torch.nn.functional.scaled_dot_product_attention``;
* RMSNorm + FFN-SwiGLU ``Y = (silu(h·W1) ⊙ (h·W3))·W2``, ``h = RMSNorm(X)·g``: the fused
  program against PyTorch eager (``torch.rsqrt``, three ``@``, ``silu``).

Each program is fused for the GPU the backend detected (its hardware description:
SM count, shared memory, HBM bandwidth), compiled by Triton, checked against a float64
PyTorch computation of the same inputs, then timed with ``triton.testing.do_bench``
(median of repeated launches on device-resident buffers: no host copies). Printed per
variant: time, the ratio to PyTorch, the achieved FLOP rate (the workload's FLOPs over
the time) and the achieved bandwidth (compulsory traffic, inputs read once and
outputs written once, over the time), beside the cost model's modeled time.

Without a CUDA GPU it prints one line and exits with status 2. ``--interpreter``
runs the script end to end under Triton's CPU interpreter at tiny sizes, to check
the script itself (its times mean nothing).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

SIZES = {
    # name -> (workload sizes, block sizes)
    "full": {
        "attention": ({"N": 4096, "D": 64}, {"N": 64, "S": 64, "D": 64}),
        "rmsnorm_ffn_swiglu": ({"M": 2048, "D": 1024, "H": 2816},
                               {"M": 64, "D": 64, "H": 64}),
    },
    "quick": {
        "attention": ({"N": 1024, "D": 64}, {"N": 64, "S": 64, "D": 64}),
        "rmsnorm_ffn_swiglu": ({"M": 512, "D": 512, "H": 1408}, {"M": 64, "D": 64, "H": 64}),
    },
    "interpreter": {
        "attention": ({"N": 40, "D": 16}, {"N": 16, "S": 16, "D": 16}),
        "rmsnorm_ffn_swiglu": ({"M": 20, "D": 32, "H": 48}, {"M": 16, "D": 16, "H": 16}),
    },
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--interpreter", action="store_true",
                        help="check the script on the CPU under Triton's interpreter")
    args = parser.parse_args(argv)

    import torch
    if args.interpreter:
        os.environ["TRITON_INTERPRET"] = "1"
    elif not torch.cuda.is_available():
        print("bench_triton_gpu: no CUDA GPU found (torch.cuda.is_available() is False); "
              "run it on a machine with an NVIDIA GPU", file=sys.stderr)
        return 2

    # Imported after the check: the plugin chooses GPU or interpreter when imported.
    import blockbuster as bb
    from blockbuster.backends.registry import get_backend
    from blockbuster.frontend.workloads import workload
    from blockbuster.ir.prep import split_weight_prep

    backend = get_backend("triton")
    preset = "interpreter" if args.interpreter else "quick" if args.quick else "full"
    device = "cpu" if args.interpreter else "cuda"
    results = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
               "hardware": backend.hardware.summary(), "preset": preset, "workloads": {}}
    if not args.json:
        print(f"device: {results['device']}\nfused for: {results['hardware']}\n")

    for name, (sizes, blocks) in SIZES[preset].items():
        program = workload(name, blocks=blocks, **sizes)
        fused = bb.fuse(program, hardware=backend.hardware).program
        inputs = _inputs(program, device)
        # Weight preparation (e.g. a norm gain folded into a weight matrix) runs once,
        # as in a deployed model; the per-call kernels are what is timed.
        split = split_weight_prep(fused)
        prepared = {}
        if split.prep is not None:
            prep = backend.compile(split.prep).run
            prep_buffers = prep.buffers(inputs)
            prep.launch(prep_buffers)
            prepared = {n: prep_buffers[n] for n in split.prep.outputs}
        compiled = backend.compile(split.per_call)
        buffers = compiled.run.buffers({**inputs, **prepared})
        compiled.run.launch(buffers)                      # compile (JIT) and warm up
        got = buffers[program.outputs[0]]
        reference, torch_fn = TORCH[name](program, inputs)
        want = reference()
        error = ((got.double() - want).abs().max() / want.abs().max()).item()
        cost = bb.cost(split.per_call, hardware=backend.hardware)
        ours = _time(lambda: compiled.run.launch(buffers), device)
        theirs = _time(torch_fn, device)
        flops, traffic = FLOPS[name](program), _compulsory_bytes(program)
        row = {
            "sizes": sizes, "blocks": blocks, "kernels": len(fused.kernels),
            "kernels_per_call": len(split.per_call.kernels),
            "max_rel_error_vs_float64": error,
            "generated_ms": ours * 1e3, "torch_ms": theirs * 1e3,
            "torch_variant": TORCH_NAME[name],
            "speedup_vs_torch": theirs / ours,
            "generated_gflops": flops / ours / 1e9, "torch_gflops": flops / theirs / 1e9,
            "generated_gbps": traffic / ours / 1e9,
            "modeled_ms": cost.time_estimate * 1e3,
            "modeled_global_bytes": cost.global_bytes,
        }
        results["workloads"][name] = row
        if not args.json:
            print(f"{name} {sizes} blocks {blocks}: {row['kernels']} kernel(s) "
                  f"({row['kernels_per_call']} per call), "
                  f"max rel error {error:.2e} vs float64")
            print(f"  generated  {row['generated_ms']:9.3f} ms  {row['generated_gflops']:9.1f} "
                  f"GFLOP/s  {row['generated_gbps']:8.1f} GB/s (compulsory)  "
                  f"modeled {row['modeled_ms']:.3f} ms, "
                  f"{row['modeled_global_bytes'] / 1e6:.1f} MB moved")
            print(f"  {TORCH_NAME[name]:<10} {row['torch_ms']:9.3f} ms  "
                  f"{row['torch_gflops']:9.1f} GFLOP/s")
            print(f"  generated / torch time: {ours / theirs:.2f}x\n")
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


def _inputs(program, device):
    import torch
    g = torch.Generator(device="cpu").manual_seed(0)
    return {n: torch.randn(program.shape(n), generator=g, dtype=torch.float32).to(device)
            for n in program.inputs}


def _time(fn, device) -> float:
    """Seconds per call: the median of ``triton.testing.do_bench`` on a GPU."""
    if device == "cuda":
        import triton.testing
        return triton.testing.do_bench(fn, warmup=25, rep=200) / 1e3
    import time
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _compulsory_bytes(program) -> int:
    return 4 * sum(math.prod(program.shape(n)) for n in (*program.inputs, *program.outputs))


def _attention_torch(program, inputs):
    import torch
    import torch.nn.functional as F
    q, k, v = (inputs[n] for n in ("Q", "K", "V"))

    def reference():
        q64, k64, v64 = q.double(), k.double(), v.double()
        w = torch.softmax(q64 @ k64.T / math.sqrt(q.shape[1]), dim=-1)
        return w @ v64

    q4, k4, v4 = (t[None, None] for t in (q, k, v))
    return reference, lambda: F.scaled_dot_product_attention(q4, k4, v4)


def _ffn_torch(program, inputs):
    import torch
    import torch.nn.functional as F
    x, g, w1, w3, w2 = (inputs[n] for n in ("X", "g", "W1", "W3", "W2"))
    eps = 1e-6

    def eager(x, g, w1, w3, w2):
        h = x * torch.rsqrt(x.square().mean(dim=1, keepdim=True) + eps) * g
        return (F.silu(h @ w1) * (h @ w3)) @ w2

    return (lambda: eager(x.double(), g.double(), w1.double(), w3.double(), w2.double()),
            lambda: eager(x, g, w1, w3, w2))


TORCH = {"attention": _attention_torch, "rmsnorm_ffn_swiglu": _ffn_torch}
TORCH_NAME = {"attention": "torch SDPA", "rmsnorm_ffn_swiglu": "torch eager"}
FLOPS = {
    "attention": lambda p: 4 * p.dim("N").size * p.dim("S").size * p.dim("D").size,
    "rmsnorm_ffn_swiglu": lambda p: 6 * p.dim("M").size * p.dim("D").size * p.dim("H").size,
}


if __name__ == "__main__":
    sys.exit(main())
