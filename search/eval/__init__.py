"""The evaluator: one candidate through named stages, judged in a process it cannot reach.

One module per stage or concept: ``evaluator`` (the pipeline), ``guards`` with
``python_source`` and ``c_source`` (static checks), ``correctness`` (cases),
``timing`` (the bench point), ``floor`` (the memory-traffic floor), ``cuda_timer``,
``device_lock``, ``verdict`` (what a worker does after a result).
"""
