"""Runners: where a turn runs. The engine hands each turn to one `TurnRunner` (see `base`).

`local` (`local.LocalRunner`) runs it on this machine, admitted only when the machine has
memory and CPU for it (`admission`); `ray` (`ray_runner.RayRunner`) runs it on a node of a
Ray cluster. The user's config.yaml names the runner (`runner: {kind: ray, address: …}`);
crew.yaml never does.
"""

from __future__ import annotations

from agentbox.core.engine.runners.base import TurnRunner


def configured_runner() -> TurnRunner:
    """The runner the user's config.yaml names (the local one by default)."""
    from agentbox.core.config.user_config import load_user_config
    from agentbox.core.engine.runners.admission import AdmissionLimits
    from agentbox.core.engine.runners.local import LocalRunner

    config = load_user_config().runner
    if config.kind == "ray":
        from agentbox.core.engine.runners.ray_runner import RayRunner

        assert config.address is not None  # the config's validation says so
        return RayRunner(config.address, cpus_per_turn=config.cpus_per_turn)
    return LocalRunner(limits=AdmissionLimits(reserve_mb=config.reserve_mb, max_load_per_cpu=config.max_load_per_cpu))
