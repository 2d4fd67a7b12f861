"""summary.json's `meta` built from a scenario and its control plane, the same way for both engines.

The record itself (RunMeta) lives in emulator.telemetry.run_meta, below scenario and plane; this
builder reads both, so it sits above them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from emulator.plane import ControlPlane
from emulator.scenario import Scenario
from emulator.telemetry.outcome import RunOutcome
from emulator.telemetry.run_meta import EngineKind, RunMeta


def make_run_meta(scenario: Scenario, plane: ControlPlane, *, engine: EngineKind,
                  link_backend: str, link_backend_reason: str, run_id: str | None = None,
                  decisions: Sequence[str] = (), knob_changes: Sequence[str] = (),
                  notes: Sequence[str] = (), end_reason: str = "run ended",
                  outcome: RunOutcome = RunOutcome.FINISHED, stopped_by: str | None = None,
                  stopped_at_s: float | None = None, workload: Mapping[str, Any] | None = None,
                  control_events: Sequence[Mapping[str, Any]] = (),
                  engine_details: Mapping[str, Any] | None = None) -> RunMeta:
    """The common part from the scenario and its control plane, read the same way for both
    engines; the engine passes what only it knows."""
    router, link, model, scheduler = scenario.router, scenario.link, scenario.model, plane.scheduler
    return RunMeta(
        engine=engine.value, scenario=scenario.name, seed=scenario.seed, run_id=run_id,
        model=None if model.preset is None else f"{model.preset} ({model.preset_size})",
        profile=plane.profile_source, policy=router.policy.value,
        prefix_rule=router.prefix_rule.value, affinity=router.affinity.value,
        scheduler=None if scheduler is None else {"short_term": scheduler.config.short_term_enabled,
                                                  "long_term": scheduler.config.long_term_enabled},
        threshold_start=plane.threshold, n_p_start=plane.n_p,
        lambda_max_model=plane.plan.prfaas.lambda_max,
        link={"bandwidth_mbit": link.bandwidth_mbit, "delay_ms": link.delay_ms, "loss_pct": link.loss_pct},
        link_backend=link_backend, link_backend_reason=link_backend_reason,
        transport=scenario.transport.model_dump(mode="json"), decisions=list(decisions),
        knob_changes=list(knob_changes), notes=list(notes), end_reason=end_reason,
        outcome=outcome.value, stopped_by=stopped_by, stopped_at_s=stopped_at_s,
        workload=dict(workload or {}), control_events=[dict(event) for event in control_events],
        engine_details=dict(engine_details or {}),
    )
