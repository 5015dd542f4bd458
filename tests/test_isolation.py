"""Process isolation: hangs, crashes and memory blow-ups fail their own job, never the judge.

A candidate runs in a process of its own: its crash, exit or exhausted memory is a
correctness failure the judge reports; a hang is the pool's to time out. The static
guards would reject these kernels first, so they go through ``fakeraw``, a test backend
without guards. One pool serves the module; the adversarial jobs are submitted together
and each test then checks its own future.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
import textwrap
from pathlib import Path

import pytest

import fake_backend
from fake_backend import QUICK, SOFTMAX, load, softmax_op
from kdsl import cli
from kdsl.search.candidate import Candidate
from kdsl.search.executors import PoolExecutor
from kdsl.search.jobs import EvalJob

PARENT_ENVIRONMENT = {k: os.environ.get(k) for k in ("TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES")}
ISOLATED = dataclasses.replace(QUICK, timeout_s=90.0, memory_mb=3072)
HANG_TIMEOUT_S = 3.0
OWNED = Path(tempfile.gettempdir(), "kdsl-test-judge-owned")
OWNED.unlink(missing_ok=True)

ADVERSARIES = {
    "sleeps forever": ("""
        import time

        def kernel(inputs, outputs, sizes):
            time.sleep(10_000)
    """, "worker", "timed out after 3s"),
    "segfaults": ("""
        import ctypes

        def kernel(inputs, outputs, sizes):
            ctypes.string_at(0)
    """, "correctness", "the candidate process died: killed by signal SIGSEGV"),
    "exits": ("""
        import os

        def kernel(inputs, outputs, sizes):
            os._exit(3)
    """, "correctness", "the candidate process died: exited with code 3"),
    "aborts": ("""
        import os

        def kernel(inputs, outputs, sizes):
            os.abort()
    """, "correctness", "the candidate process died: killed by signal SIGABRT"),
    "answers with code for the judge": ("""
        import sys

        class Payload:
            def __reduce__(self):  # run by whoever unpickles it
                return (exec, ("import tempfile, pathlib; pathlib.Path(tempfile.gettempdir(),"
                               " 'kdsl-test-judge-owned').write_text('owned')",))

        host = sys.modules["kdsl.search.eval.candidate_main"]._Host
        host._run = lambda self, ins, outs, sizes: ("ok", Payload())

        def kernel(inputs, outputs, sizes):
            outputs["y"].copy_(inputs["x"].softmax(-1))
    """, "correctness", "tampering: a reply named builtins.exec"),
    "raises a 200 MB message": ("""
        def kernel(inputs, outputs, sizes):
            raise ValueError("x" * 200_000_000)
    """, "correctness", "kernel raised ValueError: xxxx"),
    "allocates without bound": ("""
        def kernel(inputs, outputs, sizes):
            hoard = []
            while True:
                hoard.append(bytearray(1 << 30))
    """, "correctness", "kernel raised MemoryError"),
}

INTERPRETED = SOFTMAX.replace("def kernel(inputs, outputs, sizes):\n", """\
def kernel(inputs, outputs, sizes):
    import os
    if os.environ.get("TRITON_INTERPRET") != "1" or os.environ.get("CUDA_VISIBLE_DEVICES") != "":
        raise RuntimeError("a cpu worker must run Triton interpreted and see no GPU")
""")


def job(source: str, config=ISOLATED, op=None, backend="fakepy") -> EvalJob:
    return EvalJob(op or load("softmax"), Candidate.of(backend, source=textwrap.dedent(source)),
                   config)


@pytest.fixture(scope="module")
def pool():
    with PoolExecutor(workers=2, initializer="fake_backend:register") as p:
        yield p


@pytest.fixture(scope="module")
def batch(pool):
    """Every adversary, an honest job between them, and the environment check, all at once."""
    futures = {}
    for name, (source, _, _) in ADVERSARIES.items():
        config = dataclasses.replace(ISOLATED, timeout_s=HANG_TIMEOUT_S) \
            if name == "sleeps forever" else ISOLATED
        futures[name] = pool.submit(job(source, config, backend="fakeraw"))
    futures["honest"] = pool.submit(job(SOFTMAX))
    futures["environment"] = pool.submit(job(INTERPRETED))
    return {name: f.result(timeout=600) for name, f in futures.items()}


@pytest.mark.parametrize("name", list(ADVERSARIES))
def test_an_adversary_fails_its_own_job(batch, name):
    r = batch[name]
    _, stage, expected = ADVERSARIES[name]
    assert (r.ok, r.stage) == (False, stage), r.message
    assert r.message.startswith(expected), r.message


def test_no_reply_runs_code_in_the_judge_nor_floods_it(batch, pool):
    assert not OWNED.exists()  # the payload would have written it, from the judge
    assert len(batch["raises a 200 MB message"].message) < 100_000
    assert pool.submit(job(SOFTMAX)).result(timeout=600).ok  # the worker still judges


def test_a_crash_leaves_the_candidates_traceback_in_the_message(batch):
    message = batch["segfaults"].message
    assert "Segmentation fault" in message and "<candidate>" in message
    hang = batch["sleeps forever"].artifacts["worker_log"]  # where the judge waited, in time
    assert "Timeout" in hang
    # and where the candidate hung, from its own process
    assert "the candidate process" in hang, hang[-3000:]
    candidate = hang[hang.index("the candidate process"):]
    assert "in kernel" in candidate, hang[-3000:]


def test_honest_jobs_pass_among_the_crashes(batch, pool):
    assert batch["honest"].ok, batch["honest"].message
    again = pool.submit(job(SOFTMAX)).result(timeout=600)
    assert again.ok and again.artifacts["cases_checked"] > 0


def test_cpu_workers_run_triton_interpreted_without_a_gpu(batch):
    assert batch["environment"].ok, batch["environment"].message
    assert {k: os.environ.get(k) for k in PARENT_ENVIRONMENT} == PARENT_ENVIRONMENT


def test_real_triton_runs_in_a_cpu_worker(pool):
    from kdsl import backends
    try:
        backends.get("triton")
    except Exception as e:
        pytest.skip(f"triton backend unavailable: {e}")
    config = dataclasses.replace(ISOLATED, max_case_elements=2048)
    r = pool.submit(EvalJob(softmax_op(), Candidate.of("triton"), config)).result(timeout=600)
    assert r.ok, r.message


def test_a_done_callback_may_submit_again(pool):
    import threading
    chained, submitted = [], threading.Event()

    def again(_):
        chained.append(pool.submit(job(fake_backend.IDENTITY)))
        submitted.set()

    first = pool.submit(job(SOFTMAX))
    first.add_done_callback(again)
    assert first.result(timeout=600).ok
    assert submitted.wait(60)
    assert chained[0].result(timeout=600).stage == "correctness"


def test_a_worker_that_cannot_start_fails_the_job_not_the_pool():
    with PoolExecutor(workers=1, initializer="no_such_module:register") as p:
        r = p.submit(job(SOFTMAX)).result(timeout=600)
    assert (r.stage, r.message) == ("worker", "the worker failed to start: worker exited with "
                                              "code 1")
    assert "No module named 'no_such_module'" in r.artifacts["worker_log"]


def test_futures_never_raise():
    import threading
    p = PoolExecutor(workers=1, initializer="fake_backend:register")
    unpicklable = Candidate.of("fakepy", {"variant": threading.Lock()})
    r = p.submit(EvalJob(load("softmax"), unpicklable, ISOLATED)).result()
    assert r.stage == "worker" and "cannot be sent to a worker" in r.message
    pending = p.submit(job(SOFTMAX))
    p.shutdown()
    assert pending.result(timeout=60).stage in ("worker", "correctness")
    late = p.submit(job(SOFTMAX)).result()
    assert (late.stage, late.message) == ("worker", "the executor is shut down")


# ---- kdsl eval -------------------------------------------------------------

def kdsl(*argv) -> int:
    return cli.main(list(argv))


def test_kdsl_eval_prints_each_stage_and_exits_0_when_correct(tmp_path, capsys):
    small = tmp_path / "softmax_small.kspec"
    small.write_text(open("specs/softmax.kspec").read().replace(
        "bench cpu: M=4096, N=4096", "bench cpu: M=64, N=128"))
    assert kdsl("eval", str(small), "--backend", "numpy") == 0
    out = capsys.readouterr().out
    for stage in ("render", "build", "guards", "correctness", "timing"):
        assert stage in out
    assert "max error" in out and "baseline" in out and "speedup" in out
    assert "FAILED" not in out


def test_kdsl_eval_exits_1_when_the_candidate_fails(tmp_path, capsys):
    source = tmp_path / "identity.py"
    source.write_text(textwrap.dedent("""
        def kernel(inputs, outputs, sizes):
            outputs["y"].copy_(inputs["x"])
    """))
    assert kdsl("eval", "specs/softmax.kspec", "--backend", "numpy", "--source", str(source),
                "--no-time") == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "failed at correctness" in out and "worst at" in out


@pytest.mark.parametrize("argv, message", [
    (["--backend", "nope"], "unknown backend 'nope'"),
    (["--backend", "numpy", "--genome", "{not json"], "--genome is not valid JSON"),
    (["--backend", "numpy", "--genome", "[1, 2]"], "--genome must be a JSON object"),
    (["--backend", "numpy", "--source", "/no/such/file.py"], "cannot read --source"),
    (["--backend", "numpy", "--op", "nope"], "no op 'nope'"),
])
def test_kdsl_eval_bad_usage_exits_2(argv, message, capsys):
    assert kdsl("eval", "specs/softmax.kspec", *argv) == 2
    assert message in capsys.readouterr().err


def test_kdsl_eval_bad_spec_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.kspec"
    bad.write_text("op broken\n  dims M\n  in x: f33 [M]\n")
    assert kdsl("eval", str(bad), "--backend", "numpy") == 2
    assert "error:" in capsys.readouterr().err


def test_the_spare_candidate_process_is_stopped_while_a_cpu_is_timed():
    from kdsl.search.eval import sandbox

    def stopped(box, want: bool) -> bool:
        """Whether it reaches the state wanted within a second (a signal takes a moment)."""
        import time
        for _ in range(50):
            with open(f"/proc/{box.process.pid}/status") as f:
                state = next(ln.split()[1] for ln in f if ln.startswith("State:"))
            if (state == "T") == want:
                return True
            time.sleep(0.02)
        return False

    sandbox.start_spare("cpu", None)
    try:
        box = sandbox._SPARE[("cpu", None)]
        with sandbox.spares_paused("cuda"):  # a GPU's timing leaves it to get ready
            assert not stopped(box, True)
        with sandbox.spares_paused("cpu"):
            assert stopped(box, True)
        assert stopped(box, False)
    finally:
        sandbox.stop_spares()


def test_the_forkserver_preloads_nothing_bound_to_a_device():
    """Triton decides at each decoration whether to interpret: imported in the server it
    would be decorated in the judge's environment, not the candidate's."""
    import subprocess
    import sys

    from kdsl.search.eval import zygote
    code = (f"import sys\nfor m in {zygote.PRELOAD!r}: __import__(m)\n"
            f"print([m for m in {zygote.DEVICE_BOUND!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "[]"


def test_candidate_processes_are_forked_from_the_server_not_the_judge():
    from kdsl.search.eval import sandbox
    box = sandbox.Sandbox("cpu", None)
    try:
        box.ready()
        with open(f"/proc/{box.process.pid}/stat") as f:
            parent = int(f.read().rsplit(")", 1)[1].split()[1])
        assert parent != os.getpid()
        with open(f"/proc/{parent}/cmdline", "rb") as f:
            assert b"forkserver" in f.read()
    finally:
        box.stop()


def test_a_steps_clock_runs_until_every_task_is_seen_stopped(monkeypatch):
    """A step's wall ends when the judge has seen every task of the candidate stopped, not
    at the signal: until the thread that takes a group's stop runs, the others run on (the
    red team's starved stop-taker). The wait is on the clock, whatever makes it long."""
    import time
    from kdsl.search.eval import sandbox, stopping
    box = sandbox.Sandbox("cpu", None)
    try:
        box.ready()
        real = stopping.settle

        def slow(pid, outside=()):
            time.sleep(0.2)
            return real(pid, outside)

        monkeypatch.setattr(stopping, "settle", slow)
        box.call("probe", 1)
        assert box.last_wall_ms >= 200
    finally:
        box.stop()


def test_every_thread_is_sent_its_own_stop():
    """After the group's SIGSTOP each thread gets one of its own (tgkill), so a thread
    running on another core stops at once, whichever thread takes the group's."""
    import subprocess
    import sys
    import time
    from kdsl.search.eval import stopping
    code = textwrap.dedent("""
        import threading, time
        def spin():
            while True:
                pass
        for _ in range(3):
            threading.Thread(target=spin, daemon=True).start()
        time.sleep(60)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(os.listdir(f"/proc/{p.pid}/task")) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        sent = []
        real = stopping._tgkill
        stopping._tgkill = lambda tgid, tid, sig: sent.append(tid) or real(tgid, tid, sig)
        try:
            stopping.halt(p.pid)
        finally:
            stopping._tgkill = real
        assert sorted(sent) == sorted(int(t) for t in os.listdir(f"/proc/{p.pid}/task"))
        assert len(sent) == 4
        stopping.settle(p.pid)  # (every task stopped: it returns)
    finally:
        p.kill()
        p.wait()


def test_a_task_continued_after_it_was_seen_stopped_is_stopped_again():
    """The kernel itself can continue a task the judge has seen stopped (a parent-death
    signal of SIGCONT, fired when a parent still exiting at the stop finishes): the wait
    ends only when a whole pass, every task read again, finds them all stopped, and what
    runs again is stopped again."""
    import signal
    import subprocess
    import sys
    import time
    from kdsl.search.eval import stopping
    code = "while True:\n    pass\n"
    p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    real = stopping._tasks
    calls = []

    def continued_after_the_first_pass(pid, outside):
        calls.append(pid)
        if len(calls) == 2:  # the whole pass that would have ended the wait
            os.kill(p.pid, signal.SIGCONT)
            time.sleep(0.05)
        return real(pid, outside)

    try:
        time.sleep(0.2)
        stopping.halt(p.pid)
        stopping._tasks = continued_after_the_first_pass
        try:
            stopping.settle(p.pid)
        finally:
            stopping._tasks = real
        assert len(calls) >= 3
        with open(f"/proc/{p.pid}/stat") as f:
            assert f.read().rpartition(")")[2].split()[0] == "T"
    finally:
        p.kill()
        p.wait()


def processes_named(marker: str) -> set[int]:
    """The live processes named ``marker`` (PR_SET_NAME): a candidate can write no file the
    test could read, so what it forks is found by the name it gives itself."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                name, state = f.read().split("(", 1)[1].rsplit(")", 1)
            if name == marker and state.split()[0] != "Z":
                found.add(int(pid))
        except (OSError, IndexError):
            pass
    return found


def gone_soon(marker: str, within_s: float = 10.0) -> bool:
    """Whether every process named ``marker`` is gone within ``within_s`` (those left are
    killed, so that a failing test leaves nothing running)."""
    import time
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not processes_named(marker):
            return True
        time.sleep(0.1)
    for pid in processes_named(marker):
        os.kill(pid, 9)
    return False


def test_a_candidate_whose_process_exits_while_a_child_answers_for_it_fails(pool):
    """The candidate's process forks and exits; the child, holding its pipe, answers every
    later request. Listed from the leader, the child was below no process the judge looks at,
    so it was never stopped and outlived the job (the red team's orphan). The group outlives
    its leader and is signalled by its id, and a request answered after the leader exited
    fails the candidate."""
    marker = f"kdslorph{os.getpid() % 10000}"
    source = SOFTMAX.replace("def kernel(inputs, outputs, sizes):\n", f"""\
def kernel(inputs, outputs, sizes):
    import ctypes, os, signal, time
    if not globals().get("forked"):
        globals()["forked"] = True
        # (the group, orphaned with a member stopped, is sent SIGHUP and SIGCONT)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        leader = os.getpid()
        if os.fork():
            os._exit(0)
        ctypes.CDLL(None).prctl(15, {marker.encode()!r}, 0, 0, 0)  # PR_SET_NAME
        end = time.monotonic() + 5
        while os.path.exists(f"/proc/{{leader}}/stat") and time.monotonic() < end:
            time.sleep(0.001)  # until the leader is reaped: the judge's side sees it gone
""")
    r = pool.submit(job(source, backend="fakeraw")).result(timeout=600)
    assert not r.ok and "exited" in r.message, r.message
    assert gone_soon(marker), "the child that answered for the candidate outlived it"


def test_a_hung_candidate_dies_with_its_judge():
    """The judge killed mid-hang (a pool worker timed out): its forkserver and the hung
    candidate process go with it."""
    import signal
    import subprocess
    import sys
    import time
    code = textwrap.dedent("""
        import os, sys, time
        from kdsl.search.eval import sandbox
        if __name__ == "__main__":
            box = sandbox.Sandbox("cpu", None)
            box.ready()
            print(box.process.pid, flush=True)
            time.sleep(600)
    """)
    judge = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        candidate = int(judge.stdout.readline())
        with open(f"/proc/{candidate}/stat") as f:
            server = int(f.read().rsplit(")", 1)[1].split()[1])
    finally:
        judge.send_signal(signal.SIGKILL)
        judge.wait()

    def gone(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie is gone too

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (gone(candidate) and gone(server)):
        time.sleep(0.1)
    assert gone(candidate) and gone(server)


@pytest.mark.parametrize("leaves", ["stays", "setsid", "chain"],
                         ids=["in its group", "setsid", "a chain of forks"])
def test_a_process_the_candidate_forks_dies_with_it(pool, leaves):
    """A forked child is outside the candidate's process, but not outside its process
    group, nor (if it leaves the group) outside its descendants: stopped with it between
    requests, and killed with it at the end. A chain whose every link forks the next and
    exits (each one listed is gone when signalled) is caught too. (The candidate can write
    no file the test could read: the child is found by the name it gives itself, while the
    job runs.)"""
    import threading
    import time
    marker = f"kdslfork{os.getpid() % 10000}{leaves[:2]}"
    source = SOFTMAX.replace("def kernel(inputs, outputs, sizes):\n", f"""\
def kernel(inputs, outputs, sizes):
    import ctypes, os, signal, time
    if not globals().get("forked"):
        globals()["forked"] = True
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # no zombie links to wait for
        child = os.fork()
        if child == 0:
            ctypes.CDLL(None).prctl(15, {marker.encode()!r}, 0, 0, 0)  # PR_SET_NAME
            if {leaves!r} != "stays":
                try:
                    os.setsid()
                except OSError:  # refused where the seccomp filter is on
                    pass
            while True:
                if {leaves!r} == "chain":
                    end = time.monotonic() + 0.005
                    while time.monotonic() < end:
                        pass
                    if os.fork():
                        os._exit(0)
                else:
                    time.sleep(1)
""")

    seen, stop = set(), threading.Event()

    def watch():
        while not stop.is_set():
            seen.update(processes_named(marker))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        r = pool.submit(job(source, backend="fakeraw")).result(timeout=600)
    finally:
        stop.set()
        watcher.join()
    assert r.ok, r.message
    assert seen, "the candidate's child was never seen"
    assert gone_soon(marker), "the forked child outlived its candidate"


def test_the_stops_read_a_proc_file_to_its_end(tmp_path):
    """A thread's list of children runs past a page with a few thousand of them: read short,
    the stops would miss the processes listed after the cut."""
    from kdsl.search.eval import stopping
    listed = " ".join(str(100000 + i) for i in range(30000)).encode()  # 210 KB
    path = tmp_path / "children"
    path.write_bytes(listed)
    assert stopping._read(str(path)) == listed  # noqa: SLF001
    assert stopping._read(str(tmp_path / "gone")) == b""  # noqa: SLF001
    assert stopping._state(f"/proc/{os.getpid()}/stat") in ("R", "S")  # noqa: SLF001


def test_a_thread_named_to_mislead_the_stops_is_read_by_its_state():
    """A thread's name is the candidate's to choose (prctl, up to 15 bytes, any but NUL):
    ')' and a fake state, newlines, bytes that are no UTF-8 (a text read raised
    UnicodeDecodeError on them). The state is the kernel's letter after the last ')'."""
    import ctypes
    import threading

    from kdsl.search.eval import stopping
    names = [b"a) T (1", b"x\n) T 1\n", b"\xff\xfe)) t", b")" * 15]
    tids, done = [], threading.Event()

    def named(name):
        ctypes.CDLL(None).prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME
        tids.append(threading.get_native_id())
        done.wait()

    threads = [threading.Thread(target=named, args=(n,)) for n in names]
    for t in threads:
        t.start()
    try:
        while len(tids) < len(names):
            threading.Event().wait(0.001)
        for tid in tids:
            stat = f"/proc/{os.getpid()}/task/{tid}/stat"
            assert stopping._state(stat) in ("S", "R")  # noqa: SLF001
            assert stopping._running(os.getpid(), str(tid))  # noqa: SLF001
    finally:
        done.set()
        for t in threads:
            t.join()
