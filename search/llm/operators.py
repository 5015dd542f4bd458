"""The LLM operators: rewrite, repair, crossover and draft, one signature with the rest.

Each asks the model through the session's client with a prompt assembled from
template files, turns the reply into source (full source or exact edits) and
returns a Candidate whose ``source`` is that text: it then goes through the
same evaluator and guards as every candidate. A failed call or an unusable
reply is an OperatorFailure with the reason, recorded as a failed child.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from kdsl import backends, ir

from ..candidate import Candidate
from ..operators import Context, OperatorFailure
from ..profile import advice
from . import prompts
from .client import LLMError, Reply
from .exchanges import text_sha
from .replies import ReplyError, source_from_reply


@dataclass
class LLMSession:
    """What the LLM operators of one run share: the client and the op's prompt facts."""
    client: object                      # AnthropicClient | ReplayClient
    op: ir.Op
    device: str
    hardware: str
    op_class: str
    languages: dict[str, str]           # backend -> 'python' | 'c'

    def available(self) -> bool:
        return not self.client.usage.exhausted

    def prompt_context(self, backend: str) -> prompts.PromptContext:
        return prompts.PromptContext(self.op, backend, self.device, self.hardware,
                                     self.op_class)

    def source_of(self, c: Candidate, ctx: Context) -> str:
        """A parent's source: its own text, what the evaluator rendered, or a fresh render."""
        if c.source is not None:
            return c.source
        r = ctx.results.get(ctx.key(c))
        if r is not None and r.artifacts.get("source"):
            return r.artifacts["source"]
        return backends.get(c.backend).render(self.op, c.genes, self.device)

    def ask(self, name: str, template: str, backend: str, parent_source: str | None,
            query: str, **fields) -> str | OperatorFailure:
        pc = self.prompt_context(backend)
        text = prompts.render(template, pc, query, parent_source=parent_source, **fields)
        try:
            reply = self.client.complete(prompts.system_prompt(), text)
        except LLMError as e:
            return OperatorFailure(name, f"LLM call failed: {e}")
        try:
            return usable_source(reply, parent_source, self.languages.get(backend, "python"))
        except ReplyError as e:
            self.client.usage.malformed += 1
            return OperatorFailure(name, f"reply rejected: {e} (reply {text_sha(reply.text)[:12]}"
                                         " in the run's LLM exchanges)")


def usable_source(reply: Reply, parent_source: str | None, language: str) -> str:
    """The source a reply gives, or ReplyError: too long to keep, cut off, or malformed."""
    if reply.truncated_from is not None:
        raise ReplyError(f"the reply is {reply.truncated_from:,} characters, over the limit "
                         f"kdsl keeps per reply (its first {len(reply.text):,} are stored)")
    try:
        return source_from_reply(reply.text, parent_source, language)
    except ReplyError as e:
        if reply.stop_reason == "max_tokens":
            raise ReplyError(f"the reply was cut off at max_tokens ({reply.max_tokens}) before "
                             f"its source was complete ({e})") from None
        raise


def _candidate(backend: str, genes: dict, src, name: str):
    if isinstance(src, OperatorFailure):
        return src
    return Candidate.of(backend, genes, source=src, origin=name)


@dataclass
class _LLMOperator:
    session: LLMSession
    name = "llm"
    kind = "mutate"

    def available(self) -> bool:
        return self.session.available()


class LLMRewrite(_LLMOperator):
    name, kind = "llm_rewrite", "mutate"

    def apply(self, parents, ctx: Context, rng: random.Random):
        p = parents[0]
        s = self.session
        src = s.source_of(p, ctx)
        res = ctx.results.get(ctx.key(p))
        fb = prompts.feedback_text(res)
        diag = advice.diagnosis_for(ctx, p)  # the profile's reading retrieves notes too
        out = s.ask(self.name, "rewrite", p.backend, src,
                    f"{s.op.source_text}\n{fb}\n{advice.words(diag)}",
                    feedback=fb, timing=prompts.timing_text(res),
                    profile=advice.prompt_text(diag),
                    history="\n".join(ctx.history.get(ctx.key(p), [])) or "(first step)")
        return _candidate(p.backend, p.genes, out, self.name)


class LLMRepair(_LLMOperator):
    name, kind = "llm_repair", "repair"

    def apply(self, parents, ctx: Context, rng: random.Random):
        p = parents[0]
        s = self.session
        res = ctx.results.get(ctx.key(p))
        error = prompts.feedback_text(res)
        attempts = sum(1 for line in ctx.history.get(ctx.key(p), []) if "llm_repair" in line)
        diag = advice.diagnosis_for(ctx, p)  # a failed kernel has none: the run's best's
        out = s.ask(self.name, "repair", p.backend, s.source_of(p, ctx),
                    f"{s.op.source_text}\n{error}\n{advice.words(diag)}", error=error,
                    feedback=error, profile=advice.prompt_text(diag),
                    attempt=attempts + 1, max_attempts=ctx.extra.get("max_repairs", 1),
                    timing=prompts.timing_text(res),
                    history="\n".join(ctx.history.get(ctx.key(p), [])))
        return _candidate(p.backend, p.genes, out, self.name)


class LLMCrossover(_LLMOperator):
    name, kind = "llm_crossover", "crossover"

    def apply(self, parents, ctx: Context, rng: random.Random):
        a, b = parents
        s = self.session
        ra, rb = ctx.results.get(ctx.key(a)), ctx.results.get(ctx.key(b))
        out = s.ask(self.name, "crossover", a.backend, s.source_of(a, ctx), s.op.source_text,
                    parent_a_source=s.source_of(a, ctx),
                    parent_a_result=prompts.feedback_text(ra),
                    parent_b_source=s.source_of(b, ctx),
                    parent_b_result=prompts.feedback_text(rb), parent_b_backend=b.backend,
                    feedback="", timing="", history="")
        return _candidate(a.backend, a.genes, out, self.name)


class LLMDraft(_LLMOperator):
    name, kind = "llm_draft", "draft"

    def apply(self, parents, ctx: Context, rng: random.Random):
        backend = rng.choice(sorted(ctx.spaces))
        s = self.session
        out = s.ask(self.name, "draft", backend, None, s.op.source_text, feedback="",
                    timing="", history="")
        genes = ctx.spaces[backend].default()
        return _candidate(backend, genes, out, self.name)


WEIGHTS = {"llm_rewrite": 2.0, "llm_repair": 1.0, "llm_crossover": 0.5, "llm_draft": 0.5}


def install(operators, session: LLMSession, weights: dict | None = None) -> None:
    """Add the LLM operators to a run's operator set."""
    w = {**WEIGHTS, **(weights or {})}
    for cls in (LLMRewrite, LLMRepair, LLMCrossover, LLMDraft):
        operators.add(cls(session), w[cls.name])
