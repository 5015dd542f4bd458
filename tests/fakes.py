"""Fakes that pin down search logic without building or timing anything."""
from __future__ import annotations

from concurrent.futures import Future

from kdsl import backends
from kdsl.backends.base import Built, Gene, Space
from kdsl.search.result import Result

FAKE_SPACE = Space((Gene("a", tuple(range(1, 9)), ordered=True),
                    Gene("b", tuple(range(1, 9)), ordered=True),
                    Gene("mode", ("x", "y"))))


class FakeBackend:
    name = "fake"
    devices = ("cpu",)
    language = "python"

    def supports(self, op, device):
        return None

    def space(self, op, device):
        return FAKE_SPACE

    def render(self, op, genome, device):
        return f"# fake kernel {sorted(genome.items())}\n"

    def build(self, op, source, device):
        return Built(fn=lambda i, o, s: None)


def fake_reward(genes: dict) -> float:
    """A deterministic landscape with one peak at a=6, b=3, mode=y (reward 4)."""
    if genes.get("a") == 1 and genes.get("b") == 1:
        return 0.0  # a "broken" corner: fails
    r = 4.0 - 0.3 * abs(genes["a"] - 6) - 0.25 * abs(genes["b"] - 3)
    return max(r - (0.5 if genes["mode"] == "x" else 0.0), 0.05)


class FakeExecutor:
    """Evaluates instantly with ``fake_reward``; counts what it was asked."""

    def __init__(self, workers: int = 1):
        self.workers = workers
        self.submitted = 0

    def submit(self, job) -> Future:
        self.submitted += 1
        genes = job.candidate.genes
        r = fake_reward(genes)
        f: Future = Future()
        src = job.candidate.source
        if src is not None:  # free source (an LLM's): "# speed: X" says how fast it is
            if "# broken" in src:
                f.set_result(Result.failure("build", "SyntaxError: invalid syntax (line 3)",
                                            source=src, build_log="line 3: invalid syntax"))
                return f
            speed = [float(line.split(":")[1]) for line in src.splitlines()
                     if line.startswith("# speed:")]
            r = speed[0] if speed else 1.0
        if r == 0.0:
            f.set_result(Result.failure("correctness", "fake mismatch",
                                        source=f"# {genes}\n"))
        else:
            f.set_result(Result(True, "timing", time_ms=1.0 / r, baseline_ms=1.0,
                                baseline_name="eager",
                                artifacts={"source": src or f"# {genes}\n"}))
        return f

    def shutdown(self):
        pass


class ClampedFakeBackend(FakeBackend):
    """The fake space behind a launcher that clamps ``a`` to 4 at the bench point."""
    name = "fake_clamped"
    telling = True  # False: as a backend that cannot tell (None)

    def bench_identity(self, op, genome, device, dtype=None):
        return f"{min(genome['a'], 4)}:{genome['b']}:{genome['mode']}" if self.telling else None


def register() -> None:
    backends.REGISTRY["fake"] = FakeBackend()
    backends.REGISTRY["fake_clamped"] = ClampedFakeBackend()
