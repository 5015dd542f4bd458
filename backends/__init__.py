"""Backends: code generators from IR + schedule genome to runnable kernels."""
