"""The emulator's error hierarchy: each error carries one line naming the field, value and fix."""

from __future__ import annotations


class PrfaasError(Exception):
    """Base of every error the emulator raises on purpose; the CLI prints it and exits 2."""


class ScenarioError(PrfaasError):
    """A scenario file, --set override or control message is invalid."""


class LinkSpecError(ScenarioError):
    """A link specification is invalid (negative delay, NaN rate, ...)."""


class LinkBackendUnavailable(PrfaasError):
    """A link backend cannot run here; the message says why (no root, kernel lacks sch_netem, ...)."""


class TopologyError(PrfaasError):
    """Creating or tearing down namespaces, devices or relays failed."""


class TransportError(PrfaasError):
    """A KV transfer or the monitoring of its connections cannot go on."""


class TcpInfoError(TransportError):
    """A socket cannot be sampled, or a TCP_INFO buffer is too short to be one."""


class TelemetryError(PrfaasError):
    """A broker URL, control message or recorded run is invalid, or the embedded broker cannot start."""


class RunFileError(TelemetryError):
    """A file of a run or sweep folder cannot be read safely (a link, not a regular file, over its size
    cap, nested too deep, outside the folder): names the file and the reason, never its content."""

    def __init__(self, where: str, reason: str, fix: str = "record the run again, or remove the folder") -> None:
        super().__init__(f"{where}: {reason}; {fix}")
        self.where, self.reason = where, reason


class RecordError(TelemetryError):
    """A run's record cannot be written (disk full, permission denied, read-only): names the file and
    the cause. What was written before stays whole; summary.json, written last, is never half there."""


class RunIdError(PrfaasError, ValueError):
    """A run id is not one: 6 lowercase hex digits (emulator/net/names.py checks it, wherever it enters)."""


class WorkerError(PrfaasError):
    """A live worker's command line, control message or request is invalid."""


class CalibrationError(PrfaasError):
    """`calibrate --machine` could not measure: a probe process failed, stalled or answered nonsense."""
