"""Imported by the forkserver that candidate processes are forked from (``zygote.PRELOAD``,
the one hook it runs at start): the server's memory closed to any process without
``CAP_SYS_PTRACE`` (``lockdown.not_dumpable``), so a candidate cannot rewrite the copy
the next candidates are forked from."""
from .lockdown import not_dumpable

not_dumpable()
