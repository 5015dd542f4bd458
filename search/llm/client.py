"""LLM clients: Anthropic's Messages API through the anthropic SDK, and replay.

Transient API errors (rate limit, overload, 5xx, timeouts, dropped
connections) are retried with exponential backoff; after the last retry the
call fails with ``LLMError`` and the operator records a failed child, so the
run goes on. The SDK's own retries are off so that every attempt is ours to
count and back off. The API key is read from the environment by the caller
and handed to the SDK only; it is never part of a request record.

Time is bounded twice. A call (every attempt, retry and backoff sleep) ends
at its deadline, ``call_timeout_s``; each attempt gets what is left as the
SDK's timeout, and a watchdog returns at the deadline even from a server
that trickles bytes. A run spends at most ``run_budget_s`` seconds in calls;
once they are spent the LLM operators stand down and the search goes on
with the others. Where a run's budget ran out is recorded with the exchange
that spent it, so a replay or a resume stands down at the same point.

Every outcome is recorded, malformed ones too (a body that is not a Message,
no text, a reply cut at max_tokens, a reply too long to keep): the operator
turns them into a failed child, and replay gives back the same outcome.
"""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field

from ..operators import FatalOperatorError
from .exchanges import ExchangeLog, request_key, text_sha

KEPT_CHARS = 16_384  # of a reply over the size limit, what the run keeps for reading
WATCHDOG_GRACE_S = 0.5  # past an attempt's own timeout before the watchdog gives up on it

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}

# USD per million tokens (input, output); unknown models report no cost.
PRICES = {"claude-opus-4": (15.0, 75.0), "claude-sonnet-4": (3.0, 15.0),
          "claude-haiku-4": (1.0, 5.0), "claude-3-5-haiku": (0.8, 4.0)}


def price_of(model: str) -> tuple[float, float] | None:
    for prefix, p in sorted(PRICES.items(), key=lambda kv: -len(kv[0])):
        if model.startswith(prefix):
            return p
    return None


class LLMError(Exception):
    """A call that failed for good (after retries); the message says why."""


class ReplayMiss(FatalOperatorError):
    """Replay was asked a request it has not recorded: the run cannot be reproduced."""


@dataclass
class Usage:
    model: str
    calls: int = 0
    failed_calls: int = 0
    retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    max_calls: int | None = None
    seconds: float = 0.0                 # spent in calls (recorded ones included)
    run_budget_s: float | None = None
    budget_spent: bool = False           # the run's LLM seconds are spent: no more calls
    malformed: int = 0                   # replies the operators could not use as they came

    def add(self, input_tokens: int, output_tokens: int) -> None:
        self.calls += 1
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        p = price_of(self.model)
        if p is None:
            self.cost_usd = None
        elif self.cost_usd is not None:
            self.cost_usd += (input_tokens * p[0] + output_tokens * p[1]) / 1e6

    @property
    def exhausted(self) -> bool:
        return self.budget_spent or (self.max_calls is not None
                                     and self.calls + self.failed_calls >= self.max_calls)

    @property
    def seconds_left(self) -> float:
        return float("inf") if self.run_budget_s is None else self.run_budget_s - self.seconds

    def to_record(self) -> dict:
        d = asdict(self)
        d["seconds"] = round(self.seconds, 3)
        return d


@dataclass
class Reply:
    text: str
    input_tokens: int
    output_tokens: int
    stop_reason: str | None = None
    truncated_from: int | None = None   # the reply's length when only its head was kept
    max_tokens: int | None = None


@dataclass
class AnthropicClient:
    model: str
    api_key: str = field(repr=False)
    log: ExchangeLog
    base_url: str | None = None
    max_tokens: int = 8192
    timeout_s: float = 180.0            # one attempt
    call_timeout_s: float = 300.0       # the whole call: attempts, retries, backoff
    run_budget_s: float | None = None   # all calls of the run
    max_reply_chars: int = 262_144
    retries: int = 4
    backoff_s: float = 2.0
    max_calls: int | None = None
    sleep: object = time.sleep
    clock: object = time.monotonic

    def __post_init__(self):
        import anthropic
        self._sdk = anthropic.Anthropic(api_key=self.api_key, base_url=self.base_url,
                                        max_retries=0, timeout=self.timeout_s)
        self.usage = Usage(self.model, max_calls=self.max_calls, run_budget_s=self.run_budget_s)

    def request(self, system: str, prompt: str) -> dict:
        return {"model": self.model, "max_tokens": self.max_tokens, "system": system,
                "messages": [{"role": "user", "content": prompt}]}

    def complete(self, system: str, prompt: str) -> Reply:
        req = self.request(system, prompt)
        key = request_key(req)
        known = self.log.unserved(key)  # a resumed run asks again what it asked before
        if known is not None:
            return _outcome(known, self.usage)
        if self.usage.exhausted:
            raise LLMError("the run's LLM budget is spent")
        t0 = self.clock()
        limit = min(self.call_timeout_s, self.usage.seconds_left)
        by_run = self.usage.seconds_left < self.call_timeout_s
        outcome = self._attempts(req, t0 + limit)
        elapsed = self.clock() - t0
        if "error" in outcome and outcome.pop("overdue", False):
            why = (f"the run's LLM budget ({self.run_budget_s:g} s) ran out" if by_run
                   else f"no reply within the call deadline ({self.call_timeout_s:g} s)")
            outcome["error"] = f"{why}; last: {outcome['error']}"
        self.usage.seconds += elapsed
        if self.usage.seconds_left <= 0:
            self.usage.budget_spent = True
        outcome.update(seconds=round(elapsed, 3), budget_spent=self.usage.budget_spent)
        self.log.append(key, req, outcome)
        return _outcome(outcome, self.usage, counted_seconds=True)

    def _attempts(self, req: dict, deadline: float) -> dict:
        """The outcome of one call: {'reply': ...} or {'error': ..., 'overdue': bool}."""
        import anthropic
        last = ""
        for attempt in range(self.retries + 1):
            left = deadline - self.clock()
            if left <= 0:
                return {"error": last or "no time left", "overdue": True}
            try:
                msg = self._create(req, min(self.timeout_s, left))
            except (anthropic.APITimeoutError, anthropic.APIConnectionError, _Overdue) as e:
                last = f"{type(e).__name__}: {e}"
            except anthropic.APIStatusError as e:
                last = f"HTTP {e.status_code} {type(e).__name__}: {_short(e)}"
                if e.status_code not in RETRY_STATUS:
                    return {"error": last}
            except Exception as e:  # a 200 whose body is no Message: final, and recorded
                return {"error": f"malformed reply: {type(e).__name__}: {str(e)[:300]}",
                        "malformed": True}
            else:
                return self._reply(msg, req)
            if attempt < self.retries:
                delay = self.backoff_s * 2 ** attempt
                if self.clock() + delay >= deadline:
                    return {"error": last, "overdue": True}
                self.usage.retries += 1
                self.sleep(delay)
        return {"error": last}

    def _create(self, req: dict, timeout: float):
        """One SDK call that returns by ``timeout`` (plus a little) whatever the server does.

        The SDK's timeout bounds each read, not the whole response, so a server that sends
        a byte now and then could hold it far longer; the watchdog thread gives up on such
        an attempt (the daemon thread ends when the SDK's own timeout fires)."""
        box: dict = {}

        def go():
            try:
                box["msg"] = self._sdk.messages.create(**req, timeout=timeout)
            except BaseException as e:  # handed to the caller's thread
                box["error"] = e

        t = threading.Thread(target=go, daemon=True, name="kdsl-llm-call")
        t.start()
        t.join(timeout + WATCHDOG_GRACE_S)
        if t.is_alive():
            raise _Overdue(f"no complete reply in {timeout:.3g} s")
        if "error" in box:
            raise box["error"]
        return box["msg"]

    def _reply(self, msg, req: dict) -> dict:
        """A Message as the outcome to record; a malformed one (no text blocks, no usage)
        is recorded with what it lacked."""
        content = getattr(msg, "content", None)
        if not isinstance(content, list):
            return {"error": "malformed reply: the message has no content list",
                    "malformed": True}
        text = "".join(t for b in content if isinstance(t := getattr(b, "text", None), str))
        usage = getattr(msg, "usage", None)
        reply = {"text": text, "input_tokens": int(getattr(usage, "input_tokens", 0) or 0),
                 "output_tokens": int(getattr(usage, "output_tokens", 0) or 0),
                 "stop_reason": getattr(msg, "stop_reason", None),
                 "max_tokens": req["max_tokens"]}
        if len(text) > self.max_reply_chars:
            # kept: its head for reading, its length and hash; the operator rejects it
            reply.update(text=text[:KEPT_CHARS], truncated_from=len(text),
                         sha=text_sha(text), limit=self.max_reply_chars)
        return {"reply": reply}


class _Overdue(Exception):
    """An attempt the watchdog gave up on."""


def _short(e) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        return str((body.get("error") or {}).get("message") or body)[:300]
    return str(e)[:300]


@dataclass
class ReplayClient:
    """Answers from a recorded exchange log; any request it has not seen is an error."""
    model: str
    log: ExchangeLog
    max_tokens: int = 8192
    max_calls: int | None = None

    def __post_init__(self):
        self.usage = Usage(self.model, max_calls=self.max_calls)

    request = AnthropicClient.request

    def complete(self, system: str, prompt: str) -> Reply:
        key = request_key(self.request(system, prompt))
        if self.usage.exhausted:  # where the recorded run stood down, so does the replay
            raise LLMError("the run's LLM budget is spent")
        rec = self.log.next_outcome(key)
        if rec is None:
            raise ReplayMiss(f"replay has no recorded reply for request {key} "
                             f"({len(self.log)} exchanges recorded); the run diverged from "
                             "the recording or the recording is from another run")
        return _outcome(rec, self.usage)


def _outcome(rec: dict, usage: Usage, counted_seconds: bool = False) -> Reply:
    """A recorded outcome as the live call would have ended: a reply, or LLMError.

    The run's budget follows the record (``budget_spent``), never this machine's clock,
    so replay and resume stand down where the recorded run did."""
    if not counted_seconds:
        usage.seconds += float(rec.get("seconds") or 0.0)
    if rec.get("budget_spent"):
        usage.budget_spent = True
    if "error" in rec:
        usage.failed_calls += 1
        usage.malformed += bool(rec.get("malformed"))
        raise LLMError(rec["error"])
    r = rec["reply"]
    usage.add(int(r.get("input_tokens") or 0), int(r.get("output_tokens") or 0))
    return Reply(r.get("text") or "", int(r.get("input_tokens") or 0),
                 int(r.get("output_tokens") or 0), r.get("stop_reason"),
                 r.get("truncated_from"), r.get("max_tokens"))
