"""How many input sets a bench point is timed on: two where they fit in the device's
memory, one where they do not (and then the evaluation still runs, checked)."""
from __future__ import annotations

from kdsl import spec as spec_mod
from kdsl.search.eval import timing


def test_two_sets_where_they_fit_one_where_they_do_not(monkeypatch):
    op = spec_mod.find_op(spec_mod.load("specs/softmax.kspec"), None)
    case = timing.bench_case(op, timing.bench_point(op, "cpu"), "f32")
    from kdsl.search.eval.floor import allocated_bytes
    held = allocated_bytes(op, case.sizes, case.dtype)
    need = held * (timing.SET_COPIES * 2 + 2)
    monkeypatch.setattr(timing, "device_memory", lambda device: 2 * need)
    assert timing.input_sets(op, case, "cpu") == 2
    monkeypatch.setattr(timing, "device_memory", lambda device: 2 * need - 1)
    assert timing.input_sets(op, case, "cpu") == 1


def test_a_point_too_large_for_two_sets_is_timed_on_one_and_checked(monkeypatch):
    from kdsl.search.candidate import Candidate
    from kdsl.search.eval.evaluator import evaluate
    from kdsl.search.jobs import EvalConfig, EvalJob
    op = spec_mod.find_op(spec_mod.load("specs/softmax.kspec"), None)
    monkeypatch.setattr(timing, "device_memory", lambda device: 1)
    res = evaluate(EvalJob(op, Candidate.of("c", {}), EvalConfig(seeds=(1,), reps=3,
                                                                 warmup=1)))
    assert res.ok, res.message
    assert res.artifacts["input_sets"] == 1
    assert len(res.artifacts["checked_calls_ms"]) == 1


def test_four_sets_go_through_the_candidates_process(monkeypatch):
    """The sets a small point gets on a GPU, through the isolated candidate process (here
    on the CPU): each set's outputs checked once, every step one call on each set."""
    from kdsl.search.candidate import Candidate
    from kdsl.search.eval.evaluator import evaluate
    from kdsl.search.jobs import EvalConfig, EvalJob
    op = spec_mod.find_op(spec_mod.load("specs/softmax.kspec"), None)
    monkeypatch.setattr(timing, "input_sets", lambda op, case, device: 4)
    monkeypatch.setattr(timing, "CHEAP_ORACLE_S", float("inf"))
    res = evaluate(EvalJob(op, Candidate.of("c", {}), EvalConfig(seeds=(1,), reps=8,
                                                                 warmup=0)))
    assert res.ok, res.message
    assert res.artifacts["input_sets"] == 4
    assert len(res.artifacts["checked_calls_ms"]) == 4
    assert res.artifacts["calls_a_step"] == 4


def test_sets_past_two_only_where_an_oracle_is_cheap(monkeypatch):
    """Each set is checked against an oracle of its own at every request: where the first
    oracle took longer than CHEAP_ORACLE_S, two sets."""
    from kdsl.search.candidate import Candidate
    from kdsl.search.eval.evaluator import evaluate
    from kdsl.search.jobs import EvalConfig, EvalJob
    op = spec_mod.find_op(spec_mod.load("specs/softmax.kspec"), None)
    monkeypatch.setattr(timing, "input_sets", lambda op, case, device: 4)
    monkeypatch.setattr(timing, "CHEAP_ORACLE_S", 0.0)
    res = evaluate(EvalJob(op, Candidate.of("c", {}), EvalConfig(seeds=(1,), reps=4,
                                                                 warmup=0)))
    assert res.ok, res.message
    assert res.artifacts["input_sets"] == 2 and res.artifacts["calls_a_step"] == 2
