"""Cost models of the virtual engine: prefill seconds per cluster, KV bytes and the decode step,
from the control plane's ModelInputs (profile tables, speed factors applied). Tables stay
PiecewiseLinear; `Curve` (emulator/control/curve.py) evaluates one on a single float without numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from emulator.control.curve import Curve
from emulator.control.profiles import PiecewiseLinear
from emulator.control.throughput_model import ModelInputs
from emulator.control.types import Cluster

# Inside the local PD cluster KV moves over RDMA (the paper's 800 Gbps per node); a prefill -> decode
# hand-over there takes bytes / this rate, pipelined with the prefill like the cross-DC transfer.
LOCAL_RDMA_BYTES_PER_S = 800e9 / 8
# Layer-wise pipelining sends each layer's KV when that layer finishes; the last layer can only go
# after the prefill ends. ASSUMPTION: the case-study model has about this many layers of equal
# size (the paper gives no layer count for its 1T model; Kimi K2-class models have 61).
PIPELINE_LAYERS = 61
MAX_SENDS = 8  # a pipelined cache the link cannot keep up with goes in at most this many sends
LayerBytes = Callable[[int], tuple[int, ...]]  # each layer's bytes after so many tokens (model_stub's config)


Send = tuple[float, float, float]  # (seconds after the prefill starts, bytes, of them the late bytes)


def layer_sends(shares: tuple[float, ...], produce_s: float, num_bytes: float,
                send_bytes_per_s: float = 0.0) -> list[Send]:
    """When a cache shipped layer by layer hands its layers to the link, the last left out (it goes
    when the prefill ends). Layer i of n is done at (i + 1) / n of the prefill: the layers take
    about equal time (kimi-linear-mini's eight ended at 0.15, 0.27, 0.38, 0.49, 0.60, 0.71, 0.83
    and 1.0 of a 2,048-token prefill, its two MLA layers no slower than its linear ones).

    Each send goes at its last layer's end. Layers merge into one send while the link, at
    `send_bytes_per_s` (the transfer's share when it starts), clears the send before the next one
    is due: the cache then arrives as it would layer by layer, with a few events instead of one
    per layer (a fast link's case-study cache: 2 sends, not 60). Such a send's late bytes, its
    layers before its last, would have left already layer by layer, so they stand in no queue
    (FluidLink counts them out). Where the link cannot keep up (or no rate is given) runs of
    layers merge into at most MAX_SENDS sends, late bytes 0."""
    n = len(shares)
    times = [(i + 1) / n * produce_s for i in range(n - 1)]
    if send_bytes_per_s > 0:
        sends = _keeping_up(shares, times, produce_s, num_bytes, send_bytes_per_s)
        if len(sends) <= MAX_SENDS:
            return sends
    group = max(1, -(-(n - 1) // MAX_SENDS))
    sends = []
    share = 0.0
    for i in range(n - 1):
        share += shares[i]
        if (i + 1) % group == 0 or i == n - 2:
            sends.append((times[i], share * num_bytes, 0.0))
            share = 0.0
    return sends


def _keeping_up(shares: tuple[float, ...], times: list[float], produce_s: float, num_bytes: float,
                rate: float) -> list[Send]:
    """Sends from the last layer back: each takes the earlier layers the link clears at `rate`
    between its moment and the next send's (the prefill's end for the last)."""
    sends: list[Send] = []
    j, next_s = len(times) - 1, produce_s
    while j >= 0:
        room = rate * (next_s - times[j]) * (1.0 + 1e-9)
        last = size = shares[j] * num_bytes
        k = j - 1
        while k >= 0 and size + shares[k] * num_bytes <= room:
            size += shares[k] * num_bytes
            k -= 1
        sends.append((times[j], size, size - last))
        next_s, j = times[j], k
    sends.reverse()
    return sends


@dataclass(frozen=True, slots=True)
class CostModel:
    """What work costs in simulated time and bytes.

    `prefill_s[cluster](l)`: one instance's T_prefill for l uncached tokens (speed factor applied);
    `kv_bytes(l)`: S_kv, the KV cache a prefill of an l-token prompt hands to decode;
    `decode_step_s`: T_decode, the same for every batch size up to BS_max (as the paper's Eq. 5),
    unless `decode_batch` gives the step by batch size (a profile's decode_step_ms_by_batch).
    `busy_slowdown[n - 1]`: the factor every worker's compute takes while n workers are busy on the
    one host they share (a profile's `host`; empty: no sharing), `host_cores` its cores.
    `decode_context(tokens)`: the step's factor at a batch's mean context over the context the batch
    table was timed at (a profile's decode_context_*; None: the table's step at any context).
    """

    prefill_s: dict[Cluster, Curve]
    kv_bytes: Curve
    decode_step_s: float
    max_decode_batch: int
    source: str
    pipeline_layers: int = PIPELINE_LAYERS
    local_rate_bytes_per_s: float = LOCAL_RDMA_BYTES_PER_S
    decode_batch: Curve | None = None
    busy_slowdown: tuple[float, ...] = ()
    host_cores: int = 0
    kv_tail_bytes: Curve | None = None  # the last layer's bytes by length, measured; None: 1 / pipeline_layers
    decode_context: Curve | None = None
    layer_bytes: LayerBytes | None = None  # the model's own layers (a model_stub preset); None: equal layers

    @classmethod
    def from_inputs(cls, inputs: ModelInputs, source: str, *, pipeline_layers: int = PIPELINE_LAYERS,
                    local_rate_bytes_per_s: float = LOCAL_RDMA_BYTES_PER_S,
                    decode_batch: PiecewiseLinear | None = None, busy_slowdown: tuple[float, ...] = (),
                    host_cores: int = 0, kv_tail_bytes: PiecewiseLinear | None = None,
                    decode_context: PiecewiseLinear | None = None, layer_bytes: LayerBytes | None = None) -> CostModel:
        prefill = {Cluster.REMOTE: Curve.from_table(inputs.prefill_remote_s),
                   Cluster.LOCAL: Curve.from_table(inputs.prefill_local_s)}
        batch = None if decode_batch is None else Curve.from_table(decode_batch)
        context = None if decode_context is None else Curve.from_table(decode_context)
        tail = None if kv_tail_bytes is None else Curve.from_table(kv_tail_bytes)
        return cls(prefill, Curve.from_table(inputs.kv_bytes), inputs.decode_step_s, inputs.max_decode_batch,
                   source, pipeline_layers, local_rate_bytes_per_s, batch, busy_slowdown, host_cores, tail,
                   context, layer_bytes)

    def decode_s(self, output_len: int) -> float:
        """Time a request holds a decode slot: its first token comes from the prefill and is
        delivered when it joins the batch; each further token takes one step (as the live engine)."""
        return max(output_len - 1, 0) * self.decode_step_s

    @property
    def is_timed_by_batch(self) -> bool:
        """Whether a decode's step depends on what else runs (its batch, the shared host)."""
        return self.decode_batch is not None or bool(self.busy_slowdown) or self.decode_context is not None

    def decode_step_at(self, batch_size: int, context_tokens: float) -> float:
        """One step of a batch of `batch_size` whose caches hold `context_tokens` each on average
        (T_decode when no batch table was given; the table's context when no context curve was)."""
        curve, context = self.decode_batch, self.decode_context
        step_s = self.decode_step_s if curve is None else curve(float(batch_size))
        return step_s if context is None else step_s * context(context_tokens)

    def slowdown(self, num_busy: int) -> float:
        """The shared host's factor with `num_busy` workers busy (the table's; past its end the
        machine is shared evenly: the last factor times num_busy / max(table length, cores))."""
        table = self.busy_slowdown
        size = len(table)
        if size == 0 or num_busy <= 1:
            return 1.0 if size == 0 else table[0]
        if num_busy <= size:
            return table[num_busy - 1]
        spread = num_busy / max(size, self.host_cores)
        return table[size - 1] * (spread if spread > 1.0 else 1.0)

    def layer_shares(self, input_len: float) -> tuple[float, ...]:
        """Each layer's share of a cache of `input_len` tokens, in the order a prefill produces them:
        the last the profile's measured last layer (else its share of the model's own layers, else
        1 / pipeline_layers); the others split the rest as the model's own layers do when it is a
        model_stub preset (a few attention layers hold most bytes), else equally."""
        sizes = self.layer_bytes(max(1, int(input_len))) if self.layer_bytes is not None else ()
        total = float(sum(sizes))
        n = len(sizes) if total > 0 else self.pipeline_layers
        if self.kv_tail_bytes is not None:
            tail = min(1.0, self.kv_tail_bytes(input_len) / self.kv_bytes(input_len))
        else:
            tail = sizes[-1] / total if total > 0 else 1.0 / n
        head = total - sizes[-1] if total > 0 else 0.0
        if head > 0:
            return tuple(size / head * (1.0 - tail) for size in sizes[:-1]) + (tail,)
        return ((1.0 - tail) / (n - 1),) * (n - 1) + (tail,) if n > 1 else (1.0,)

    def tail_fraction(self, input_len: float) -> float:
        """The share of a KV cache of `input_len` tokens that can only be sent once the prefill has ended."""
        return self.layer_shares(input_len)[-1]

    def layer_sends(self, input_len: float, produce_s: float, num_bytes: float,
                    send_bytes_per_s: float = 0.0) -> list[Send]:
        """When a prefill of `produce_s` hands the link each layer of its cache but the last (layer_sends)."""
        return layer_sends(self.layer_shares(input_len), produce_s, num_bytes, send_bytes_per_s)

    def as_meta(self) -> dict[str, object]:
        meta: dict[str, object] = {
            "source": self.source, "decode_step_s": self.decode_step_s,
            "max_decode_batch": self.max_decode_batch, "pipeline_layers": self.pipeline_layers,
            "local_rate_gbps": self.local_rate_bytes_per_s * 8e-9}
        if self.layer_bytes is not None:
            meta["kv_layers"] = "the model's own"
        elif self.kv_tail_bytes is None:
            meta["kv_tail_fraction"] = 1.0 / self.pipeline_layers
        else:
            meta["kv_tail_bytes"] = {"tokens": list(self.kv_tail_bytes.xs), "bytes": list(self.kv_tail_bytes.ys)}
        if self.decode_batch is not None:
            meta["decode_step_s_by_batch"] = {"batch_sizes": list(self.decode_batch.xs),
                                              "step_s": list(self.decode_batch.ys)}
        if self.decode_context is not None:
            meta["decode_context"] = {"tokens": list(self.decode_context.xs), "factor": list(self.decode_context.ys)}
        if self.busy_slowdown:
            meta["host"] = {"cores": self.host_cores, "busy_slowdown": list(self.busy_slowdown)}
        return meta
