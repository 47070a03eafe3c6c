"""Where the generated kernels run: a CUDA GPU, or the CPU under Triton's interpreter.

Decided once, when the plugin is imported: with a CUDA device (``torch.cuda``) the
kernels are compiled for it; without one, ``TRITON_INTERPRET=1`` is set (before Triton
is imported, and before any kernel is decorated, which is when Triton reads it) and
the same kernels run on the CPU through NumPy. ``TRITON_INTERPRET=1`` set by the
caller forces the interpreter on a GPU machine too. Importing fails with a one-line
reason when Triton or PyTorch is missing; the registry then lists the backend as
broken with that reason.
"""

from __future__ import annotations

import os

import attrs


@attrs.frozen
class Environment:
    mode: str                 # "gpu" or "interpreter"
    device: str               # "cuda" or "cpu": where the buffers live
    device_name: str          # the GPU's name, or why the interpreter is used
    triton_version: str

    def describe(self) -> str:
        if self.mode == "gpu":
            return f"GPU found ({self.device_name}), Triton {self.triton_version}"
        return (f"interpreter mode ({self.device_name}): kernels run on the CPU under "
                f"TRITON_INTERPRET=1, Triton {self.triton_version}")


def _cuda_device_name() -> str | None:
    import torch
    try:
        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except Exception:   # a broken driver is no GPU
        return None
    return None


def detect() -> Environment:
    try:
        import torch  # noqa: F401
    except ImportError as err:
        raise ImportError(f"blockbuster-triton needs PyTorch to hold the kernels' buffers "
                          f"(pip install torch): {err}") from None
    forced = os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on")
    gpu = None if forced else _cuda_device_name()
    if gpu is None:
        os.environ["TRITON_INTERPRET"] = "1"   # before triton reads it
    try:
        import triton
    except ImportError as err:
        raise ImportError(f"blockbuster-triton needs Triton (pip install triton): {err}") from None
    if gpu is not None:
        return Environment("gpu", "cuda", gpu, triton.__version__)
    why = "TRITON_INTERPRET=1 was set" if forced else "no CUDA GPU found"
    _skip_overflow_checks()
    return Environment("interpreter", "cpu", why, triton.__version__)


def _skip_overflow_checks() -> None:
    """The interpreter checks every int32 add and multiply for overflow (a debugging
    aid compiled kernels do not have), which costs it half of its time on the
    generated index arithmetic; the offsets here are bounded by the arrays' sizes.
    Left on if this Triton keeps its interpreter's options elsewhere."""
    try:
        import dataclasses

        from triton.runtime import interpreter
        builder = interpreter.interpreter_builder
        builder.options = dataclasses.replace(builder.options, sanitize_overflow=False)
    except Exception:
        pass


#: The environment of this process.
ENVIRONMENT = detect()
