"""The hardware catalog: devices known by name with the paper's case-study profile of its 1T hybrid
model (../shared/paper-model.md, Table 5 and this project's H20 ASSUMPTION), as ProfileTables.
Tables only: scenarios still carry their own `model.profile`; `profile_document` writes one.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.errors import ScenarioError
from emulator.plane.inputs import MIB, ProfileTables

CASE_STUDY_MODEL = "internal-1t-kimi-linear"
CASE_STUDY_LENGTHS = (1024, 8192, 32768, 131072)
CASE_STUDY_KV_MIB = (190.8, 308.9, 701.3, 2316.3)


@dataclass(frozen=True, slots=True)
class Device:
    """One 8-GPU instance kind running the case-study model."""

    name: str
    description: str
    prefill_s: tuple[float, ...]  # T_prefill at CASE_STUDY_LENGTHS
    decode_step_s: float | None  # None: the paper only prefills on it
    source: str


DEVICES: dict[str, Device] = {
    "h200": Device("h200", "8 x NVIDIA H200, the remote PrfaaS prefill instance",
                   (0.44, 0.72, 1.84, 7.40), None, "paper Table 5 (SGLang 0.5.9)"),
    "h20": Device("h20", "8 x NVIDIA H20, the local PD instance (prefill or decode)",
                  (1.00, 1.543, 5.017, 21.0), 0.025,
                  "ASSUMPTION of this project: prefill calibration; decode at the 40 tokens/s SLO"),
}


def device(name: str) -> Device:
    """A catalog device; ScenarioError naming the known ones otherwise."""
    if name not in DEVICES:
        raise ScenarioError(f"device {name!r}: not in the hardware catalog; use one of "
                            f"{', '.join(DEVICES)} or give model.profile tables for it")
    return DEVICES[name]


def case_study_tables(devices: tuple[str, ...] = tuple(DEVICES)) -> ProfileTables:
    """The case-study profile for the named devices, in bytes and seconds."""
    chosen = [device(name) for name in devices]
    return ProfileTables(
        source=f"catalog {CASE_STUDY_MODEL} ({', '.join(d.name for d in chosen)})",
        lengths=tuple(map(float, CASE_STUDY_LENGTHS)),
        kv_bytes=tuple(m * MIB for m in CASE_STUDY_KV_MIB),
        prefill_s={d.name: d.prefill_s for d in chosen},
        decode_step_s={d.name: d.decode_step_s for d in chosen if d.decode_step_s is not None},
    )


def profile_document(tables: ProfileTables, name: str, digits: int = 4) -> dict[str, object]:
    """A scenario's `model.profile` mapping (MiB, seconds, ms) holding `tables`."""
    return {
        "name": name,
        "lengths_tokens": [int(round(x)) for x in tables.lengths],
        "kv_mib": [_round(b / MIB, digits) for b in tables.kv_bytes],
        "prefill_s": {dev: [_round(s, digits) for s in times] for dev, times in tables.prefill_s.items()},
        "decode_step_ms": {dev: _round(s * 1e3, digits) for dev, s in tables.decode_step_s.items()},
    }


def _round(value: float, digits: int) -> float:
    """`digits` significant digits, never rounded to zero (the schema wants positive values)."""
    rounded = float(f"{value:.{digits}g}")
    return rounded if rounded > 0 else float(f"{value:.1e}")
