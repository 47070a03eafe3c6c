"""Tensors of any rank as views of global arrays, and the unfused kernels over them.

One home for what the hand-written :class:`~blockbuster.frontend.builder.GraphBuilder`
and the PyTorch importer (:mod:`blockbuster.frontend.pytorch`) both need: views
(permute, heads split and merged, key/value heads shared, block-aligned slices),
broadcasting, elementwise kernels, reductions, matmuls, and the kernel sequences of
softmax, the norms and attention.

Axes name their program dimension through a *planner*: ``planner.dim(axis) -> Dim``,
``planner.planning`` (true in the importer's first pass, where only dimensions are
learnt and expressions are placeholders), ``unify(a, b, what)``, ``mark_tiled(axis)``.
The importer's planner (:class:`~blockbuster.frontend.pytorch.dims.DimPlanner`)
decides dimensions in two passes; the builder's axes are the user's named dims.
"""

#: Block size of a tiled dimension nobody constrains (the builder's ``dim`` without a
#: block, the importer's dimensions without a required one).
DEFAULT_BLOCK = 64
