"""The one definition of a timeseries.parquet row, which both engines' samplers build and the
recorder writes: column names (units in the names, rates in bit/s), which engine leaves which
column empty, and the upgrade of frames that earlier versions recorded. No I/O and no pandas import:
the recorder writes rows, `load_run` upgrades what it reads.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import pandas as pd

BIT_PER_MBIT = 1e6
BIT_PER_GBIT = 1e9


class TimeseriesRow(NamedTuple):
    """One sample of a run: the virtual sampler's, every simulated second, or the live engine's
    MetricsSnapshot as the recorder flattens it, every 0.5 s. Every field is required, so a
    sampler that misses a column fails where it builds the row; None means "not measured" and is
    stored as NaN (every column is float64 on disk). A tuple: the virtual sampler builds one per
    simulated second, and a frozen dataclass costs several times as much to build.

    Empty by engine, and why:
    - live leaves `num_decode_active` and `num_transfers_active` empty: the recorder reads the
      MetricsSnapshot the gateway publishes, which carries queue depths, not decode batch sizes or
      KV transfers in flight.
    - live leaves `retrans_rate` and `rtt_ms` empty until a remote prefill worker has reported its
      TCP statistics; virtual fills them from the link's settings (its fluid link has no TCP):
      `retrans_rate` is the configured loss fraction, `rtt_ms` both directions' delay.
    - both leave `link_capacity_bit_per_s` and `link_utilization` empty on an unshaped link;
      virtual leaves `egress_bit_per_s` and `link_utilization` empty in its first sample (no
      interval yet), where live reports 0.
    - `link_utilization` is the busy fraction of the interval on virtual's fluid link, and egress
      over the interval's time-weighted capacity on live (so a sample across a link change is not
      measured against the new capacity alone).
    - `egress_bit_per_s` never exceeds the capacity in force over its interval (the higher one across
      a link change), beyond the link's own granularity: both samplers measure through
      emulator.telemetry.egress.EgressMeter, which refuses such a sample as a bug (issue 26).
    - `num_local_prefill`: live counts the snapshot's roles (local nodes in the prefill role).
    """

    t_s: float  # seconds since the run started
    threshold_tokens: int | None  # the router's threshold t
    egress_bit_per_s: float | None  # KV bytes sent remote -> local over the last interval, as bit/s
    link_capacity_bit_per_s: float | None  # the remote -> local shaping rate; None when unshaped
    link_utilization: float | None  # a fraction, 0..1
    queue_remote_prefill: int | None  # requests waiting, summed over the pool
    queue_local_prefill: int | None
    queue_decode: int | None
    ttft_p50_s: float | None  # over the TTFT window (completed requests)
    ttft_p90_s: float | None
    in_flight: int | None  # requests arrived and not yet ended
    completed: int | None  # since the start
    failed: int | None
    retrans_rate: float | None  # a fraction of segments sent
    rtt_ms: float | None
    num_local_prefill: int | None  # local instances in the prefill role (the split's n_p)
    num_decode_active: int | None  # requests in a decode batch
    num_transfers_active: int | None  # KV transfers on the remote -> local link

    def as_dict(self) -> dict[str, float | None]:
        """Column name -> value, in COLUMNS order (the recorder's `add_sample` keywords)."""
        return dict(zip(COLUMNS, self, strict=True))


COLUMNS: tuple[str, ...] = TimeseriesRow._fields

# Columns earlier versions recorded under another name or unit: old name -> (name, factor).
RENAMED: dict[str, tuple[str, float]] = {
    "egress_mbit": ("egress_bit_per_s", BIT_PER_MBIT),
    "link_capacity_mbit": ("link_capacity_bit_per_s", BIT_PER_MBIT),
    "n_p": ("num_local_prefill", 1.0),
    "decode_active": ("num_decode_active", 1.0),
    "transfers_active": ("num_transfers_active", 1.0),
}


def upgrade_timeseries(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` (a timeseries.parquet read back) with today's columns: old names renamed and
    converted (Mbit/s to bit/s), a column the recording lacks added as NaN, COLUMNS first and any
    other column kept after them. A current frame comes back with the same values."""
    frame = frame.copy()
    for old, (new, factor) in RENAMED.items():
        if old in frame.columns:
            values = frame.pop(old).astype("float64") * factor
            if new not in frame.columns:
                frame[new] = values
    for name in COLUMNS:
        if name not in frame.columns:
            frame[name] = math.nan
    extra = [name for name in frame.columns if name not in COLUMNS]
    return frame[[*COLUMNS, *extra]].astype({name: "float64" for name in COLUMNS})


RATE_COLUMNS = ("egress_bit_per_s", "link_capacity_bit_per_s")


def rate_unit(peak_bit_per_s: float) -> tuple[str, float]:
    """(label, bit/s per unit) to show rates up to `peak_bit_per_s`: Gbit/s from 1 Gbit/s up,
    Mbit/s below (and when nothing was measured)."""
    if math.isfinite(peak_bit_per_s) and peak_bit_per_s >= BIT_PER_GBIT:
        return "Gbit/s", BIT_PER_GBIT
    return "Mbit/s", BIT_PER_MBIT


def frame_rate_unit(frame: pd.DataFrame) -> tuple[str, float]:
    """`rate_unit` for the largest egress or link capacity in `frame` (either column may be absent)."""
    rates = frame.reindex(columns=list(RATE_COLUMNS)).astype("float64")
    return rate_unit(float(rates.max().max()) if not rates.empty else math.nan)
