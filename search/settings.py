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
    llm_timeout_s: float = 180.0            # one HTTP attempt (the call deadline caps it)
    llm_call_timeout_s: float = 300.0       # one call in all: attempts, retries, backoff
    llm_run_budget_s: float | None = 3600.0  # seconds of LLM calls per run; None: no limit
    llm_max_reply_chars: int = 262_144      # a longer reply is rejected, its head kept
    replay_from: str | None = None          # run dir or exchanges file for --llm replay
    hardware: str | None = None             # knowledge retrieval; None: from the device
    knowledge_path: str | None = None       # learned-knowledge store; None: the default
    use_priors: bool = True                 # weight operators by what earlier runs learned
    use_stored: bool = True                 # start from specs/genomes/ (else the defaults)
    cost_model: str = "auto"                # 'auto' (on when lightgbm is there) | 'on' | 'off'
    warm_from: tuple = ()                   # measurement caches whose rows of other ops of
                                            # this op's class warm-start the cost model
    confirm_rounds: int = 0                 # re-measurements of the bests at the end (the CLI
                                            # and kdsl.search ask 3; a run recorded before
                                            # they existed resumes with none)
    confirm_top: int = 2                    # how many of the bests (the start comes too)
    profile: int = 0                        # the K best kernels profiled at the end (ncu on
                                            # cuda, perf on cpu); with K > 0 new bests are
                                            # profiled during the search too (0: none)
    profile_during: int = 3                 # new bests profiled during the search, at most
    stop_at_sol: float | None = None        # stop once a profiled best reaches this
                                            # fraction of speed-of-light (None: never)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def to_record(self) -> dict:
        d = asdict(self)
        d["backends"] = list(self.backends)
        return d

    @staticmethod
    def from_record(d: dict) -> "SearchSettings":
        """The settings a run's header recorded; ValueError naming the first bad field."""
        if not isinstance(d, dict):
            raise ValueError("the settings are not a record")
        known = set(SearchSettings.__dataclass_fields__)
        kw = {k: v for k, v in d.items() if k in known}
        for name in ("spec", "op"):
            if not isinstance(kw.get(name), str):
                raise ValueError(f"setting '{name}' is missing or not text")
        for name, value in kw.items():
            _check_type(name, value, getattr(_DEFAULTS, name, None))
        ev = kw.get("eval") or {}
        if not isinstance(ev, dict):
            raise ValueError("setting 'eval' is not a record")
        ev_known = set(EvalConfig.__dataclass_fields__)
        ev = {k: (tuple(v) if isinstance(v, list) else v) for k, v in ev.items() if k in ev_known}
        kw["eval"] = EvalConfig(**ev)
        kw["backends"] = tuple(kw.get("backends") or ("c",))
        return SearchSettings(**kw)


def _check_type(name: str, value, default) -> None:
    """A recorded value of the same kind as the field's default (None allowed where the
    default is None), so a hand-edited header fails here and not deep in a run."""
    if value is None or default is None:
        return
    kinds = {bool: (bool,), int: (int,), float: (int, float), str: (str,), dict: (dict,),
             tuple: (list, tuple)}.get(type(default))
    if kinds and (not isinstance(value, kinds) or
                  (isinstance(value, bool) and type(default) is not bool)):
        raise ValueError(f"setting '{name}' is {value!r}, not a {type(default).__name__}")


_DEFAULTS = SearchSettings(spec="", op="")
