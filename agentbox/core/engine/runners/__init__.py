"""Runners: where a turn runs. The engine hands each turn to one `TurnRunner` (see `base`).

`local` (`local.LocalRunner`) runs it on this machine, admitted only when the machine has
memory and CPU for it (`admission`). The user's config.yaml names the runner
(`runner: {kind: local}`); crew.yaml never does.
"""

from __future__ import annotations

from agentbox.core.engine.runners.base import TurnRunner


def configured_runner() -> TurnRunner:
    """The runner the user's config.yaml names (the local one by default)."""
    from agentbox.core.engine.runners.admission import AdmissionLimits
    from agentbox.core.engine.runners.local import LocalRunner
    from agentbox.core.user_config import load_user_config

    config = load_user_config().runner
    return LocalRunner(limits=AdmissionLimits(reserve_mb=config.reserve_mb, max_load_per_cpu=config.max_load_per_cpu))
