"""What a pool worker's environment is before it imports anything heavy."""
from kdsl.search.worker import WorkerKind


def test_compile_threads_share_the_hosts_cpus(monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    env = WorkerKind("cuda", None).environment(cpus=3)
    assert env["TORCHINDUCTOR_COMPILE_THREADS"] == "3"
    assert env["TRITON_INTERPRET"] is None
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in WorkerKind("cpu", 1024).environment(cpus=0)
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in WorkerKind("cuda", None).environment()


def test_a_users_compile_threads_stand(monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "7")
    env = WorkerKind("cpu", 1024).environment(cpus=2)
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in env  # (left as the user set it)
    assert env["TRITON_INTERPRET"] == "1" and env["CUDA_VISIBLE_DEVICES"] == ""


def test_the_pool_gives_each_worker_its_share(monkeypatch, tmp_path):
    from kdsl.search import executors
    started = []

    class Process:
        def __init__(self, target, args, name, daemon):
            started.append(args)

        def start(self):
            pass

    monkeypatch.setattr(executors.os, "sched_getaffinity", lambda pid: set(range(16)))
    with executors.PoolExecutor(workers=5) as pool:
        monkeypatch.setattr(pool._ctx, "Process", Process)
        pool._start(WorkerKind("cuda", None))
        pool._pool.clear()
    assert started[0][-1] == 3  # 16 CPUs among 5 workers


def test_the_worker_waits_in_openmp_as_its_candidates_do(monkeypatch):
    from kdsl.search.eval.zygote import SERVER_ENVIRONMENT
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert WorkerKind("cpu", 1024).environment()["OMP_WAIT_POLICY"] == \
        SERVER_ENVIRONMENT["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert "OMP_WAIT_POLICY" not in WorkerKind("cpu", 1024).environment()  # the user's
