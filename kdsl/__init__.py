"""kdsl: declare an operator once, search for fast and correct kernels for it."""
__version__ = "0.1.0"
