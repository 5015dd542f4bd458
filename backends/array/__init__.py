"""The array generators (numpy and torch): one lowering (``lowering``, ``analysis``,
``reduce``, ``gather``, ``window``) into a small array dialect, rendered by each."""
