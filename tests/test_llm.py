"""The LLM operators against a real local HTTP server that speaks the Messages API."""
from __future__ import annotations

from pathlib import Path

import pytest

from kdsl.cli import main
from kdsl.search import runs
from kdsl.search.display import QuietDisplay
from kdsl.search.jobs import EvalConfig
from kdsl.search.llm.replies import ReplyError, apply_edits, source_from_reply
from kdsl.search.settings import SearchSettings

from fakes import FakeExecutor, register
from messages_server import MessagesServer

SPEC = "specs/swiglu.kspec"
SECRET = "sk-ant-test-SECRET-0123456789"
ONLY_REWRITE = {"mutate_one": 0, "mutate_many": 0, "neighbour": 0, "crossover": 0,
                "llm_draft": 0, "llm_crossover": 0, "sample": 0}


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path):
    register()
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)


def settings(server_url, tmp_path, **kw):
    base = dict(spec=SPEC, op=None, backends=("fake",), policy="greedy", seed=1, budget=6,
                executor="inline", llm="anthropic", model="claude-sonnet-4-5",
                llm_base_url=server_url, llm_backoff_s=0.01, llm_timeout_s=2.0,
                operator_weights=ONLY_REWRITE, policy_params={"draft": 0},
                use_priors=False, knowledge_path=str(tmp_path / "learned.json"),
                eval=EvalConfig())
    base.update(kw)
    return SearchSettings(**base)


def fenced(body: str) -> str:
    return f"Here is a faster kernel.\n\n```python\n{body}```\n"


EDIT_2_TO_3 = "<<<<<<< SEARCH\n# speed: 2.0\n=======\n# speed: 3.0\n>>>>>>> REPLACE\n"
BAD_EDIT = "<<<<<<< SEARCH\n# this line is not in the parent\n=======\n# x\n>>>>>>> REPLACE\n"
SCRIPT = [fenced("# speed: 2.0\ndef kernel(i, o, s): pass\n"), EDIT_2_TO_3, BAD_EDIT,
          fenced("# broken\ndef kernel(i, o, s) pass\n"),
          fenced("# speed: 5.0\ndef kernel(i, o, s): pass\n")]


def run_scripted(tmp_path, name="run", script=SCRIPT, **kw):
    with MessagesServer(script, default="no code in this reply") as server:
        store, summary = runs.start(settings(server.url, tmp_path, **kw), tmp_path / name,
                                    None, QuietDisplay(), FakeExecutor())
    return store, summary, server


def test_scripted_search_improves_repairs_and_rejects_bad_edits(tmp_path):
    store, summary, server = run_scripted(tmp_path)
    nodes = store.nodes
    ops = [r["operator"] for r in nodes]
    assert ops == ["start", "llm_rewrite", "llm_rewrite", "llm_rewrite", "llm_rewrite",
                   "llm_repair"]
    speed = [r["result"]["speedup"] for r in nodes]
    assert speed[1] == pytest.approx(2.0) and speed[2] == pytest.approx(3.0)
    # the edit that did not match is a failed child with that reason
    assert not nodes[3]["result"]["ok"] and "SEARCH text does not occur" in \
        nodes[3]["result"]["message"]
    # the kernel that failed to build is repaired from the compiler feedback
    assert nodes[4]["result"]["stage"] == "build"
    assert nodes[5]["kind"] == "repair" and nodes[5]["parents"] == [nodes[4]["id"]]
    assert "SyntaxError" in server.requests[4]["messages"][0]["content"]
    assert summary["best"]["speedup"] == pytest.approx(5.0)
    llm = summary["llm"]
    assert llm["calls"] == 5 and llm["input_tokens"] > 0 and llm["output_tokens"] > 0
    assert llm["cost_usd"] > 0


def test_prompt_carries_spec_parent_feedback_and_constraints(tmp_path):
    store, summary, server = run_scripted(tmp_path)
    second = server.requests[1]["messages"][0]["content"]
    assert "op swiglu" in second                 # the spec text
    assert "# speed: 2.0" in second             # the parent's source
    assert "2.000x" in second or "speedup 2.0" in second  # its evaluation feedback
    assert server.requests[1]["system"]          # the system prompt from the template file
    assert server.requests[1]["model"] == "claude-sonnet-4-5"


def test_api_errors_are_retried_with_backoff(tmp_path):
    script = [("status", 429), ("status", 529), ("status", 500), ("sleep", 3.0),
              fenced("# speed: 2.5\n")]
    store, summary, server = run_scripted(tmp_path, script=script, budget=2)
    assert store.nodes[1]["result"]["speedup"] == pytest.approx(2.5)
    assert summary["llm"]["retries"] == 4 and summary["llm"]["calls"] == 1


def test_exhausted_retries_are_a_failed_child_and_the_run_goes_on(tmp_path):
    script = [("status", 503)] * 5 + [fenced("# speed: 2.5\n")]
    store, summary, server = run_scripted(tmp_path, script=script, budget=3)
    failed = store.nodes[1]["result"]
    assert not failed["ok"] and failed["stage"] == "operator"
    assert "HTTP 503" in failed["message"]
    assert store.nodes[2]["result"]["speedup"] == pytest.approx(2.5)
    assert summary["evaluations"] == 3


def test_client_errors_are_not_retried(tmp_path):
    store, summary, server = run_scripted(tmp_path, script=[("status", 400)], budget=2)
    assert len(server.requests) == 1 and "HTTP 400" in store.nodes[1]["result"]["message"]


def test_max_llm_calls_is_a_budget(tmp_path):
    store, summary, server = run_scripted(tmp_path, max_llm_calls=2, budget=6)
    assert len(server.requests) == 2
    assert summary["evaluations"] == 6


def test_replay_reproduces_the_run_without_the_server(tmp_path):
    first, _, _ = run_scripted(tmp_path)
    replayed, summary = runs.start(
        settings("http://127.0.0.1:9", tmp_path, llm="replay", replay_from=str(first.root)),
        tmp_path / "replayed", None, QuietDisplay(), FakeExecutor())
    strip = lambda ns: [{k: v for k, v in r.items() if k != "time"} for r in ns]  # noqa
    assert strip(replayed.nodes) == strip(first.nodes)
    assert summary["llm"]["calls"] == 5


def test_replay_of_an_unseen_request_fails_clearly(tmp_path, capsys):
    first, _, _ = run_scripted(tmp_path, budget=2)
    rc = main(["search", SPEC, "--backend", "fake", "--executor", "inline", "--llm", "replay",
               "--replay-from", str(first.root), "--budget", "6", "--seed", "9",
               "--no-priors", "--policy", "mcts:rewrite=1.0", "--out", str(tmp_path / "again")])
    err = capsys.readouterr().err
    assert rc == 2 and "no recorded reply" in err and "Traceback" not in err


def test_resume_asks_the_log_not_the_server(tmp_path):
    first, _, server = run_scripted(tmp_path)
    import msgpack
    from kdsl.search.runstore import LINEAGE
    records = [first.header] + first.nodes[:3]
    (first.root / LINEAGE).write_bytes(b"".join(msgpack.packb(r) for r in records))
    with MessagesServer([], default="unused") as s2:
        st = settings(s2.url, tmp_path)
        resumed, _ = runs.resume(first.root, None, QuietDisplay(), FakeExecutor())
    assert len(resumed.nodes) == 6 and s2.requests == []


def test_the_api_key_is_in_no_file(tmp_path):
    store, _, server = run_scripted(tmp_path)
    assert any(SECRET in str(h.values()) for h in server.headers)  # it was sent...
    for path in Path(tmp_path).rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path  # ...and written nowhere


def test_off_by_default_without_a_key(monkeypatch, tmp_path):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    from kdsl.search.llm.setup import resolve_mode
    assert resolve_mode("auto") == "off"
    assert main(["search", SPEC, "--llm", "anthropic", "--backend", "fake",
                 "--out", str(tmp_path / "x")]) == 2


def test_edits_apply_exactly_or_fail():
    parent = "a = 1\nb = 2\nc = 3\n"
    assert apply_edits(parent, [("b = 2", "b = 20")]) == "a = 1\nb = 20\nc = 3\n"
    with pytest.raises(ReplyError, match="does not occur"):
        apply_edits(parent, [("b = 2", "b = 20"), ("q = 9", "")])
    with pytest.raises(ReplyError, match="occurs 2 times"):
        apply_edits("x\nx\n", [("x", "y")])
    assert source_from_reply("```c\nint f;\n```\n```python\nprint()\n```", None, "c") == \
        "int f;\n"
    with pytest.raises(ReplyError, match="neither"):
        source_from_reply("I cannot help with that.", "p", "python")


def test_llm_draft_and_crossover_make_children(tmp_path):
    weights = {**ONLY_REWRITE, "llm_rewrite": 0, "llm_draft": 1.0, "llm_crossover": 1.0}
    script = [fenced("# speed: 1.5\n"), fenced("# speed: 2.5\n"), fenced("# speed: 3.5\n")]
    store, summary, server = run_scripted(
        tmp_path, script=script, budget=4, operator_weights=weights, policy="evolution",
        policy_params={"population": 2, "crossover": 1.0})
    ops = [r["operator"] for r in store.nodes]
    assert ops[:3] == ["start", "llm_draft", "llm_draft"] and ops[3] == "llm_crossover"
    cross = store.nodes[3]
    assert len(cross["parents"]) == 2
    prompt = server.requests[2]["messages"][0]["content"]
    assert "# speed: 1.5" in prompt and "# speed: 2.5" in prompt  # both parents' sources
    assert summary["best"]["speedup"] == pytest.approx(3.5)


# ---- deadlines: a call ends at its deadline, a run's LLM time at its budget ----

def timed_run(tmp_path, script, name="run", default=("hang",), **kw):
    import time
    t0 = time.monotonic()
    with MessagesServer(script, default=default) as server:
        store, summary = runs.start(settings(server.url, tmp_path, **kw), tmp_path / name,
                                    None, QuietDisplay(), FakeExecutor())
    return store, summary, server, time.monotonic() - t0


def test_a_server_that_never_answers_ends_the_call_at_its_deadline(tmp_path):
    store, summary, server, took = timed_run(
        tmp_path, [("hang",), fenced("# speed: 2.5\n")], budget=3, llm_timeout_s=60.0,
        llm_call_timeout_s=1.0, llm_run_budget_s=None)
    failed = store.nodes[1]["result"]
    assert not failed["ok"] and "call deadline (1 s)" in failed["message"], failed
    assert store.nodes[2]["result"]["speedup"] == pytest.approx(2.5)  # the run went on
    assert took < 8, took  # one second of waiting, not 60 (the attempt's own timeout)
    assert 0.9 < summary["llm"]["seconds"] < 3


def test_a_trickling_server_cannot_hold_a_call_past_its_deadline(tmp_path):
    # a byte every 0.2 s: the SDK's read timeout never fires; the watchdog does
    store, summary, server, took = timed_run(
        tmp_path, [("trickle", 0.2)], budget=2, llm_timeout_s=1.0, llm_call_timeout_s=1.0,
        llm_run_budget_s=None)
    assert "call deadline" in store.nodes[1]["result"]["message"]
    assert took < 8, took


def test_retries_and_their_waits_count_inside_the_call_deadline(tmp_path):
    script = [("status", 503)] * 20
    store, summary, server, took = timed_run(
        tmp_path, script, budget=2, llm_backoff_s=0.4, llm_call_timeout_s=1.0,
        llm_run_budget_s=None)
    msg = store.nodes[1]["result"]["message"]
    assert "call deadline" in msg and "HTTP 503" in msg, msg
    assert 2 <= len(server.requests) <= 3  # 0.4 + 0.8 s of backoff fill the second
    assert took < 8, took


def test_the_run_budget_ends_the_llm_operators_and_replay_stands_down_there(tmp_path):
    store, summary, server, took = timed_run(
        tmp_path, [], budget=8, llm_timeout_s=60.0, llm_call_timeout_s=1.0,
        llm_run_budget_s=2.5)
    llm = summary["llm"]
    assert llm["budget_spent"] and 2.4 < llm["seconds"] < 4, llm
    assert len(server.requests) == 3  # 1 s + 1 s + the 0.5 s left
    assert "LLM budget (2.5 s) ran out" in store.nodes[3]["result"]["message"]
    assert summary["evaluations"] == 8  # the search went on without them
    assert took < 10, took
    replayed, rsum = runs.start(
        settings("http://127.0.0.1:9", tmp_path, llm="replay", replay_from=str(store.root),
                 budget=8), tmp_path / "replayed", None, QuietDisplay(), FakeExecutor())
    strip = lambda ns: [{k: v for k, v in r.items() if k != "time"} for r in ns]  # noqa
    assert strip(replayed.nodes) == strip(store.nodes)
    assert rsum["llm"]["budget_spent"]


def test_deadline_flags_reach_the_run_settings(tmp_path, capsys):
    rc = main(["search", SPEC, "--backend", "fake", "--executor", "inline", "--llm", "off",
               "--budget", "1", "--no-priors", "--quiet", "--llm-call-timeout", "0.5",
               "--llm-run-budget", "none", "--out", str(tmp_path / "cli")])
    assert rc == 0
    from kdsl.search.runstore import RunStore
    s = RunStore.open(tmp_path / "cli").header["settings"]
    assert s["llm_call_timeout_s"] == 0.5 and s["llm_run_budget_s"] is None
    capsys.readouterr()
    for bad in (["--llm-call-timeout", "0"], ["--llm-call-timeout", "soon"],
                ["--llm-run-budget", "-3"]):
        assert main(["search", SPEC, *bad]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


# ---- malformed replies are recorded, and replay reproduces them ----

MALFORMED = [("raw", 200, b"this is not JSON"),
             ("raw", 200, b'{"id": "m", "type": "message"}'),
             ("stop", "max_tokens", "```python\n# speed: 9.0\ndef kernel(i, o, s):\n    x ="),
             "I would rather explain the kernel in words.",
             fenced("# speed: 2.0\ndef kernel(i, o, s): pass\n")]


def test_malformed_replies_are_failed_children_that_replay_reproduces(tmp_path):
    store, summary, server = run_scripted(tmp_path, script=MALFORMED, budget=6)
    msgs = [r["result"]["message"] for r in store.nodes[1:5]]
    assert "malformed reply: JSONDecodeError" in msgs[0], msgs
    assert "malformed reply: the message has no content" in msgs[1], msgs
    assert "cut off at max_tokens (8192)" in msgs[2], msgs
    assert "neither a fenced source block" in msgs[3], msgs
    assert len(server.requests) == 5  # a malformed 200 is an answer, not retried
    assert store.nodes[5]["result"]["speedup"] == pytest.approx(2.0)
    assert summary["llm"]["malformed"] == 4
    replayed, rsum = runs.start(
        settings("http://127.0.0.1:9", tmp_path, llm="replay", replay_from=str(store.root),
                 budget=6), tmp_path / "replayed", None, QuietDisplay(), FakeExecutor())
    strip = lambda ns: [{k: v for k, v in r.items() if k != "time"} for r in ns]  # noqa
    assert strip(replayed.nodes) == strip(store.nodes)
    assert rsum["llm"]["malformed"] == 4


# ---- each reply's source is stored once, and what is stored per reply is capped ----

def test_a_huge_reply_is_rejected_and_only_its_head_is_kept(tmp_path):
    import random
    rnd = random.Random(0)
    huge = fenced("# speed: 7.0\n" + "".join(
        f"x{i} = {rnd.getrandbits(64):x}\n" for i in range(120_000)))  # ~3 MB
    store, summary, server = run_scripted(tmp_path, script=[huge, huge, huge], budget=4)
    for r in store.nodes[1:4]:
        assert "over the limit kdsl keeps per reply" in r["result"]["message"]
    size = sum(p.stat().st_size for p in store.root.rglob("*") if p.is_file())
    assert size < 400_000, size  # 9 MB of replies; the run keeps one 16 KB head
    from kdsl.search.llm.exchanges import ExchangeLog
    log = ExchangeLog(store.root / "llm_exchanges.msgpack")
    rec = log.by_key[next(iter(log.by_key))][0]
    assert rec["reply"]["truncated_from"] == len(huge) and len(rec["reply"]["text"]) == 16_384


def test_a_reply_source_is_stored_once(tmp_path):
    import random
    rnd = random.Random(1)
    body = "# speed: 2.0\n" + "".join(f"k{i} = {rnd.getrandbits(64):x}\n" for i in range(6000))
    store, summary, server = run_scripted(tmp_path, script=[fenced(body)], budget=2)
    node = store.nodes[1]
    assert node["candidate"]["source"] is None
    assert (store.root / node["candidate"]["source_ref"]).read_text() == body
    assert len(body) > 100_000
    assert body.encode() not in (store.root / "lineage.msgpack").read_bytes()
    kernels = [p for p in (store.root / "kernels").iterdir() if body in p.read_text()]
    assert len(kernels) <= 2  # its file, and best.py when it is the best


def test_the_exchange_log_stores_each_text_once_and_survives_a_torn_tail(tmp_path):
    from kdsl.search.llm.exchanges import ExchangeLog
    path = tmp_path / "x.msgpack"
    log = ExchangeLog(path)
    system, reply = "S" * 50_000, "R" * 200_000
    for i in range(5):
        req = {"model": "m", "max_tokens": 1, "system": system,
               "messages": [{"role": "user", "content": f"prompt {i}"}]}
        log.append(f"k{i}", req, {"reply": {"text": reply, "input_tokens": 1,
                                            "output_tokens": 1}})
    assert path.stat().st_size < 5_000  # one compressed copy of each text, not five
    with open(path, "ab") as fh:
        fh.write(b"\x85\xa3key\xa2k9\xa7req")  # a record torn by a kill
    again = ExchangeLog(path)
    assert len(again) == 5
    again.append("k5", {"model": "m", "messages": []}, {"error": "x"})
    third = ExchangeLog(path)
    assert len(third) == 6 and third.by_key["k3"][0]["reply"]["text"] == reply
    assert third.request_of(third.by_key["k0"][0])["system"] == system
