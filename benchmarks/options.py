"""What one run of ``python -m benchmarks`` is asked to measure: read by the suite that
runs the cases and by the report that describes the run."""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.cases import Sizes


@dataclass(frozen=True)
class Options:
    stores: list[str]
    items: int
    repeat: int
    backlogs: list[int]
    samples: int
    concurrency: int
    pgbench_seconds: float
    postgres_url: str | None
    #: Words naming the cases to run (all when empty): a case runs if its name has one.
    cases: list[str] = field(default_factory=list)
    #: SQLite's ``synchronous`` setting, passed in the store's URL.
    sqlite_synchronous: str = "full"

    @property
    def sizes(self) -> Sizes:
        return Sizes(items=self.items, concurrency=self.concurrency)
