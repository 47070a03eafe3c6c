"""The module being generated: its names, constants and kernels, in program order."""

from __future__ import annotations

from blockbuster.errors import BackendError
from blockbuster.ir.kernel_key import kernel_key
from blockbuster.ir.printer import format_float
from blockbuster.ir.program import Kernel, Program

from ..runtime import HELPERS
from .kernel import KernelGenerator
from .render import module_source
from .values import Namer


class ModuleGenerator:
    """Generates the module source for one program (``generate_source``)."""

    def __init__(self, program: Program, dtype: str = "float32", threads: int | None = None,
                 header: str = "", parallel: bool | None = None, hardware=None):
        if dtype not in HELPERS:
            raise BackendError(f"numba: dtype must be float32 or float64, got {dtype}")
        self.program = program
        self.dtype = dtype
        if hardware is None:
            from ..hardware import cpu_hardware
            hardware = cpu_hardware()
        self.hardware = hardware         # prices the parallel decision
        self.threads = max(1, hardware.cores if threads is None else threads)
        self.parallel = parallel     # None: decided per kernel from its work
        self.header = header
        self.dims = program.dim_map
        self.array_dims = {a.name: [self.dims[d] for d in a.dims] for a in program.arrays}
        self.consts: dict[str, str] = {}          # float hex -> module constant name
        self.const_lines: list[str] = []
        self.local_names: set[str] = set()      # every kernel's locals (consts avoid them)
        self.module_names = Namer(avoid=self.local_names)
        # Array names become the kernels' argument names (and the driver's locals).
        self.arg_names = {a.name: self.module_names.fresh(a.name) for a in program.arrays}
        self.kernel_names: dict[str, str] = {}
        self.kernel_launch: dict[str, str] = {}   # kernel -> its threads launcher, if any
        self.twins: dict[str, Kernel] = {}         # kernel -> the same kernel met earlier
        self.kernels: list[KernelGenerator] = []  # after generate(): each kernel's plan
        # Inputs some kernel multiplies by from a packed copy (..prepack): operand name
        # -> (input array, transposed), and each kernel's operands (extra arguments).
        self.packed: dict[str, tuple[str, bool]] = {}
        self.kernel_packed: dict[str, list[str]] = {}

    def generate(self) -> str:
        sources = []
        first: dict = {}
        for k in self.program.kernels:
            gen = KernelGenerator(self, k)
            text = gen.generate()
            self.kernels.append(gen)
            # The same kernel on other arrays (identical layers): one function, called
            # with these arrays; Numba compiles it once.
            twin = first.setdefault(kernel_key(k, self.program), k)
            if twin is k:
                sources.append(text)
            else:
                self.twins[k.name] = twin
        return module_source(self, sources, HELPERS[self.dtype])

    def call_args(self, kernel: Kernel) -> tuple[Kernel, list[str]]:
        """The kernel whose function runs ``kernel`` (itself, or its earlier twin) and
        ``kernel``'s arrays (and packed operands) in that function's argument order."""
        twin = self.twins.get(kernel.name)
        if twin is None:
            return kernel, self.kernel_args(kernel)
        mine = dict(zip(array_order(twin), array_order(kernel)))
        for operand in self.kernel_packed.get(twin.name, ()):
            array, transposed = self.packed[operand]
            mine[operand] = self.packed_key(mine[array], transposed)
        return twin, [mine[a] for a in self.kernel_args(twin)]

    def packed_key(self, array: str, transposed: bool) -> str:
        """The operand (a pseudo-array name) of input ``array`` (or its transpose)
        packed once per call (:mod:`..prepack`), registered with its argument name."""
        operand = f"{array}#packed{'T' if transposed else ''}"
        if operand not in self.packed:
            self.packed[operand] = (array, transposed)
            self.arg_names[operand] = self.module_names.fresh(
                f"{self.arg_names[array]}_packed{'T' if transposed else ''}")
        return operand

    def packed_operand(self, array: str, transposed: bool, kernel_gen) -> str:
        """The argument name under which the kernel of ``kernel_gen`` takes input
        ``array`` (or its transpose) packed."""
        operand = self.packed_key(array, transposed)
        mine = self.kernel_packed.setdefault(kernel_gen.kernel.name, [])
        if operand not in mine:
            mine.append(operand)
        return self.arg_names[operand]

    def const(self, value: float) -> str:
        key = float(value).hex()
        name = self.consts.get(key)
        if name is None:
            name = self.module_names.fresh(f"C{len(self.consts)}")
            self.consts[key] = name
            text = format_float(value)
            literal = {"inf": "np.inf", "-inf": "-np.inf", "nan": "np.nan"}.get(text, text)
            self.const_lines.append(f"{name} = DT({literal})")
        return name

    def kernel_fn(self, kernel: Kernel) -> str:
        name = self.kernel_names.get(kernel.name)
        if name is None:
            name = self.kernel_names[kernel.name] = self.module_names.fresh("kernel_" + kernel.name)
        return name

    def launcher_fn(self, kernel: Kernel) -> str:
        """The Python function running a parallel kernel's ranges on threads."""
        name = self.kernel_launch.get(kernel.name)
        if name is None:
            name = self.kernel_launch[kernel.name] = self.module_names.fresh(
                "parallel_" + kernel.name)
        return name

    def kernel_args(self, kernel: Kernel) -> list[str]:
        """The kernel function's arguments: its arrays, then its packed operands."""
        used = kernel.reads() | set(kernel.writes())
        return ([a.name for a in self.program.arrays if a.name in used]
                + self.kernel_packed.get(kernel.name, []))


def array_order(kernel: Kernel) -> list[str]:
    """The kernel's arrays in order of first use (stores, then loads in walk order):
    two kernels with equal :func:`kernel_key` use corresponding arrays in the same
    places of this order."""
    order = dict.fromkeys(s.array for s in kernel.stores)
    for s in kernel.stores:
        for n in s.value.walk():
            if n.op == "load":
                order.setdefault(n.attr.array)
    return list(order)
