"""The shared lowering: pure IR -> IR steps every generator uses.

``rewrite`` substitutes, inlines and hoists; ``stages`` splits an op whose fused form
would recompute its reductions (statistics broadcast over other axes, a reduction
inside another's body, a full reduction to a few values) into stages, each a small op
of a class the generators render well, joined by scratch tensors.
"""
