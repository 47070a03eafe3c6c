"""blockbuster-triton: the Triton backend of Blockbuster.

It generates Triton source from a block program (:func:`generate_source`: one
``@triton.jit`` function per kernel, the kernel's parallel loops on the launch grid,
derived from the IR alone) and runs it on a CUDA GPU, or on the CPU under Triton's
interpreter (``TRITON_INTERPRET=1``) when no GPU is found.

    import blockbuster as bb
    from blockbuster.backends.registry import get_backend
    triton = get_backend("triton")
    run = triton.compile(bb.fuse(program, hardware=triton.hardware).program)
    outputs = run(**inputs)
    print(run.source)            # the generated kernels

Fusion is priced for a GPU description (:mod:`.hardware`): the detected device,
else ``BLOCKBUSTER_TRITON_GPU`` (``h100``, ``h200``, ``a100``, ``rtx4090``), else an
H100. Registered as ``triton`` in the ``blockbuster.backends`` entry-point group.
"""

from __future__ import annotations

__version__ = "0.1.0"

import time

import attrs

from blockbuster.backends.base import Backend, CompiledProgram
from blockbuster.cost.hardware import Hardware
from blockbuster.ir.combiners import COMBINERS
from blockbuster.ir.program import Program
from blockbuster.ir.verify import verify

from .codegen import generate_source
from .codegen.combiners import COMBINE
from .environment import ENVIRONMENT
from .hardware import GPUS, GpuHardware, chosen_hardware, cuda_hardware, describe, gpu_hardware
from .lowering import LOWERED_OPS


@attrs.frozen(kw_only=True, eq=False)
class TritonCompiledProgram(CompiledProgram):
    """A :class:`CompiledProgram` with the generated source and where it lives."""

    source: str = ""
    source_path: str = ""
    codegen_seconds: float = 0.0
    mode: str = ""


@attrs.frozen(kw_only=True, eq=False)
class TritonBackend(Backend):
    @property
    def timings_meaningful(self) -> bool:
        """Times measured here describe the GPU fused for only when the kernels run on
        it: under the interpreter, measured tuning ranks by the cost model alone."""
        return ENVIRONMENT.mode == "gpu"

    def compile(self, program: Program, **options) -> TritonCompiledProgram:
        from .compiler import compile_module
        start = time.perf_counter()
        verify(program)
        module = compile_module(program, **options)
        return TritonCompiledProgram(
            program=program, backend=self.name, run=module,
            compile_seconds=time.perf_counter() - start,
            source=module.source, source_path=str(module.path),
            codegen_seconds=module.codegen_seconds, mode=ENVIRONMENT.mode,
            compile_part=lambda part: compile_module(part, **options))


def compile_program(program: Program, **options):
    """``compile_fn`` of the backend: the runner alone (inputs -> outputs)."""
    from .compiler import compile_module
    return compile_module(program, **options)


def make_backend(hardware: Hardware | str | None = None) -> TritonBackend:
    """The backend fusing for ``hardware`` (a description or a GPU's name); by default
    the detected GPU, else ``BLOCKBUSTER_TRITON_GPU``, else an H100."""
    if isinstance(hardware, str):
        hw = gpu_hardware(hardware)
    elif hardware is None:
        hw = chosen_hardware(cuda_hardware() if ENVIRONMENT.mode == "gpu" else None)
    else:
        hw = hardware
    fused_for = describe(hw) if isinstance(hw, GpuHardware) else hw.summary()
    return TritonBackend(
        name="triton",
        description=f"Triton kernels: {ENVIRONMENT.describe()}; fused for {fused_for}",
        compile_fn=compile_program,
        hardware=hw,
        lowered_ops=LOWERED_OPS,
        lowered_combiners=frozenset(COMBINE) & frozenset(COMBINERS),
    )


#: The entry point: ``triton = "blockbuster_triton:backend"``.
backend = make_backend()

__all__ = ["backend", "make_backend", "generate_source", "gpu_hardware", "GPUS",
           "GpuHardware", "TritonBackend", "TritonCompiledProgram", "ENVIRONMENT",
           "__version__"]
