"""The C/OpenMP generator for CPUs: ``backend`` is the Backend; ``plan`` and ``nest``
lower an op into loop nests, ``emit``/``render`` write C, ``build`` compiles it."""
