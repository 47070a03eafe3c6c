"""blockbuster-numba: the Numba backend of Blockbuster.

It generates Python source from a block program (:func:`generate_source`: one
``@njit`` function per kernel, derived from the IR alone; a parallel kernel's loop
runs as one range per thread, :mod:`.threads`) and JIT-compiles it with Numba,
caching both the source and the machine code on disk. Compile time: NumPy calls in
kernels go through cached wrappers (:mod:`.kernel_numpy`), and a new module's
kernels compile on several processes at once (:mod:`.parallel_compile`);
``benchmarks/bench_compile.py`` measures it.

    import blockbuster as bb
    run = bb.compile(bb.fuse(bb.workload("attention")).program, backend="numba")
    out = run(Q=q, K=k, V=v)["O"]
    print(run.source)            # the generated kernels
    run.compile_seconds, run.jit_seconds, run.cache_hits

Registered as ``numba`` in the ``blockbuster.backends`` entry-point group.
"""

from __future__ import annotations

__version__ = "0.1.0"

import functools
import time

import attrs

from blockbuster.backends.base import Backend, CompiledProgram
from blockbuster.cost.hardware import Hardware
from blockbuster.ir.program import Program
from blockbuster.ir.verify import verify

from .codegen import generate_source
from .hardware import cpu_hardware, describe
from .codegen.reductions import COMBINE
from .lowering import LOWERED_OPS


@attrs.frozen(kw_only=True, eq=False)
class NumbaCompiledProgram(CompiledProgram):
    """A :class:`CompiledProgram` that also carries the generated source and where
    the compile time went. ``compile_seconds`` covers code generation and JIT (or
    loading the cached machine code); calls run only the compiled kernels."""

    source: str = ""
    source_path: str = ""
    codegen_seconds: float = 0.0
    jit_seconds: float = 0.0
    cache_hits: int = 0       # kernel functions loaded from Numba's on-disk cache
    cache_misses: int = 0     # kernel functions compiled now (identical kernels share one)


@attrs.frozen(kw_only=True, eq=False)
class NumbaBackend(Backend):
    """The Numba backend for the CPU its ``hardware`` describes: kernels run on
    ``hardware.cores`` threads (the generated parallel loops are split for that many,
    and Numba's pool is held to it while they run). ``threads=`` overrides it for one
    compile."""

    #: Block sizes the tuner may choose (:mod:`blockbuster.tuning.constraints`).
    block_constraints: object = None

    def compile(self, program: Program, **options) -> NumbaCompiledProgram:
        from .compiler import compile_module
        start = time.perf_counter()
        verify(program)
        options = {"threads": self.hardware.cores, "hardware": self.hardware, **options}
        module = compile_module(program, **options)
        return NumbaCompiledProgram(
            program=program, backend=self.name, run=module,
            compile_seconds=time.perf_counter() - start,
            source=module.source, source_path=str(module.path),
            codegen_seconds=module.codegen_seconds, jit_seconds=module.jit_seconds,
            cache_hits=module.cache_hits, cache_misses=module.cache_misses,
            compile_part=lambda part: compile_module(part, **options))


def compile_program(program: Program, hardware: Hardware, **options):
    """``compile_fn`` of the backend (``hardware`` bound): the runner alone (inputs ->
    outputs), on ``hardware.cores`` threads unless ``threads=`` says otherwise."""
    from .compiler import compile_module
    return compile_module(program, **{"threads": hardware.cores, "hardware": hardware,
                                      **options})


def make_backend(hardware: Hardware | None = None) -> NumbaBackend:
    """The backend for ``hardware``; by default this CPU (:func:`cpu_hardware`)."""
    hw = cpu_hardware() if hardware is None else hardware
    return NumbaBackend(
        block_constraints=block_constraints(),
        name="numba",
        description=f"Numba JIT for the CPU: generated kernels on threads, a gemm micro-kernel "
                    f"for block matmuls "
                    f"({describe(hw)})",
        compile_fn=functools.partial(compile_program, hardware=hw),
        hardware=hw,
        lowered_ops=LOWERED_OPS,
        lowered_combiners=frozenset(COMBINE),   # the generator's folds
    )


def block_constraints():
    """The tuner's block sizes for this backend: the Numba defaults, in multiples of
    the micro-kernel's register tile width (a block matmul's ragged last strip of
    columns is computed whole, on zero padding, and stored masked: 944-wide blocks
    ran 5-15 % slower than 960-wide ones on AVX-512)."""
    from blockbuster.tuning.constraints import NUMBA
    from .microkernel import NR
    return attrs.evolve(NUMBA, multiple=max(NUMBA.multiple, NR))


#: The entry point: ``numba = "blockbuster_numba:backend"``.
backend = make_backend()

__all__ = ["backend", "make_backend", "generate_source", "cpu_hardware",
           "NumbaBackend", "NumbaCompiledProgram", "compile_program", "__version__"]
