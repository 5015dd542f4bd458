"""The judge's requests to a candidate, with the descriptors of shared CPU memory passed on
the candidate's own socket, never through a listener another process can reach.

torch pickles a CPU tensor in shared memory as a descriptor of its memory file, which
multiprocessing hands over through ``resource_sharer``: a thread of the sending process that
listens on a socket in /tmp, admits any client that knows the process family's key (every
process multiprocessing starts is given it, candidates included) and then unpickles what
the client sends. A candidate (a red team, 2026-12-06) connected to its judge's listener and
sent a pickle that ran in the judge, outside every layer of its confinement, and made the
judged baseline ten times slower: 18-31x for an honest softmax kernel of 1.8-2.2x. Here a
request is pickled with the descriptors collected instead (multiprocessing's own hook for a
process being started, ``set_spawning_popen``), sent as bytes, then the descriptors follow
on the same socket (SCM_RIGHTS); no listener is ever started. The candidate's side reads
them back in the same order and hands them to torch's rebuild as it unpickles.

Standard library only (the candidate's side runs before torch is imported).
"""
from __future__ import annotations

import os
import socket
import struct
from multiprocessing import context, reduction

_HEADER = struct.Struct("<I")  # how many descriptors follow the request
MAX_FDS = 4096
CHUNK = 250  # descriptors a message carries (the kernel's limit is 253)
_received: list = []  # the descriptors of the request being unpickled, by index


class PassedFd:
    """Pickled in place of a descriptor; in the candidate, the one received at ``index``."""

    def __init__(self, index: int):
        self.index = index

    def detach(self) -> int:
        fd, _received[self.index] = _received[self.index], None
        if fd is None:
            raise ValueError("a descriptor taken twice")
        return fd


class _Collector:
    """Stands for a process being started, so that ``reduction.DupFd`` asks it: each
    descriptor is duplicated into the request's list, in order."""

    def __init__(self):
        self.fds: list[int] = []
        self.files: list[tuple] = []  # (the judge's own descriptor, its file, its size)

    def duplicate_for_child(self, fd: int) -> int:
        st = os.fstat(fd)
        self.files.append((fd, (st.st_dev, st.st_ino), st.st_size))
        self.fds.append(os.dup(fd))
        return len(self.fds) - 1

    @staticmethod
    def DupFd(index: int) -> PassedFd:  # noqa: N802 - multiprocessing's name
        return PassedFd(index)


def send(conn, message) -> list[tuple]:
    """``message`` on ``conn`` (a multiprocessing connection over a Unix socket); returns
    the memory files it passed, for ``shrunk``."""
    collector = _Collector()
    context.set_spawning_popen(collector)
    try:
        payload = reduction.ForkingPickler.dumps(message)
    finally:
        context.set_spawning_popen(None)
    try:
        conn.send_bytes(_HEADER.pack(len(collector.fds)) + bytes(payload))
        if collector.fds:
            with socket.socket(fileno=os.dup(conn.fileno())) as sock:
                for at in range(0, len(collector.fds), CHUNK):
                    reduction.sendfds(sock, collector.fds[at:at + CHUNK])
    finally:
        for fd in collector.fds:
            os.close(fd)
    return collector.files


def shrunk(files: dict) -> str | None:
    """What ``send`` passed and is now shorter than it was, None if nothing: the candidate
    holds its memory files open for writing and can truncate them, and the judge's next
    read of its own mapping past the new end is a SIGBUS that kills it (a red team did
    so). Asked while the candidate is stopped. A file whose descriptor the judge has since
    closed (its tensor freed) is forgotten."""
    for key, (fd, size) in list(files.items()):
        try:
            st = os.fstat(fd)
        except OSError:
            st = None
        if st is None or (st.st_dev, st.st_ino) != key:
            del files[key]
        elif st.st_size < size:
            return f"a shared memory file of {size} bytes was cut to {st.st_size}"
    return None


def receive(conn):
    """The next request on ``conn`` (``send``'s other end); EOFError when it is closed."""
    data = conn.recv_bytes()
    (n,) = _HEADER.unpack_from(data)
    if n > MAX_FDS:
        raise ValueError(f"a request with {n} descriptors")
    fds = []
    if n:
        with socket.socket(fileno=os.dup(conn.fileno())) as sock:
            while len(fds) < n:
                fds += reduction.recvfds(sock, min(CHUNK, n - len(fds)))
    _received[:] = fds
    try:
        return reduction.ForkingPickler.loads(memoryview(data)[_HEADER.size:])
    finally:
        for fd in _received:  # any the request did not use
            if fd is not None:
                os.close(fd)
        _received.clear()
