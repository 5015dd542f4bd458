"""Switching the LLM operators on for a run: client, exchange log, session, operators."""
from __future__ import annotations

import os
from pathlib import Path

from kdsl import extras, ir
from kdsl.errors import UsageError

from ..files import atomic_write
from ..operators import Context, OperatorSet
from ..settings import SearchSettings
from .client import AnthropicClient, ReplayClient
from .exchanges import ExchangeLog
from .operators import LLMSession, install

EXCHANGES = "llm_exchanges.msgpack"
KEY_VARIABLE = "ANTHROPIC_API_KEY"
# the llm extra: the SDK to call, BM25 to pick the notes a prompt carries (a replay rebuilds
# the same prompts to find the recorded replies, so it needs the notes too)
NEEDS = {"anthropic": ("anthropic", "bm25s"), "replay": ("bm25s",)}


def api_key() -> str | None:
    """The one place kdsl reads the API key; it is handed to the SDK and stored nowhere."""
    return os.environ.get(KEY_VARIABLE) or None


def require(mode: str) -> None:
    """A UsageError naming the extra to install when ``mode`` needs packages not here."""
    extras.require(f"--llm {mode}", *NEEDS.get(mode, ()))


def resolve_mode(requested: str | None) -> str:
    """'auto' (the CLI default) is anthropic when a key is set and the llm extra is
    installed, and off otherwise."""
    if requested in (None, "auto"):
        usable = api_key() and all(extras.installed(m) for m in NEEDS["anthropic"])
        return "anthropic" if usable else "off"
    if requested == "anthropic" and not api_key():
        raise UsageError(f"--llm anthropic needs {KEY_VARIABLE} in the environment")
    if requested not in ("off", "anthropic", "replay"):
        raise UsageError(f"unknown --llm '{requested}'; known: off, anthropic, replay")
    require(requested)
    return requested


def hardware_of(settings: SearchSettings) -> str:
    return settings.hardware or ("h200" if settings.device == "cuda" else "x86-64")


def _replay_log(settings: SearchSettings, run_dir: Path) -> ExchangeLog:
    own = run_dir / EXCHANGES
    if settings.replay_from and not own.exists():
        src = Path(settings.replay_from)
        src = src / EXCHANGES if src.is_dir() else src
        if not src.is_file():
            raise UsageError(f"--replay-from: no recorded exchanges at {src}")
        # copied whole or not at all: a torn copy would pass for a recording
        atomic_write(own, src.read_bytes())
    if not own.exists():
        raise UsageError("--llm replay needs --replay-from RUN (a run recorded with --llm)")
    return ExchangeLog(own)


def configure(settings: SearchSettings, op: ir.Op, ctx: Context, operators: OperatorSet,
              languages: dict[str, str], run_dir: Path) -> LLMSession | None:
    if settings.llm == "off":
        return None
    require(settings.llm)  # a resumed run's mode is not resolved again
    if settings.llm == "replay":
        client = ReplayClient(settings.model, _replay_log(settings, run_dir),
                              max_calls=settings.max_llm_calls)
    else:
        key = api_key()
        if not key:
            raise UsageError(f"--llm anthropic needs {KEY_VARIABLE} in the environment")
        client = AnthropicClient(settings.model, key, ExchangeLog(run_dir / EXCHANGES),
                                 base_url=settings.llm_base_url,
                                 max_calls=settings.max_llm_calls,
                                 backoff_s=settings.llm_backoff_s,
                                 timeout_s=settings.llm_timeout_s,
                                 call_timeout_s=settings.llm_call_timeout_s,
                                 run_budget_s=settings.llm_run_budget_s,
                                 max_reply_chars=settings.llm_max_reply_chars)
    try:
        from kdsl.knowledge.opclass import op_class
        klass = op_class(op)
    except ImportError:
        klass = "any"
    session = LLMSession(client, op, settings.device, hardware_of(settings), klass, languages)
    install(operators, session)
    ctx.extra["llm"] = session
    ctx.extra["max_repairs"] = settings.llm_repairs
    return session
