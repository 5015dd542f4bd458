"""The shared lowering: pure IR -> IR steps every generator uses.

``rewrite`` substitutes, inlines and hoists; ``stages`` splits an op whose fused form
would recompute its reductions (statistics broadcast over other axes, a reduction
inside another's body, a full reduction to a few values) into stages, each a small op
of a class the generators render well, joined by scratch tensors; ``scatter`` reads a
sum over an equality indicator between an output index and an expression of the summed
ones (a histogram, ``h[c] = sum(i) (idx[i] == c)``) as a scatter-add, which the C, numpy
and torch generators render in O(N) instead of the dense O(N x C) (Triton from 64 keys);
``numerics`` rewrites exponentials written as the math reads (a softmax, a log-sum-exp,
a softplus) into forms shifted by their maximum, which do not overflow; ``common``
computes a reduction written twice in one statement once (the C and array generators);
``factor`` sums a product factor by factor where a factor leaves out an output index (a
GEMM's columns summed: the weight's column sums first), where that halves the work.
"""
