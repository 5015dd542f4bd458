"""The polled wait of a timed step's two ends (``search.eval.spin``)."""
import multiprocessing
import threading
import time

from kdsl.search.eval import spin


def test_only_a_gpus_timed_requests_are_polled_for():
    assert spin.polls("cuda", ("steps", [0, 1]))
    assert spin.polls("cuda", ("probe", 8))
    assert not spin.polls("cpu", ("steps", [0, 1]))  # the candidate's cores: left to it
    assert not spin.polls("cuda", ("load", "triton", None, "", "cuda"))  # a compile
    assert not spin.polls("cuda", None)
    # the candidate also polls after the inputs are mapped: the first timed step follows
    assert spin.polls_after("cuda", ("sets", [], {})) and not spin.polls("cuda", ("sets",))
    assert not spin.polls_after("cuda", ("load", "triton", None, "", "cuda"))


def test_the_judges_wait_ends_when_the_reply_is_there():
    a, b = multiprocessing.Pipe()
    threading.Timer(0.01, b.send, ("ok",)).start()
    start = time.perf_counter()
    spin.judge_wait(a)
    assert 0.005 < time.perf_counter() - start < spin.JUDGE_S
    assert a.recv() == "ok"


def test_the_judges_wait_gives_up_to_the_blocking_read():
    a, _b = multiprocessing.Pipe()
    start = time.perf_counter()
    spin.judge_wait(a)
    assert spin.JUDGE_S <= time.perf_counter() - start < spin.JUDGE_S + 0.2
    assert not a.poll(0)


def test_the_candidates_wait_is_bounded_by_its_own_cpu_time():
    a, b = multiprocessing.Pipe()
    start = time.thread_time()
    spin.candidate_wait(a)  # nothing comes: it polls its budget away, then returns
    assert time.thread_time() - start >= spin.CANDIDATE_CPU_S
    b.send(1)
    start = time.thread_time()
    spin.candidate_wait(a)  # data waiting: at once
    assert time.thread_time() - start < spin.CANDIDATE_CPU_S
