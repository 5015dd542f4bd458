"""LLM clients: Anthropic's Messages API through the anthropic SDK, and replay.

Transient API errors (rate limit, overload, 5xx, timeouts, dropped
connections) are retried with exponential backoff; after the last retry the
call fails with ``LLMError`` and the operator records a failed child, so the
run goes on. The SDK's own retries are off so that every attempt is ours to
count and back off. The API key is read from the environment by the caller
and handed to the SDK only; it is never part of a request record.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from ..operators import FatalOperatorError
from .exchanges import ExchangeLog, request_key

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
        return self.max_calls is not None and self.calls + self.failed_calls >= self.max_calls

    def to_record(self) -> dict:
        return asdict(self)


@dataclass
class Reply:
    text: str
    input_tokens: int
    output_tokens: int


@dataclass
class AnthropicClient:
    model: str
    api_key: str = field(repr=False)
    log: ExchangeLog
    base_url: str | None = None
    max_tokens: int = 8192
    timeout_s: float = 180.0
    retries: int = 4
    backoff_s: float = 2.0
    max_calls: int | None = None
    sleep: object = time.sleep

    def __post_init__(self):
        import anthropic
        self._sdk = anthropic.Anthropic(api_key=self.api_key, base_url=self.base_url,
                                        max_retries=0, timeout=self.timeout_s)
        self.usage = Usage(self.model, max_calls=self.max_calls)

    def request(self, system: str, prompt: str) -> dict:
        return {"model": self.model, "max_tokens": self.max_tokens, "system": system,
                "messages": [{"role": "user", "content": prompt}]}

    def complete(self, system: str, prompt: str) -> Reply:
        import anthropic
        req = self.request(system, prompt)
        key = request_key(req)
        known = self.log.unserved(key)  # a resumed run asks again what it asked before
        if known is not None:
            return _outcome(known, self.usage)
        last = ""
        for attempt in range(self.retries + 1):
            try:
                msg = self._sdk.messages.create(**req)
            except (anthropic.APITimeoutError, anthropic.APIConnectionError) as e:
                last = f"{type(e).__name__}: {e}"
            except anthropic.APIStatusError as e:
                last = f"HTTP {e.status_code} {type(e).__name__}: {_short(e)}"
                if e.status_code not in RETRY_STATUS:
                    break
            else:
                text = "".join(getattr(b, "text", "") for b in msg.content)
                reply = Reply(text, msg.usage.input_tokens, msg.usage.output_tokens)
                self.usage.add(reply.input_tokens, reply.output_tokens)
                self.log.append(key, req, {"reply": asdict(reply)})
                return reply
            if attempt < self.retries:
                self.usage.retries += 1
                self.sleep(self.backoff_s * 2 ** attempt)
        self.usage.failed_calls += 1
        self.log.append(key, req, {"error": last})
        raise LLMError(last)


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
        rec = self.log.next_outcome(key)
        if rec is None:
            raise ReplayMiss(f"replay has no recorded reply for request {key} "
                             f"({len(self.log)} exchanges recorded); the run diverged from "
                             "the recording or the recording is from another run")
        return _outcome(rec, self.usage)


def _outcome(rec: dict, usage: Usage) -> Reply:
    """A recorded outcome as the live call would have ended: a reply, or LLMError."""
    if "error" in rec:
        usage.failed_calls += 1
        raise LLMError(rec["error"])
    r = rec["reply"]
    usage.add(r["input_tokens"], r["output_tokens"])
    return Reply(r["text"], r["input_tokens"], r["output_tokens"])
