"""The candidate's process confined at the OS level (``search/eval/lockdown.py``).

A kernel on ``fakeraw`` (no static guards: it stands for native code that already reached
the interpreter) tries what a process running as the judge's user could do to the judge,
the forkserver, the sources and the records, and reports what worked by raising. Each
layer is asserted where the machine lets it be set up (a container without
``CAP_SYS_ADMIN`` refuses the mount namespace: the layer then says why it is off).
"""
from __future__ import annotations

import os
import platform
import tempfile
import textwrap
from pathlib import Path

import pytest

from fake_backend import QUICK, load
from kdsl.search.candidate import Candidate
from kdsl.search.eval import lockdown
from kdsl.search.executors import PoolExecutor
from kdsl.search.jobs import EvalJob

OUTSIDE = Path(tempfile.gettempdir(), f"kdsl-test-lockdown-{os.getpid()}")
REPO_FILE = Path(lockdown.__file__).with_name("lockdown-probe.txt")
SHM_FILE = Path("/dev/shm", f"kdsl-test-lockdown-{os.getpid()}")
SYSV_KEY = 0x6B640000 + os.getpid() % 0xFFFF
ARCH = platform.machine() != "x86_64"
CLONE = lockdown.SYSCALLS["clone"][ARCH]
TIMER_CREATE = lockdown.SYSCALLS["timer_create"][ARCH]
ADD_KEY = lockdown.SYSCALLS["add_key"][ARCH]

ESCAPES = f'''
import os, socket


def kernel(inputs, outputs, sizes):
    zygote = os.getppid()
    with open(f"/proc/{{zygote}}/stat") as f:
        judge = int(f.read().rsplit(")", 1)[1].split()[1])
    done, refused = [], []

    def attempt(name, action):
        try:
            action()
            done.append(name)
        except OSError as e:
            refused.append(f"{{name}}={{type(e).__name__}}")

    def write(path):
        with open(path, "w") as f:
            f.write("written by a candidate")

    attempt("write_outside", lambda: write({str(OUTSIDE)!r}))
    attempt("write_sources", lambda: write({str(REPO_FILE)!r}))
    attempt("write_own_tmp", lambda: write(os.path.join(os.environ["TMPDIR"], "mine")))
    attempt("judge_memory", lambda: open(f"/proc/{{judge}}/mem", "rb").close())
    attempt("server_memory", lambda: open(f"/proc/{{zygote}}/mem", "rb").close())
    attempt("signal_judge", lambda: os.kill(judge, 0))
    attempt("signal_own_group", lambda: os.kill(0, 0))
    # SIGCONT throws away a pending SIGSTOP (harmless here: nothing is stopped)
    attempt("sigcont_self", lambda: os.kill(os.getpid(), 18))
    attempt("sigcont_group", lambda: os.kill(0, 18))
    attempt("sigcont_thread", lambda: __import__("signal").pthread_kill(
        __import__("threading").get_ident(), 18))

    def sigcont_queued():  # rt_sigqueueinfo, through the C library's sigqueue
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.sigqueue(os.getpid(), 18, ctypes.c_void_p(0)) < 0:
            raise OSError(ctypes.get_errno(), "sigqueue")

    attempt("sigcont_queued", sigcont_queued)

    def pdeathsig(sig):  # the signal the kernel sends it when its parent exits
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, sig, 0, 0, 0) < 0:  # PR_SET_PDEATHSIG
            raise OSError(ctypes.get_errno(), "prctl")

    attempt("pdeathsig_cont", lambda: pdeathsig(18))
    attempt("pdeathsig_kill", lambda: pdeathsig(9))  # (what it had: its parent lives on)
    attempt("leave_group", lambda: os.setpgid(0, 0))
    attempt("inet_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
    attempt("unix_socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close())

    def forkserver():  # the server every candidate is forked from: it forks what it is sent
        from multiprocessing import forkserver as fs
        with socket.socket(socket.AF_UNIX) as c:
            c.connect(fs._forkserver._forkserver_address)

    attempt("connect_forkserver", forkserver)

    def clone_parent():  # a sibling of its own process: the forkserver's child
        import ctypes
        pid = ctypes.CDLL(None, use_errno=True).syscall({CLONE}, 0x8000 | 17, 0, 0, 0, 0)
        if pid == 0:
            os._exit(0)
        if pid < 0:
            raise OSError(ctypes.get_errno(), "clone")

    def start_thread():
        import threading
        t = threading.Thread(target=lambda: None)
        t.start()
        t.join()

    def fork():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)

    def clone_exit_sigcont():  # a child whose exit sends its parent SIGCONT
        import ctypes
        pid = ctypes.CDLL(None, use_errno=True).syscall({CLONE}, 18, 0, 0, 0, 0)
        if pid == 0:
            os._exit(0)
        if pid < 0:
            raise OSError(ctypes.get_errno(), "clone")
        os.waitpid(pid, 0)

    def timer_create():  # a kernel timer that could fire SIGCONT at its stopped process
        import ctypes
        timer = ctypes.c_int()
        if ctypes.CDLL(None, use_errno=True).syscall({TIMER_CREATE}, 1, None,
                                                     ctypes.byref(timer)) < 0:
            raise OSError(ctypes.get_errno(), "timer_create")

    def async_signal():  # the kernel signalling a pid of its choice when a pipe is ready
        import fcntl
        r, w = os.pipe()
        try:
            fcntl.fcntl(r, 10, 18)  # F_SETSIG: SIGCONT
        finally:
            os.close(r)
            os.close(w)

    def async_owner():
        import fcntl
        r, w = os.pipe()
        try:
            fcntl.fcntl(r, 8, judge)  # F_SETOWN: the judge
        finally:
            os.close(r)
            os.close(w)

    attempt("clone_parent", clone_parent)
    attempt("clone_exit_sigcont", clone_exit_sigcont)
    attempt("timer_create", timer_create)
    attempt("async_signal", async_signal)
    attempt("async_owner", async_owner)
    attempt("start_thread", start_thread)
    attempt("fork", fork)

    # the kernel's settings and other processes' files: opened for writing, never written
    def open_rw(path):
        open(path, "r+").close()

    attempt("open_core_pattern", lambda: open_rw("/proc/sys/kernel/core_pattern"))
    attempt("open_judge_oom", lambda: open_rw(f"/proc/{{judge}}/oom_score_adj"))
    attempt("write_own_comm", lambda: write("/proc/self/comm"))
    attempt("write_shm", lambda: write({str(SHM_FILE)!r}))

    import resource
    attempt("limits_of_judge", lambda: resource.prlimit(judge, resource.RLIMIT_CORE))
    attempt("limits_of_self", lambda: resource.prlimit(0, resource.RLIMIT_CORE))
    attempt("pin_judge", lambda: os.sched_setaffinity(judge, os.sched_getaffinity(judge)))
    attempt("pin_self", lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
    attempt("renice_judge", lambda: os.setpriority(
        os.PRIO_PROCESS, judge, os.getpriority(os.PRIO_PROCESS, judge)))
    attempt("renice_group", lambda: os.setpriority(
        os.PRIO_PGRP, 0, os.getpriority(os.PRIO_PGRP, 0)))
    attempt("renice_self", lambda: os.setpriority(
        os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0)))

    def dumpable():
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(4, 1, 0, 0, 0) < 0:  # PR_SET_DUMPABLE
            raise OSError(ctypes.get_errno(), "prctl")

    attempt("dumpable", dumpable)

    # what outlives it: files in /dev, System V memory, keys, leases, loop devices
    attempt("write_dev", lambda: write("/dev/kdsl-test-lockdown"))

    def sysv_segment():
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.shmget({SYSV_KEY}, 4096, 0o1600) < 0:  # IPC_CREAT | 0600
            raise OSError(ctypes.get_errno(), "shmget")

    def add_key():
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall({ADD_KEY}, b"user", b"kdsl-test", b"x", 1, -4) < 0:  # @u
            raise OSError(ctypes.get_errno(), "add_key")

    def lease():
        import fcntl
        with open("/etc/hostname") as f:
            fcntl.fcntl(f.fileno(), 1024, fcntl.F_RDLCK)  # F_SETLEASE

    def loop_device():
        import fcntl
        fd = os.open("/dev/loop-control", os.O_RDWR)
        try:
            fcntl.ioctl(fd, 0x4C82)  # LOOP_CTL_GET_FREE
        finally:
            os.close(fd)

    attempt("sysv_segment", sysv_segment)
    attempt("add_key", add_key)
    attempt("lease", lease)
    attempt("loop_device", loop_device)
    raise RuntimeError(f"done={{sorted(done)}} refused={{sorted(refused)}}")
'''


@pytest.fixture(scope="module")
def result():
    OUTSIDE.unlink(missing_ok=True)
    REPO_FILE.unlink(missing_ok=True)
    SHM_FILE.unlink(missing_ok=True)
    with PoolExecutor(workers=1, initializer="fake_backend:register") as pool:
        r = pool.submit(EvalJob(load("softmax"), Candidate.of(
            "fakeraw", source=textwrap.dedent(ESCAPES)), QUICK)).result(timeout=600)
    yield r
    OUTSIDE.unlink(missing_ok=True)
    REPO_FILE.unlink(missing_ok=True)
    SHM_FILE.unlink(missing_ok=True)


def layer(r, name: str) -> str:
    return r.artifacts.get("confinement", {}).get(name, "missing")


def done(r) -> set[str]:
    text = r.message.split("done=", 1)[1].split(" refused=", 1)[0]
    return set(eval(text))  # noqa: S307 - the list the test's own kernel printed


def test_every_layer_is_reported(result):
    conf = result.artifacts["confinement"]
    assert set(conf) == {"filesystem", "seccomp", "capabilities"}, conf
    assert all(v == "on" or v.startswith("off: ") for v in conf.values()), conf


def test_the_candidate_writes_only_its_own_folder(result):
    if layer(result, "filesystem") != "on":
        pytest.skip(f"no mount namespace here: {layer(result, 'filesystem')}")
    assert "write_own_tmp" in done(result), result.message
    assert not {"write_outside", "write_sources"} & done(result), result.message
    assert not OUTSIDE.exists() and not REPO_FILE.exists()


def test_the_forkserver_refuses_it(result):
    """Connected, it could have had a process of its own, unconfined and never stopped (a
    review: one spun while the baseline was timed and every later speedup of the op read
    31x); the server's socket is covered in its mount namespace."""
    if layer(result, "filesystem") != "on":
        pytest.skip(f"no mount namespace here: {layer(result, 'filesystem')}")
    assert "connect_forkserver" not in done(result), result.message
    assert "connect_forkserver=ConnectionRefusedError" in result.message, result.message


def test_the_judges_and_the_servers_memory_are_closed(result):
    if layer(result, "capabilities") != "on":
        pytest.skip(f"capabilities kept: {layer(result, 'capabilities')}")
    assert not {"judge_memory", "server_memory"} & done(result), result.message


def test_signals_reach_only_its_own_group_it_stays_in_and_sockets_are_local(result):
    if layer(result, "seccomp") != "on":
        pytest.skip(f"no seccomp filter here: {layer(result, 'seccomp')}")
    assert {"signal_own_group", "unix_socket"} <= done(result), result.message
    assert not {"signal_judge", "inet_socket", "leave_group"} & done(result), result.message


def test_it_can_never_continue_itself(result):
    """SIGCONT (kill, tgkill, sigqueue) is refused even to itself: sent by a thread still
    running after the judge's SIGSTOP, it threw the pending stop away. So is SIGCONT as the
    signal its parent's exit sends it (prctl's PR_SET_PDEATHSIG), which the kernel sends
    past any filter."""
    if layer(result, "seccomp") != "on":
        pytest.skip(f"no seccomp filter here: {layer(result, 'seccomp')}")
    assert not {"sigcont_self", "sigcont_group", "sigcont_thread", "sigcont_queued",
                "pdeathsig_cont"} & done(result), result.message
    assert "pdeathsig_kill" in done(result), result.message


def test_what_it_starts_stays_below_it_and_threads_and_forks_still_work(result):
    """clone3 is answered ENOSYS (its flags are out of a filter's reach) and the C library
    falls back to clone, whose flags are read: CLONE_PARENT refused, a thread and a fork not."""
    if layer(result, "seccomp") != "on":
        pytest.skip(f"no seccomp filter here: {layer(result, 'seccomp')}")
    assert {"start_thread", "fork"} <= done(result), result.message
    assert "clone_parent" not in done(result), result.message


def test_nothing_the_kernel_sends_later_can_wake_it_or_reach_the_judge(result):
    """A signal the kernel sends for the process later (a timer, a clone's exit signal, a
    ready descriptor) could be SIGCONT, which undoes the judge's stop, or go to the judge."""
    if layer(result, "seccomp") != "on":
        pytest.skip(f"no seccomp filter here: {layer(result, 'seccomp')}")
    assert not {"clone_exit_sigcont", "timer_create", "async_signal", "async_owner"} \
        & done(result), result.message


def test_the_kernels_settings_and_other_processes_files_are_read_only(result):
    """Root owns /proc/sys and every /proc/PID: a candidate (a red team, 2026-12-06) set
    kernel.core_pattern to a program of its own that the kernel ran as root outside every
    layer, and could set the judge's OOM score; the kernel's views are mounted read-only."""
    if layer(result, "filesystem") != "on":
        pytest.skip(f"no mount namespace here: {layer(result, 'filesystem')}")
    assert not {"open_core_pattern", "open_judge_oom", "write_own_comm"} & done(result), \
        result.message
    assert "open_core_pattern=OSError" in result.message, result.message


def test_its_shared_memory_is_its_own_on_the_cpu(result):
    """Files it leaves in /dev/shm went to the machine's, where a later candidate found
    them (a planted header, a cache of answers); on the CPU its /dev/shm is its own."""
    if layer(result, "filesystem") != "on":
        pytest.skip(f"no mount namespace here: {layer(result, 'filesystem')}")
    assert "write_shm" in done(result), result.message
    assert not SHM_FILE.exists()


def test_it_sets_limits_affinity_and_priority_of_itself_alone(result):
    """A red team set the next candidate's address-space limit (it died at its first
    allocation) and the judge's CPU-time limit (killed) through prlimit."""
    if layer(result, "seccomp") != "on":
        pytest.skip(f"no seccomp filter here: {layer(result, 'seccomp')}")
    assert {"limits_of_self", "pin_self", "renice_self"} <= done(result), result.message
    assert not {"limits_of_judge", "pin_judge", "renice_judge", "renice_group",
                "dumpable"} & done(result), result.message


def test_nothing_it_makes_outlives_it(result):
    """A red team's second pass left files in /dev, a System V segment, a key in the user's
    keyring and a loop device behind, and held a lease on a file: /dev is read-only, System
    V objects (on the CPU) are its own namespace's, keyrings, leases and loop ioctls
    refused."""
    import ctypes
    if layer(result, "filesystem") == "on":
        assert "write_dev" not in done(result), result.message
        assert not Path("/dev/kdsl-test-lockdown").exists()
        assert "sysv_segment" in done(result), result.message
        assert ctypes.CDLL(None).shmget(SYSV_KEY, 0, 0) < 0  # not in the machine's
    if layer(result, "seccomp") == "on":
        assert not {"add_key", "lease", "loop_device"} & done(result), result.message


@pytest.mark.parametrize("arch", sorted(lockdown.AUDIT_ARCH))
def test_the_seccomp_program_is_well_formed(arch):
    program = lockdown.seccomp_program(4242, arch)
    assert len(program) < 128  # (every jump within 255 instructions)
    for i, (code, jt, jf, k) in enumerate(program):
        assert i + 1 + max(jt, jf) < len(program) or code == lockdown.RET_K
    returns = {k for code, _, _, k in program if code == lockdown.RET_K}
    assert returns == {lockdown.RET_ALLOW, lockdown.RET_EPERM, lockdown.RET_ENOSYS}
    compared = {k for code, _, _, k in program if code == lockdown.JEQ_K}
    index = 0 if arch == "x86_64" else 1
    assert {lockdown.SYSCALLS[n][index] for n in lockdown.DENIED} <= compared
    assert {lockdown.SYSCALLS[n][index] for n in lockdown.SELF_ONLY} <= compared
    assert {4242, (-4242) & 0xFFFFFFFF} <= compared


TRUNCATES = '''
import os
import torch


def kernel(inputs, outputs, sizes):
    outputs["y"].copy_(torch.softmax(inputs["x"], dim=1))
    for fd in os.listdir("/proc/self/fd"):  # the memory files of what it was handed
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("/dev/shm/"):
            os.ftruncate(int(fd), 0)
'''


def test_memory_cut_under_the_judge_is_tampering_not_a_crash():
    """Cut to nothing, the files of the tensors it was handed made the judge's next read of
    its own mapping a SIGBUS, and the worker died (a red team's second pass); the judge
    looks at their sizes after every request, while the candidate is stopped."""
    with PoolExecutor(workers=1, initializer="fake_backend:register") as pool:
        r = pool.submit(EvalJob(load("softmax"), Candidate.of(
            "fakeraw", source=TRUNCATES), QUICK)).result(timeout=600)
    assert not r.ok
    assert "tampering: a shared memory file" in r.message, r.message


CUDA_PROC = '''
import os, sys, tempfile
from kdsl.search.eval import lockdown
try:
    lockdown.read_only_filesystem((tempfile.mkdtemp(),), cuda=True)
except OSError as e:
    print("SKIP", e)
    sys.exit(0)
out = []
for path, mode in (("/proc/self/comm", "w"), ("/proc/thread-self/comm", "w"),
                   ("/proc/sys/kernel/core_pattern", "r+"),
                   ("/proc/%d/oom_score_adj" % os.getppid(), "r+"),
                   ("/proc/%d/autogroup" % os.getppid(), "r+")):
    try:
        open(path, mode).close()
        out.append(path.replace(str(os.getppid()), "PARENT") + "=opened")
    except OSError as e:
        out.append(path.replace(str(os.getppid()), "PARENT") + "=" + type(e).__name__)
print(" ".join(out))
'''


def test_on_a_gpu_only_the_processs_own_proc_files_stay_writable():
    """CUDA fails to start on a read-only /proc (an H100, 2026-12-06: "Error 304: OS call
    failed"); there the process's own /proc/PID stays writable, and every other process's
    (its OOM score, its autogroup's niceness) and the kernel's settings are read-only."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", CUDA_PROC], capture_output=True, text=True,
                       timeout=120)
    if r.stdout.startswith("SKIP"):
        pytest.skip(r.stdout.strip())
    for opened in ("/proc/self/comm", "/proc/thread-self/comm"):
        assert f"{opened}=opened" in r.stdout, r.stdout + r.stderr
    for refused in ("/proc/sys/kernel/core_pattern", "/proc/PARENT/oom_score_adj",
                    "/proc/PARENT/autogroup"):
        assert f"{refused}=OSError" in r.stdout, r.stdout + r.stderr


CUDA_PROC_CHOICE = '''
import os, sys, tempfile
from kdsl.search.eval import candidate_main, lockdown
private = tempfile.mkdtemp()
os.environ[candidate_main.CUDA_PROC_ENV] = lockdown.PROC_ALL_BUT_KERNEL
known = candidate_main._cuda_proc(private, {"cuda": True})
os.environ[candidate_main.CUDA_PROC_ENV] = "anything else"
tried = candidate_main._cuda_proc(private, {"cuda": True})
print("KNOWN", known == lockdown.PROC_ALL_BUT_KERNEL, "TRIED", tried)
'''


def test_a_gpu_candidates_proc_is_the_strictest_cuda_starts_under():
    """Tried once in a forked child (confined as strictly as can be, then starting CUDA):
    here, with no GPU, CUDA does not start, so the looser mode is taken; a mode the judge
    already knows (from an earlier process's report) is taken without trying."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", CUDA_PROC_CHOICE], capture_output=True,
                       text=True, timeout=300)
    assert "KNOWN True" in r.stdout, r.stdout + r.stderr
    assert f"TRIED {lockdown.PROC_ALL_BUT_KERNEL}" in r.stdout, r.stdout + r.stderr
