"""Files of a run directory written so that a kill never leaves half a file, and places to
write checked before any work starts.

``atomic_write`` writes a temporary file in the same directory, flushes it to the disk and
renames it over the target: a reader (or a resumed run) sees the old file or the new one,
never a torn one. ``check_out`` turns an ``--out`` that cannot be written (a read-only
directory, ``/proc``, a path through a regular file) into one line for the user before a
run spends anything on it.
"""
from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from kdsl.errors import UsageError


def atomic_write(path: str | Path, data: str | bytes) -> None:
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def why(e: OSError) -> str:
    """An OSError as a few words: 'permission denied', 'read-only file system'."""
    text = e.strerror or (os.strerror(e.errno) if e.errno else str(e))
    return text[:1].lower() + text[1:]


def check_out(path: str | Path, flag: str = "--out", kind: str = "dir") -> Path:
    """``path`` as a place this process can write: a directory to create or fill
    (``kind='dir'``) or a file to write (``kind='file'``, its directory must exist).

    Nothing is created here; UsageError names the flag, the path and the reason.
    """
    path = Path(path)
    if kind == "file":
        if path.is_dir():
            raise UsageError(f"{flag} {path} is a directory; give a file name")
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            what = "does not exist" if not parent.exists() else "is not a directory"
            raise UsageError(f"{flag} {path}: the directory {parent} {what}")
        _writable(parent, flag, path)
        return path
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {path} exists and is not a directory")
    # the nearest existing ancestor is where the first directory would be made
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{flag} {path}: {probe} is not a directory")
    _writable(probe, flag, path)
    return path


def _writable(directory: Path, flag: str, target: Path) -> None:
    """Try what the run will do: make and remove a file there (access() lies to root and
    about read-only mounts, /proc and /sys)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".kdsl-probe-", dir=directory)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        reason = why(e)
        if e.errno in (errno.EACCES, errno.EPERM):
            reason = f"{directory} is not writable ({reason})"
        elif e.errno == errno.EROFS:
            reason = f"{directory} is on a read-only file system"
        else:
            reason = f"cannot create files in {directory} ({reason})"
        raise UsageError(f"{flag} {target}: {reason}") from None
