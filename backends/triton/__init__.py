"""The Triton generator: GPU kernels (CUDA, AMD) rendered from the shared lowering.

``backend`` is the Backend; ``plan`` reads an op into program axes, row values and
stores; ``rows``, ``sort``, ``window`` and ``dot`` render its classes; ``staged``
renders an op the lowering split into stages, one kernel (or more) a stage.
"""
