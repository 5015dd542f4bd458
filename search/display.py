"""Progress of a running search: a live rich display, or plain log lines with --quiet."""
from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .engine import Display, Stats


class LiveDisplay(Display):
    def __init__(self, title: str):
        self.title = title
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("best [green]{task.fields[best]:.3f}x[/]"),
            TextColumn("failed [red]{task.fields[failed]}[/]"),
            TextColumn("{task.fields[rate]:.2f} eval/s"), TimeElapsedColumn(),
            console=Console(stderr=True), transient=False)
        self.task = None

    def start(self, stats: Stats) -> None:
        self.progress.start()
        self.task = self.progress.add_task(self.title, total=stats.budget, best=0.0, failed=0,
                                           rate=0.0)

    def update(self, stats: Stats, record: dict) -> None:
        self.progress.update(self.task, completed=stats.done, best=stats.best_speedup,
                             failed=stats.failures, rate=stats.rate)

    def stop(self, stats: Stats) -> None:
        self.progress.stop()


class LogDisplay(Display):
    """One line per evaluation on stderr (for --quiet, logs and CI)."""

    def __init__(self, stream=None, every: int = 1):
        self.stream = stream or sys.stderr
        self.every = every

    def update(self, stats: Stats, record: dict) -> None:
        if stats.done % self.every:
            return
        r = record["result"]
        status = f"{r['speedup']:.3f}x" if r.get("ok") else f"failed at {r.get('stage')}"
        print(f"[{stats.done}/{stats.budget}] node {record['id']} {record['operator']}: "
              f"{status}; best {stats.best_speedup:.3f}x", file=self.stream, flush=True)


class QuietDisplay(Display):
    pass
