"""What changed in a run since its last save: the ledger collects it, the run store journals it.

Saving a run appends only what changed (the tasks, checkpoints and turns touched, and the
run's small fields) to its journal, so a save costs what the change costs, not what the
run weighs. `full` asks for a whole snapshot instead (a run just loaded or recovered).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Changes:
    """Ids of the records changed since the last save."""

    tasks: set[str] = field(default_factory=set)
    checkpoints: set[str] = field(default_factory=set)
    jobs: set[str] = field(default_factory=set)
    all_jobs: bool = False
    """The set of turns was replaced as a whole (the run was cancelled or ended)."""
    full: bool = True
    """Save a whole snapshot (nothing is known about what the file on disk holds)."""

    def clear(self) -> None:
        """Everything is saved."""
        self.tasks.clear()
        self.checkpoints.clear()
        self.jobs.clear()
        self.all_jobs = self.full = False
