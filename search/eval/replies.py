"""The candidate's replies, read by the judge without trusting them.

A reply is pickled by the candidate's process, and unpickling is running code: a reply
holding an object whose ``__reduce__`` names ``exec`` ran that code in the judge (a C
kernel that reached the Python C API made its replies so, and rewrote the judge's checks
from inside it). So the judge reads a reply as data only: no class, function or module
may be named in it (``find_class`` refuses every global), which leaves tuples, lists,
dicts, sets, strings, bytes, numbers, booleans and None, all a reply ever needs; and no
reply may be longer than ``MAX_REPLY_BYTES`` (a kernel raising an exception with a 200 MB
message held the judge for minutes). The candidate's side trims what it sends
(``trim``), so an honest reply never comes near the cap.
"""
from __future__ import annotations

import io
import pickle

MAX_REPLY_BYTES = 8 << 20
MAX_TEXT = 64 << 10  # characters of one message or log kept by the candidate's side


class Refused(Exception):
    """A reply that is not plain data, or is too long."""


class _DataOnly(pickle.Unpickler):
    def find_class(self, module, name):
        raise Refused(f"a reply named {module}.{name}: a reply is plain data only")

    def persistent_load(self, pid):
        raise Refused("a reply with a persistent id: a reply is plain data only")


def receive(conn):
    """The next reply on ``conn``, as plain data; ``Refused`` for anything else. EOFError
    and OSError (a dead process) pass through."""
    try:
        data = conn.recv_bytes(MAX_REPLY_BYTES)
    except OSError as e:
        if "bad message length" in str(e):
            raise Refused(f"a reply longer than {MAX_REPLY_BYTES >> 20} MB") from None
        raise
    try:
        return _DataOnly(io.BytesIO(data)).load()
    except Refused:
        raise
    except Exception as e:  # noqa: BLE001 - whatever a malformed pickle raises
        raise Refused(f"a reply that is not a pickle of plain data ({type(e).__name__})") \
            from None


def trim(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to ``limit`` characters, keeping both ends (where errors say most)."""
    if not isinstance(text, str):
        text = str(text)
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters cut ...]\n{text[-half:]}"
