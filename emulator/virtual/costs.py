"""Cost models of the virtual engine: prefill seconds per cluster, KV bytes and the decode step,
from the control plane's ModelInputs (profile tables, speed factors applied). Tables stay
PiecewiseLinear; `Curve` (emulator/control/curve.py) evaluates one on a single float without numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.control.curve import Curve
from emulator.control.throughput_model import ModelInputs
from emulator.control.types import Cluster

# Inside the local PD cluster KV moves over RDMA (the paper's 800 Gbps per node); a prefill -> decode
# hand-over there takes bytes / this rate, pipelined with the prefill like the cross-DC transfer.
LOCAL_RDMA_BYTES_PER_S = 800e9 / 8
# Layer-wise pipelining sends each layer's KV when that layer finishes; the last layer can only go
# after the prefill ends. ASSUMPTION: the case-study model has about this many layers of equal
# size (the paper gives no layer count for its 1T model; Kimi K2-class models have 61).
PIPELINE_LAYERS = 61


@dataclass(frozen=True, slots=True)
class CostModel:
    """What work costs in simulated time and bytes.

    `prefill_s[cluster](l)`: one instance's T_prefill for l uncached tokens (speed factor applied);
    `kv_bytes(l)`: S_kv, the KV cache a prefill of an l-token prompt hands to decode;
    `decode_step_s`: T_decode, the same for every batch size up to BS_max (as the paper's Eq. 5).
    """

    prefill_s: dict[Cluster, Curve]
    kv_bytes: Curve
    decode_step_s: float
    max_decode_batch: int
    source: str
    pipeline_layers: int = PIPELINE_LAYERS
    local_rate_bytes_per_s: float = LOCAL_RDMA_BYTES_PER_S

    @classmethod
    def from_inputs(cls, inputs: ModelInputs, source: str, **overrides: float) -> CostModel:
        prefill = {Cluster.REMOTE: Curve.from_table(inputs.prefill_remote_s),
                   Cluster.LOCAL: Curve.from_table(inputs.prefill_local_s)}
        return cls(prefill, Curve.from_table(inputs.kv_bytes), inputs.decode_step_s,
                   inputs.max_decode_batch, source, **overrides)  # type: ignore[arg-type]

    def decode_s(self, output_len: int) -> float:
        """Time a request holds a decode slot: its first token comes from the prefill and is
        delivered when it joins the batch; each further token takes one step (as the live engine)."""
        return max(output_len - 1, 0) * self.decode_step_s

    @property
    def tail_fraction(self) -> float:
        """The share of a KV cache that can only be sent once the prefill has ended."""
        return 1.0 / self.pipeline_layers

    def as_meta(self) -> dict[str, object]:
        return {"source": self.source, "decode_step_s": self.decode_step_s,
                "max_decode_batch": self.max_decode_batch, "pipeline_layers": self.pipeline_layers,
                "local_rate_gbps": self.local_rate_bytes_per_s * 8e-9}
