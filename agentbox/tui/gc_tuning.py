"""Garbage-collector settings for the TUI process: keep full collections from stalling redraws.

With a big run open the process holds a few hundred thousand objects (the run's models,
Textual's widgets and caches). Python's defaults then run a full collection every second
or so while the screen redraws, each a 100–400 ms pause, which a person feels as a key
that did nothing. Fewer, later collections and freezing what was alive once a run is open
keep key-to-repaint under 100 ms (bench/bench_tui_bigrun.py measures it).
"""

from __future__ import annotations

import gc

THRESHOLDS = (5000, 50, 100)
"""Young-generation size and how many young/middle collections come before an older one."""


def tune() -> None:
    """Apply THRESHOLDS (the TUI owns its process; the CLI never imports this)."""
    gc.set_threshold(*THRESHOLDS)


def freeze() -> None:
    """Move everything alive now out of the collector's scans.

    Frozen objects are still freed by reference counting when dropped (the run's models
    are); only cyclic garbage made of them (tree nodes removed later) is kept, which is
    bounded by what was on screen when this ran.
    """
    gc.freeze()
