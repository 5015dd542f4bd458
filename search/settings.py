"""One settings tree for a search run; stored in the run's header, so a resume is exact."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .jobs import EvalConfig


@dataclass
class SearchSettings:
    spec: str                               # path of the .kspec file
    op: str                                 # op name within it
    backends: tuple[str, ...] = ("c",)
    device: str = "cpu"
    policy: str = "mcts"
    policy_params: dict = field(default_factory=dict)
    seed: int = 0
    budget: int = 30
    workers: int = 1
    executor: str = "pool"                  # 'inline' | 'pool' | 'ray'
    executor_options: dict = field(default_factory=dict)
    operator_weights: dict = field(default_factory=dict)  # overrides of the defaults
    llm: str = "off"                        # 'off' | 'anthropic' | 'replay'
    model: str = "claude-sonnet-4-5"
    max_llm_calls: int | None = None
    llm_repairs: int = 2                    # repair attempts after a failed LLM child
    llm_base_url: str | None = None         # another Messages API endpoint (tests, proxies)
    llm_backoff_s: float = 2.0              # first retry delay; doubles each retry
    llm_timeout_s: float = 180.0
    replay_from: str | None = None          # run dir or exchanges file for --llm replay
    hardware: str | None = None             # knowledge retrieval; None: from the device
    knowledge_path: str | None = None       # learned-knowledge store; None: the default
    use_priors: bool = True                 # weight operators by what earlier runs learned
    use_stored: bool = True                 # start from specs/genomes/ (else the defaults)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def to_record(self) -> dict:
        d = asdict(self)
        d["backends"] = list(self.backends)
        return d

    @staticmethod
    def from_record(d: dict) -> "SearchSettings":
        known = set(SearchSettings.__dataclass_fields__)
        kw = {k: v for k, v in d.items() if k in known}
        ev = kw.get("eval") or {}
        ev_known = set(EvalConfig.__dataclass_fields__)
        ev = {k: (tuple(v) if isinstance(v, list) else v) for k, v in ev.items() if k in ev_known}
        kw["eval"] = EvalConfig(**ev)
        kw["backends"] = tuple(kw.get("backends") or ("c",))
        return SearchSettings(**kw)
