"""Code generation: a block program becomes a Python module of Triton kernels.

Nothing here knows a workload or a rule: the generator walks the IR. Stages, one
module each: :mod:`.kernel` (the grid and placement), :mod:`.expressions` (each
operator), :mod:`.combiners` (``reduce`` loops), :mod:`.stores`; :mod:`.indices`
renders block indices, offsets and masks; :mod:`.values` holds what they pass
around; :mod:`.module` writes the module text.
"""

from .module import ModuleGenerator, generate_source

__all__ = ["generate_source", "ModuleGenerator"]
