"""What a candidate's process gives up before any candidate code is loaded (Linux).

The candidate's code runs as the same user as the judge (on the machines kdsl runs on,
root), and native code can reach anything its process can (the ELF walk from ``malloc``
to ``dlsym`` to the Python C API passes every static guard). So the process itself is
confined, in layers, each tried and reported on its own (``lock_down`` returns what held):

- **filesystem**: a mount namespace of its own in which every mount is read-only but its
  private folder (its builds and temporary files), devices and shared memory: nothing it
  writes can reach the kdsl sources, the measurement cache, a run's records, another
  candidate's build, the kernel's settings (/proc, /sys) or the cgroups. (On a GPU /proc
  stays writable but /proc/sys and the other paths a container runtime makes read-only:
  CUDA fails to start on a read-only /proc.) On the CPU its
  shared memory is a small tmpfs of its own; on a GPU it is the machine's (CUDA tensors
  arrive with a reference count in a file there), and the candidates' Triton kernel cache
  is writable, a folder apart from the judge's (Triton compiles there; the judge's
  torch.compile would read a kernel planted in its own). The forkserver's socket is
  covered: it cannot ask for a process of its own.
- **seccomp**: signals only to itself and its own process group (a stopped judge or
  another worker's baseline would be slowed by a SIGSTOP), and never SIGCONT or another
  job-control signal (one undid the judge's stop), a group which nothing it forks can
  leave (no ``setsid`` or ``setpgid``: one signal to the group stops all of it) nor get
  out from under (no ``CLONE_PARENT``: what it starts stays among its descendants); no
  ptrace, no reading or writing another process's memory, no mounts or namespaces, no
  io_uring, no sockets but Unix ones; no resource limits, scheduling, priority or memory
  placement of any process but itself, and no becoming dumpable again.
- **capabilities**: all dropped, the bounding set too, and no new privileges on exec.
  Reading or writing another process's memory (``/proc/PID/mem``, ptrace) then needs the
  target to hold no capability the candidate lacks and to be dumpable: every process of a
  root user holds capabilities, and the judge, the forkserver, the process that starts
  the evaluations and every candidate (another's spare) are made not dumpable
  (``not_dumpable``), which also covers a user without capabilities.

Must run while the process has one thread (mount namespaces, seccomp filters and
capabilities are per thread). Standard library only, like ``confine``.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MOUNT_OPTIONS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC,
                 "noatime": MS_NOATIME, "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}
# file systems left as they are: devices (a write to a device node, /dev/null or a GPU's,
# passes a read-only mount anyway) and shared memory (on a GPU the judge's CUDA tensors
# come with a reference count in a /dev/shm file the candidate opens by name). The
# kernel's views are read-only like the rest: the candidate runs as root, and root owns
# /proc/sys, /sys, the cgroup files and every /proc/PID, so a writable /proc let a
# candidate (a red team, 2026-12-06) set kernel.core_pattern to a program of its own, which
# the kernel then ran as root outside every layer here, and set other processes' OOM
# scores and autogroup niceness; a writable /sys took a CPU offline
# (and /dev itself read-only: a red team's second pass kept 96 MiB of files there past its
# evaluation; a device node opens for writing on a read-only mount all the same)
KEEP_WRITABLE_TYPES = {"devpts"}
KEEP_WRITABLE_POINTS = ("/dev/shm", "/run/shm")
# On a GPU /proc cannot be read-only as a whole: CUDA's start failed on an H100 so
# ("Error 304: OS call failed", 2026-12-06). ``PROC_OWN``: only the process's own /proc/PID
# stays writable, every other process's is read-only (a writable /proc let a candidate
# renice the judge's autogroup and raise its OOM score), the kernel's settings too.
# ``PROC_ALL_BUT_KERNEL``, where CUDA does not start under that (``candidate_main`` tries
# it first, in a child): all of /proc writable but the kernel's settings, the paths a
# container runtime makes read-only by default (Docker's), under which CUDA runs
PROC_OWN, PROC_ALL_BUT_KERNEL = "own", "all but the kernel's settings"
CUDA_READ_ONLY_PROC = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                       "/proc/sysrq-trigger")
# the size of a candidate's private shared memory (``private_shm``): no honest kernel
# needs more, and a shared one let a candidate keep files for later candidates (and could
# have filled the machine's memory: a tmpfs takes RAM)
PRIVATE_SHM_BYTES = 64 << 20

_libc = None


def _c():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int, what: str) -> None:
    if result != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def not_dumpable() -> None:
    """This process's memory closed to any process without ``CAP_SYS_PTRACE``, whatever
    its user (a judge, the forkserver, a candidate before its code loads)."""
    try:
        _c().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def lock_down(private: str, writable: tuple[str, ...] = (),
              hidden: tuple[str, ...] = (), private_shm: bool = False,
              cuda: bool = False, proc: str = PROC_OWN) -> dict[str, str]:
    """Confine this process; ``private`` (created here) and ``writable`` stay writable,
    the sockets ``hidden`` refuse it, and with ``private_shm`` its shared memory is a
    small empty file system of its own (``read_only_filesystem``).
    Returns {layer: 'on' | why not}."""
    report = {}
    threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1
    if threads != 1:
        return {layer: f"off: the process has {threads} threads"
                for layer in ("filesystem", "seccomp", "capabilities")}
    not_dumpable()
    os.makedirs(private, exist_ok=True)
    for layer, step in (("filesystem", lambda: read_only_filesystem((private, *writable),
                                                                    hidden, private_shm,
                                                                    cuda, proc)),
                        ("seccomp", lambda: install_seccomp(os.getpid())),
                        ("capabilities", drop_capabilities)):
        try:
            step()
            report[layer] = "on"
        except (OSError, ValueError, AttributeError) as e:
            report[layer] = f"off: {e}"
    return report


# ---- the filesystem ----------------------------------------------------------

def mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file system type, per-mount options) of this namespace."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            point = fields[4].encode().decode("unicode_escape")
            out.append((point, right.split()[0], set(fields[5].split(","))))
    return out


def read_only_filesystem(writable: tuple[str, ...], hidden: tuple[str, ...] = (),
                         private_shm: bool = False, cuda: bool = False,
                         proc: str = PROC_OWN) -> None:
    """A mount namespace of this process's own, every mount read-only but ``writable``
    and shared memory (with ``cuda``, this process's own /proc/PID too, or with ``proc``
    ``PROC_ALL_BUT_KERNEL`` /proc but ``CUDA_READ_ONLY_PROC``), each
    socket file of ``hidden`` covered by /dev/null, so that connecting to it is refused,
    each folder of it by an empty read-only tmpfs, and with ``private_shm`` a tmpfs of
    ``PRIVATE_SHM_BYTES`` over /dev/shm (where the judge passes tensors as descriptors, on
    the CPU: nothing is opened there by name). (The forkserver every candidate is forked
    from takes a connection from anyone who can reach its socket and forks whatever the
    pickle it is sent says: a candidate got a process of its own that way, neither
    confined nor ever stopped, and spun on the cores while the baseline was timed, 31x
    for a kernel identical to the baseline. A read-only mount does not refuse ``connect``.)"""
    c = _c()
    _check(c.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(c.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    for point, fstype, options in mounts():
        if cuda and proc == PROC_ALL_BUT_KERNEL and point == "/proc":
            continue  # (below)
        if fstype in KEEP_WRITABLE_TYPES or point in KEEP_WRITABLE_POINTS or \
                (point.startswith("/dev/") and fstype != "tmpfs") or "ro" in options:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for name, bit in MOUNT_OPTIONS.items():
            if name in options:
                flags |= bit
        _check(c.mount(None, point.encode(), None, flags, None),
               f"remount {point} read-only")
    for path in writable:  # bound onto themselves (a bind takes its source's read-only
        if os.path.isdir(path):  # flag), then that one mount made writable again
            p = path.encode()
            _check(c.mount(p, p, None, MS_BIND, None), f"bind {path}")
            _check(c.mount(None, p, None, MS_REMOUNT | MS_BIND, None), f"remount {path} rw")
    if cuda and proc == PROC_ALL_BUT_KERNEL:
        for path in CUDA_READ_ONLY_PROC:
            if os.path.exists(path):
                p = path.encode()
                _check(c.mount(p, p, None, MS_BIND | MS_REC, None), f"bind {path}")
                _check(c.mount(None, p, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None),
                       f"remount {path} read-only")
    elif cuda:  # its own /proc/PID writable again, its threads' included (see above)
        own = f"/proc/{os.getpid()}".encode()
        _check(c.mount(own, own, None, MS_BIND | MS_REC, None), "bind /proc/PID")
        _check(c.mount(None, own, None, MS_REMOUNT | MS_BIND, None), "remount /proc/PID rw")
    for path in hidden:
        if path and os.path.isdir(path):  # an empty read-only folder over it
            _check(c.mount(b"tmpfs", path.encode(), b"tmpfs",
                           MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=4k"),
                   f"cover {path}")
        elif path and os.path.exists(path):
            _check(c.mount(b"/dev/null", path.encode(), None, MS_BIND, None), f"cover {path}")
    if private_shm:
        # System V objects and POSIX message queues of its own, gone with it (they had
        # outlived a candidate: 128 MiB of SysV shared memory, a queue)
        _check(c.unshare(CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")
        for path in ("/dev/shm", "/run/shm"):
            if os.path.isdir(path) and not os.path.islink(path):
                opts = f"size={PRIVATE_SHM_BYTES},mode=1777".encode()
                _check(c.mount(b"tmpfs", path.encode(), b"tmpfs",
                               MS_NOSUID | MS_NODEV | MS_NOEXEC, opts), f"tmpfs on {path}")


# ---- seccomp -------------------------------------------------------------------

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
AUDIT_ARCH_I386 = 0x40000003
X32_BIT = 0x40000000
SYSCALLS = {  # name: (x86_64, aarch64)
    "kill": (62, 129), "tkill": (200, 130), "tgkill": (234, 131),
    "rt_sigqueueinfo": (129, 138), "rt_tgsigqueueinfo": (297, 240),
    "pidfd_send_signal": (424, 424),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "kcmp": (312, 272), "mount": (165, 40), "umount2": (166, 39), "unshare": (272, 97),
    "setns": (308, 268), "pivot_root": (155, 41), "chroot": (161, 51),
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430),
    "fsmount": (432, 432), "socket": (41, 198), "setsid": (112, 157), "setpgid": (109, 154),
    "io_uring_setup": (425, 425), "clone": (56, 220), "clone3": (435, 435),
    "fcntl": (72, 25), "timer_create": (222, 107), "mq_notify": (244, 184),
    "prctl": (157, 167),
    "prlimit64": (302, 261), "sched_setaffinity": (203, 122),
    "sched_setscheduler": (144, 119), "sched_setparam": (142, 118),
    "sched_setattr": (314, 274), "migrate_pages": (256, 238), "move_pages": (279, 239),
    "setpriority": (141, 140), "ioprio_set": (251, 30),
    "add_key": (248, 217), "request_key": (249, 218), "keyctl": (250, 219),
    "ioctl": (16, 29),
}
# calls that act on the process their first argument names: only on itself (0, or its own
# pid). A red team (2026-12-06) set the next candidate's address-space limit so that it
# died at its first allocation, pinned it to one core, and set the judge's CPU-time limit
# to a second (killed): a process without capabilities may do all that to any process of
# its user it can see. (Its threads cannot pin themselves by their own ids: nothing here
# asks for that.)
SELF_ONLY = ("prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam",
             "sched_setattr", "migrate_pages", "move_pages")
# (which, who) calls: only which = 0 (a process: PRIO_PROCESS, and ioprio's
# IOPRIO_WHO_PROCESS is 1) with who itself; a user's or a group's every process would take
# the judge's and the baseline's too
WHICH_WHO = {"setpriority": 0, "ioprio_set": 1}
# (pidfd_open and pidfd_getfd stay allowed: taking another process's descriptor is checked
# like ptrace, which the dropped capabilities and not-dumpable processes already refuse, and
# a GPU driver may pass descriptors that way; signalling through a pidfd is denied)
DENIED = ("tkill", "pidfd_send_signal", "ptrace", "process_vm_readv", "process_vm_writev",
          "kcmp", "mount", "umount2", "unshare", "setns", "pivot_root", "chroot",
          "open_tree", "move_mount", "fsopen", "fsmount",
          # every process it forks stays in its group, which one signal stops whole
          "setsid", "setpgid",
          # kernel-side workers doing its I/O outside any stop the judge sends
          "io_uring_setup",
          # the kernel sending a signal the process chose, which may be SIGCONT: a timer
          # firing SIGCONT every 5 us undid the judge's SIGSTOP and let a thread work on
          # after the step's clock ended (the signal is named in memory, out of the filter's
          # reach, so the calls go whole; fcntl's F_SETSIG and F_SETOWN are refused below)
          "timer_create", "mq_notify",
          # the user's kernel keyrings, which every process of root shares and keeps
          "add_key", "request_key", "keyctl")
# first arg: a pid; then the signal, as the argument of this index
TARGETED = {"kill": 1, "tgkill": 2, "rt_sigqueueinfo": 1, "rt_tgsigqueueinfo": 2}
# job control, SIGCONT to SIGTTOU (the same numbers on both ABIs): a thread that sent
# itself SIGCONT threw away the judge's pending SIGSTOP and worked on after the step's clock
# had ended; no kernel needs to stop or continue itself
JOB_CONTROL = (18, 22)
AF_UNIX = 1
# clone's flags that would put a process where the judge does not look: CLONE_PARENT makes
# it the forkserver's child, in the group but below no process the judge lists (a farm of
# idle threads so made ran on after SIGSTOP); and the new namespaces. clone3 passes its flags
# in memory, which a filter cannot read: it is answered ENOSYS, on which the C library
# falls back to clone (threads, fork and posix_spawn alike).
CLONE_DENIED = (0x00008000       # CLONE_PARENT
                | 0x00020000     # CLONE_NEWNS
                | 0x02000000     # CLONE_NEWCGROUP
                | 0x04000000     # CLONE_NEWUTS
                | 0x08000000     # CLONE_NEWIPC
                | 0x10000000     # CLONE_NEWUSER
                | 0x20000000     # CLONE_NEWPID
                | 0x40000000)    # CLONE_NEWNET
# fcntl commands that make the kernel signal a process of the caller's choice (any process
# of the same user: the judge took a SIGUSR1 so) with a signal of its choice (SIGCONT)
F_SETOWN, F_SETSIG, F_SETOWN_EX = 8, 10, 15
# and a lease, which holds another process's open of the file for up to the kernel's break
# time (an outside read of a leased file waited 19 s)
F_SETLEASE = 1024
# ioctls of loop devices (type 'L'): one bound to the candidate's memory outlived it
LOOP_IOCTL_TYPE, IOCTL_TYPE_MASK = 0x4C00, 0xFF00
SIGCHLD = 17  # the one signal a clone's child may send its parent on exit (flags' low byte)
# prctl's option that names the signal the kernel sends a process when its parent exits: with
# SIGCONT, a worker continued by its parent's slow exit ran on after the judge had seen it
# stopped (the red team's third pass); the candidate's own SIGKILL is set before the filter.
# And PR_SET_DUMPABLE: a candidate made dumpable again could crash into a core dump, which
# the kernel hands to the program kernel.core_pattern names, as root, outside every layer
PR_SET_PDEATHSIG = 1
RET_ALLOW, RET_EPERM = 0x7FFF0000, 0x00050000 | errno.EPERM
RET_ENOSYS = 0x00050000 | errno.ENOSYS
LD_W_ABS, JEQ_K, JGE_K, JSET_K, AND_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x54, 0x06


def seccomp_program(pid: int, arch: str) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions: allow all but ``DENIED``; signals
    only to ``pid``, its group (``-pid``, 0) or its own threads, and none of job control
    (``JOB_CONTROL``); sockets only AF_UNIX;
    clone without ``CLONE_DENIED`` flags and with no exit signal but SIGCHLD, clone3 not
    at all (ENOSYS); fcntl but F_SETOWN, F_SETOWN_EX and F_SETSIG; prctl but a parent-death
    signal of job control and PR_SET_DUMPABLE; the ``SELF_ONLY`` and ``WHICH_WHO`` calls on
    itself alone; no lease (F_SETLEASE) and no loop-device ioctl; no keyrings."""
    audit, index = AUDIT_ARCH[arch], 0 if arch == "x86_64" else 1
    nr = {name: numbers[index] for name, numbers in SYSCALLS.items()}
    code: list = []  # (op, jt label | None, jf label | None, k) with labels resolved below
    labels: dict[str, int] = {}

    def emit(op, k, jt=None, jf=None):
        code.append([op, jt, jf, k])

    emit(LD_W_ABS, 4)                               # arch
    emit(JEQ_K, audit, None, "deny")                # another ABI (i386 on x86_64): denied
    emit(LD_W_ABS, 0)                               # syscall number
    if arch == "x86_64":
        emit(JGE_K, X32_BIT, "deny", None)          # the x32 ABI
    for name in DENIED:
        emit(JEQ_K, nr[name], "deny", None)
    for name, arg in TARGETED.items():
        emit(JEQ_K, nr[name], f"target{arg}", None)
    emit(JEQ_K, nr["socket"], "socket", None)
    emit(JEQ_K, nr["clone"], "clone", None)
    emit(JEQ_K, nr["clone3"], "enosys", None)
    emit(JEQ_K, nr["fcntl"], "fcntl", None)
    emit(JEQ_K, nr["prctl"], "prctl", None)
    emit(JEQ_K, nr["ioctl"], "ioctl", None)
    for name in SELF_ONLY:
        emit(JEQ_K, nr[name], "self0", None)
    for name, which in WHICH_WHO.items():
        emit(JEQ_K, nr[name], f"which{which}", None)
    emit(RET_K, RET_ALLOW)
    for which in sorted(set(WHICH_WHO.values())):
        labels[f"which{which}"] = len(code)
        emit(LD_W_ABS, 16)                              # which
        emit(JEQ_K, which, None, "deny")
        emit(LD_W_ABS, 24)                              # who: itself
        emit(JEQ_K, 0, "allow", None)
        emit(JEQ_K, pid, "allow", "deny")
    labels["self0"] = len(code)
    emit(LD_W_ABS, 16)                                  # args[0]: the pid, itself
    emit(JEQ_K, 0, "allow", None)
    emit(JEQ_K, pid, "allow", "deny")
    for arg in sorted(set(TARGETED.values())):
        labels[f"target{arg}"] = len(code)
        emit(LD_W_ABS, 16)                              # args[0], low word (a pid_t)
        emit(JEQ_K, pid, f"signal{arg}", None)
        emit(JEQ_K, (-pid) & 0xFFFFFFFF, f"signal{arg}", None)  # kill(-pid): its group
        emit(JEQ_K, 0, f"signal{arg}", "deny")          # kill(0): its own group
        labels[f"signal{arg}"] = len(code)
        emit(LD_W_ABS, 16 + 8 * arg)                    # the signal's number
        emit(JGE_K, JOB_CONTROL[0], None, "allow")
        emit(JGE_K, JOB_CONTROL[1] + 1, "allow", "deny")
    labels["socket"] = len(code)
    emit(LD_W_ABS, 16)                              # the domain
    emit(JEQ_K, AF_UNIX, "allow", "deny")
    labels["clone"] = len(code)
    emit(LD_W_ABS, 16)                              # the flags (args[0] on both ABIs)
    emit(JSET_K, CLONE_DENIED, "deny", None)
    emit(AND_K, 0xFF)                               # the exit signal: none or SIGCHLD
    emit(JEQ_K, 0, "allow", None)
    emit(JEQ_K, SIGCHLD, "allow", "deny")
    labels["fcntl"] = len(code)
    emit(LD_W_ABS, 24)                              # args[1], low word: the command
    emit(JEQ_K, F_SETOWN, "deny", None)
    emit(JEQ_K, F_SETSIG, "deny", None)
    emit(JEQ_K, F_SETLEASE, "deny", None)
    emit(JEQ_K, F_SETOWN_EX, "deny", "allow")
    labels["ioctl"] = len(code)
    emit(LD_W_ABS, 24)                              # args[1], low word: the request
    emit(AND_K, IOCTL_TYPE_MASK)
    emit(JEQ_K, LOOP_IOCTL_TYPE, "deny", "allow")
    labels["prctl"] = len(code)
    emit(LD_W_ABS, 16)                              # the option
    emit(JEQ_K, PR_SET_DUMPABLE, "deny", None)
    emit(JEQ_K, PR_SET_PDEATHSIG, None, "allow")
    emit(LD_W_ABS, 24)                              # its signal
    emit(JGE_K, JOB_CONTROL[0], None, "allow")
    emit(JGE_K, JOB_CONTROL[1] + 1, "allow", "deny")
    labels["enosys"] = len(code)
    emit(RET_K, RET_ENOSYS)
    labels["allow"] = len(code)
    emit(RET_K, RET_ALLOW)
    labels["deny"] = len(code)
    emit(RET_K, RET_EPERM)
    out = []
    for i, (op, jt, jf, k) in enumerate(code):
        jump = [0 if j is None else labels[j] - i - 1 for j in (jt, jf)]
        if not all(0 <= j < 256 for j in jump):
            raise ValueError("seccomp program: a jump out of range")
        out.append((op, jump[0], jump[1], k))
    return out


def install_seccomp(pid: int) -> None:
    arch = platform.machine()
    if arch not in AUDIT_ARCH:
        raise ValueError(f"no seccomp filter for {arch}")
    program = seccomp_program(pid, arch)
    raw = b"".join(struct.pack("HBBI", *ins) for ins in program)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(len(program), ctypes.addressof(buf))
    c = _c()
    _check(c.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(c.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0),
           "prctl(PR_SET_SECCOMP)")


# ---- capabilities --------------------------------------------------------------

CAPSET = {"x86_64": 126, "aarch64": 91}
CAP_VERSION_3 = 0x20080522


def drop_capabilities() -> None:
    """Every capability gone from this thread, for good (the bounding set too)."""
    c = _c()
    _check(c.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    for cap in range(64):
        if c.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
            _check(-1, f"prctl(PR_CAPBSET_DROP, {cap})")
    number = CAPSET.get(platform.machine())
    if number is None:
        raise ValueError(f"no capset number for {platform.machine()}")
    header = (ctypes.c_uint32 * 2)(CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable}, all zero
    _check(c.syscall(number, header, data), "capset")
