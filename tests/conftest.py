"""Shared test set-up. Keep it small: fixtures belong next to the tests that use them."""
from __future__ import annotations

import os
import tempfile

# Learned knowledge must never leak between test runs or into the user's home:
# every test process gets its own store.
os.environ["KDSL_KNOWLEDGE_DIR"] = tempfile.mkdtemp(prefix="kdsl-knowledge-")
os.environ.pop("ANTHROPIC_API_KEY", None)  # offline unless a test sets a (fake) key
