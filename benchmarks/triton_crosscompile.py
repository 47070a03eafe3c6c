"""Every built-in workload's Triton kernels compiled for GPU architectures, no GPU needed.

    python benchmarks/triton_crosscompile.py                 # sm_90 (H100/H200), sm_89 (RTX 4090)
    python benchmarks/triton_crosscompile.py --arch 90       # one architecture

For each workload (the conformance suite's small ragged sizes) it generates the
Triton source of the unfused program, of the program fused for the default CPU
description (held rows of accumulators) and of the program fused for the GPU of the
architecture, and compiles every kernel with Triton down to a cubin
(:mod:`blockbuster_triton.crosscompile`). Printed per program: kernels compiled, the
largest shared-memory footprint, and the failures with their first line. Exit status
1 if any kernel fails to compile. It checks what Triton's interpreter cannot (the
compiler's typing of loop-carried values, float64 paths, ``tl.gather``), not speed.
"""

from __future__ import annotations

import argparse
import sys
import time

CASES = [
    ("attention", {"N": 200, "D": 32}, {"N": 64, "S": 64}),
    ("layernorm_matmul", {"M": 100, "K": 100, "N": 70}, {"M": 32, "K": 32, "N": 32}),
    ("rmsnorm_ffn_swiglu", {"M": 70, "D": 50, "H": 70}, {"M": 32, "D": 32, "H": 32}),
    ("paper_figure", {"M": 100, "N": 70}, {"M": 32, "N": 32}),
    ("llama_block", {"T": 20, "E": 32, "F": 24, "NH": 4, "KVH": 2}, {"T": 8, "E": 8, "F": 16}),
]
GPU_OF_ARCH = {90: "h100", 89: "rtx4090", 80: "a100"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, action="append", choices=sorted(GPU_OF_ARCH),
                        help="compute capability, e.g. 90 (repeatable; default 90 and 89)")
    args = parser.parse_args(argv)
    import blockbuster as bb
    from blockbuster.cost import DEFAULT_HARDWARE
    from blockbuster.frontend.workloads import workload
    from blockbuster_triton import generate_source, gpu_hardware
    from blockbuster_triton.crosscompile import cross_compile

    failed = 0
    for arch in args.arch or [90, 89]:
        gpu = gpu_hardware(GPU_OF_ARCH[arch])
        print(f"sm_{arch} (fused for {gpu.name})")
        for name, sizes, blocks in CASES:
            unfused = workload(name, blocks=blocks, **sizes)
            for tag, program in (("unfused", unfused),
                                 ("fused-cpu", bb.fuse(unfused, hardware=DEFAULT_HARDWARE).program),
                                 ("fused-gpu", bb.fuse(unfused, hardware=gpu).program)):
                start = time.perf_counter()
                kernels = cross_compile(generate_source(program), arch=arch)
                bad = [k for k in kernels if not k["ok"]]
                failed += len(bad) + (len(kernels) != len(program.kernels))
                shared = max((k.get("shared", 0) for k in kernels), default=0)
                print(f"  {name:<19} {tag:<9} {len(kernels) - len(bad)}/{len(program.kernels)} "
                      f"kernels compiled, shared memory <= {shared / 1024:.1f} KiB "
                      f"({time.perf_counter() - start:.1f} s)")
                for k in bad:
                    print(f"    {k['name']}: {k.get('error', 'no cubin')}")
    print("all kernels compiled" if not failed else f"{failed} kernel(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
