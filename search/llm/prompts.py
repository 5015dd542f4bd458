"""Prompts assembled from the template files in ``kdsl.knowledge`` (knowledge/prompts/).

Python only gathers the facts (spec, IR, parent source, feedback, lineage
history, constraints, retrieved notes); the wording lives in the templates.
"""
from __future__ import annotations

import string
from dataclasses import dataclass
from importlib import resources

from kdsl import ir
from kdsl.show import format_op

from ..result import Result

KNOWLEDGE_TOKENS = 6000  # budget for retrieved notes in one prompt


def template(name: str) -> string.Template:
    text = (resources.files("kdsl.knowledge") / "prompts" / f"{name}.md").read_text()
    return string.Template(text)


def feedback_text(result: Result | None) -> str:
    """What the evaluator said about a kernel, as an engineer would want to read it."""
    if result is None:
        return "(not evaluated)"
    a = result.artifacts or {}
    lines = []
    if result.ok:
        lines.append(f"correct; {result.time_ms:.4g} ms vs {result.baseline_name} baseline "
                     f"{result.baseline_ms:.4g} ms: speedup {result.speedup:.3f}x")
        if a.get("floor_ms"):
            lines.append(f"memory-traffic floor {a['floor_ms']:.4g} ms "
                         f"({result.time_ms / a['floor_ms']:.2f}x the floor)")
    else:
        lines.append(f"FAILED at stage '{result.stage}': {result.message}")
        if a.get("build_log"):
            lines.append("compiler output (last 40 lines):")
            lines += str(a["build_log"]).splitlines()[-40:]
    meta = a.get("meta") or {}
    for key in ("n_regs", "n_spills", "shared"):
        if key in meta:
            lines.append(f"{key}: {meta[key]}")
    return "\n".join(lines)


def timing_text(result: Result | None) -> str:
    if result is None or not result.ok:
        return "no timing (the kernel did not pass)"
    floor = (result.artifacts or {}).get("floor_ms")
    return (f"kernel {result.time_ms:.4g} ms, baseline {result.baseline_ms:.4g} ms"
            + (f", floor {floor:.4g} ms" if floor else ""))


@dataclass
class PromptContext:
    """The facts of one op/backend/device that every prompt of a run shares."""
    op: ir.Op
    backend: str
    device: str
    hardware: str
    op_class: str

    def knowledge(self, query: str) -> tuple[str, str]:
        """(constraints, other notes) retrieved for this op class, backend and hardware."""
        try:
            from kdsl.knowledge.retrieval import retrieve
        except ImportError:
            return "", ""
        notes = retrieve(query, self.backend, self.hardware, self.op_class, KNOWLEDGE_TOKENS)
        cons = [n for n in notes if "constraints" in str(n.path)]
        rest = [n for n in notes if "constraints" not in str(n.path)]
        return _notes_text(cons), _notes_text(rest)

    def fields(self, query: str) -> dict:
        constraints, knowledge = self.knowledge(query)
        return {"spec_text": self.op.source_text or format_op(self.op),
                "ir_summary": format_op(self.op), "backend": self.backend,
                "device": self.device, "hardware": self.hardware, "op_class": self.op_class,
                "constraints": constraints, "knowledge": knowledge}


def _notes_text(notes) -> str:
    parts = []
    for n in notes:
        body = n.body.strip()
        first, _, rest = body.partition("\n")
        if first.lstrip("# ").strip() == n.title.strip():
            body = rest.strip()  # the note's own heading repeats its title
        parts.append(f"### {n.title}\n{body}")
    return "\n\n".join(parts)


def render(name: str, ctx: PromptContext, query: str, **fields) -> str:
    values = ctx.fields(query)
    values.update({k: ("" if v is None else str(v)) for k, v in fields.items()})
    return template(name).safe_substitute(values)


def system_prompt() -> str:
    return template("system").safe_substitute({})
