"""What the virtual link knows of TCP as the live link carries KV: the loss-limited rate of one
connection, slow start on new connections, and when the bottleneck's queue locks newcomers out.
Pure numbers: link.py puts them into the fluid. Constants are fitted to bench/link_tcp.py (tun
backend, the project's KVSender: 4 cubic connections, tcp_slow_start_after_idle=0). The live
namespaced links run at a 9,000-byte MTU (emulator.net.topology): a segment carries 8,948 bytes
(ss -ti reads mss:8948), a full packet takes 9,000 in the tun shaper's queue (it counts IP
packets; netem and htb count 14 more, 0.15 %), so a cache takes 0.6 % more of the link than its
bytes (WIRE_PER_BYTE: the fluid counts wire bytes, as the live egress meter does) and the
1,000-packet queue holds 9 MB (7.2 s at 10 Mbit/s).

- LOSS_C: one connection carries LOSS_C * MSS / RTT / sqrt(p): Mathis et al.'s form, whose
  constant (1.22 for periodic loss) the tun link's random loss with SACK/RACK puts at about 1.3
  with the link's real segment. At 200 Mbit/s, 40 ms RTT, 4 connections: 0.5 % loss carried
  16 MB at ~20 MB/s and 1 % at 6.7-16 MB/s (+15..+44 % on 1-16 MB at both losses, -41 % on
  back-to-back 16 MB at 1 %). (Fitted against a 1,448-byte segment, the same rates read 8.0, "6.5
  times Mathis": the segment was six times too small.) RFC 8312's cubic region (W ~ (RTT/p)^0.75)
  is far below all of these at such RTTs; the Mathis shape stays.
- Caches sent layer by layer as their prefill produces them (the live workers' pipelining) take
  the same constant per connection. Each layer goes when it ends (link.py): kimi-linear-mini's
  small linear layers first, its MLA layers at the middle and at the end. A layer is striped in
  CHUNK_BYTES chunks, one connection each, so the last layer, sent after the prefill, rides as
  many connections as it has chunks and ends with its largest (`tail_lanes`): kimi-linear-mini's
  1.0-1.3 MB last layer is one 1 MiB chunk and a rest, one connection's loss-limited rate.
  bench/link_tcp.py --pipelined (3.1 MB caches, 40 ms RTT, 12 each, quiet machine, 2026-12-06):
  lossless rows within 2-6 % of the fluid; at 0.5 % and 1 % loss the fluid with 1.3 is 5-24 %
  slow (the prefill rows fit 1.75, the synthetic 2.25). Again at 4952f54, the prefill rows at 1 %
  fit the fluid within 1 % on a quiet machine (constant 1.25, bench/results/link_tcp_pipelined_quiet.json)
  and within 3 % with two busy loops on both cores (1.6, ..._loaded.json): the relay's CPU is not
  what makes the live matrix's lossy caches come later than the fluid says; idle spells, a
  sender's shared connections and the spread are (below, and README, Fidelity). 1.3, the whole
  caches' fit, stays.
- Idle spells: tcp_slow_start_after_idle=0 keeps a window from restarting, but Linux still shrinks
  an application-limited window once per RTO of idling (RFC 7661's cwnd validation), and on a
  lossy link it regrows slowly. A worker's caches come seconds apart (the fidelity matrix's
  pace): the prefill rows 1.5 s apart take 0.81 s against 0.68 s 0.3 s apart at 1 % loss, 0.55
  against 0.48 at 0.5 % (bench/link_tcp.py --pipelined, bench/results/link_tcp_pipelined.json),
  fitting LOSS_C_AFTER_IDLE 1.25 where the rows 0.3 s apart fit 1.9; in a one-off run, 16 each
  at 1 %, 0.95 against 1.45. A pipelined cache that starts on a link idle for longer than
  RTO_MIN_S plus a round trip rides LOSS_C_AFTER_IDLE (the link's idle, not each sender's: the
  matrix has one remote sender). Whole caches keep LOSS_C, whose fit includes whole caches sent
  after a 1 s gap.
- A sender's connections: a live prefill worker keeps one sender, 4 connections fed from one chunk
  queue, per decode worker, so its caches take them in the order they started: a newer cache's
  chunks ride the loss-limited windows the older ones' chunks leave free (link.py). The matrix's
  1 % loss run, replayed: the caches whose prefill began while the previous one was still on the
  way took 0.46 s after their prefill live, 0.35 in the fluid that gave each its own connections.
- Spread: Mathis gives a connection's mean; a cache sees a handful of random loss events (1 % of
  its ~340 segments on the matrix's caches), so its time after the prefill spreads around that
  mean, the wider the fewer events it expects: the prefill rows' standard deviation over mean
  times the square root of their expected events is 0.62 (bench/results/link_tcp_pipelined.json;
  0.51 quiet, 0.86 loaded). The engine draws each cache's loss-limited rate once, at its start,
  from a lognormal whose time has mean 1 and that spread (`loss_time_cv`, `loss_time_factor`); a
  large cache expects many events and keeps close to the mean (the live matrix at 1 % loss:
  its remote caches' time after the prefill spreads 0.34 of its mean, the mean fluid's 0.15).
- Slow start: a new connection opens at INITIAL_WINDOW segments (358 KB for 4 connections at this
  MTU) and doubles each RTT. The live
  network sets tcp_slow_start_after_idle=0 (emulator/net/netns.tune_tcp), so a window, once open,
  survives idle gaps: measured transfers after a 1 s gap took what back-to-back ones did.
- Standing queue: the senders' windows stay open (no loss on a deep buffer, no idle restart), so
  every byte produced and not yet delivered is in flight and whatever exceeds the BDP waits in the
  bottleneck's queue; the senders' smoothed RTT is the base RTT plus SRTT_QUEUE_SHARE of the
  longest wait since it last sent, and holds while they are idle (the kernel's srtt has no new
  sample then). Live runs on the tun link (base 20 ms): the last layer's burst (~1 MB) left 35 ms at
  200 Mbit/s and 86 ms (median, 135 max) at 50; at 10 Mbit/s back-to-back caches queued up to 5.3 s.
- Lockout: with a drop-tail buffer deeper than the path's BDP, the incumbents' open windows keep
  the queue full and a newcomer's packets are dropped at its tail; the link then serves transfers
  nearly in the order they started (20 Mbit/s, 10 ms: a 1 MB transfer started 1.6 s into a 16 MB
  one ended with it, 5.4 s later, where a fair share gives 0.84 s). With a shallow buffer the
  connections share fairly. When the incumbents are gone, the oldest newcomers whose bytes fit in
  the buffer together take their place, the later ones wait on: the live sender feeds its
  connections from one chunk queue, so a backlog deeper than the buffer drains in the order it
  started, each buffer's worth sharing the link (the 2026-12-06 sim_vs_live matrix replayed, TTFT
  mean against live: at 10 Mbit/s, a backlog of up to a minute, letting all newcomers in at once
  read +19.1 %, one at a time -4.7 %, a buffer's worth -4.2 %; at 50 Mbit/s, bursts within the
  buffer, -2.4, -6.0 and -2.4 %).
- One sender's chunks: its 4 connections take 1 MiB chunks from one queue in order, so on a
  lossless link its older cache rides as many connections as it has chunks left and the newer
  ones the rest (transfer.sender_lanes); the caches of a sender finish staggered, in order, where
  a buffer's worth sharing the link had them finish together. The matrices' 10 Mbit/s rows with a
  shallow backlog (TTFT about 2.2 s; live, three caches queued behind one another finished at
  82.0, 84.2 and 86.6 s, the fluid's all at 86.7) read +11.1 and +10.6 % before, +5.0 and +4.7 %
  after; the deep backlogs (TTFT 15-28 s) moved 3-6 points shorter and stay within 5 % (-2.9 to
  -4.8 %); bench/link_overload.py: 11 Mbit/s offered +1.1 % (+6.6 before), 15 Mbit/s -12.4 %
  (-5.0 before: in that overload the live caches come later than the holds give).
- Connections share the bottleneck equally, so a transfer weighs as many as carry it: a cache's
  last layer on its chunks' lanes (`tail_lanes`) takes that many parts of a busy link, not a
  whole transfer's share (same replay: 10 Mbit/s -4.2 -> -3.8 %, 50 Mbit/s -2.4 -> -2.0 %, the
  bandwidth drop -9.3 -> -8.6 %).
"""

from __future__ import annotations

import math
import random

from emulator.transport.frames import CHUNK_BYTES

LINK_MTU = 9000  # the live namespaced links' (emulator.net.topology.Topology's default)
TCP_IP_HEADER_BYTES = 52  # IPv4 20 + TCP 20 + the timestamp option 12
MSS_BYTES = LINK_MTU - TCP_IP_HEADER_BYTES  # 8,948: what ss -ti reads on the live link
PACKET_BYTES = LINK_MTU  # what one full segment occupies in the shaper's queue (IP bytes, tun)
WIRE_PER_BYTE = PACKET_BYTES / MSS_BYTES  # the shaper's bytes per KV byte: headers, 0.6 %
MATHIS_C = math.sqrt(1.5)  # ~1.22: Mathis et al. 1997, periodic loss, no delayed ACKs
LOSS_C = 1.3  # fitted to the tun link at 200 Mbit/s, 40 ms (see above), whole caches and pipelined
LOSS_C_AFTER_IDLE = 1.1  # a pipelined cache after an idle spell (see above): fits 0.95 and 1.25
RTO_MIN_S = 0.2  # Linux's tcp_rto_min: an idle spell longer than the RTO shrinks the window
INITIAL_WINDOW = 10  # segments (RFC 6928; Linux's default)
CONNECTIONS = 4  # TCP connections per KV transfer, as emulator.transport's sender opens
QUEUE_PACKETS = 1000  # the tun backend's default queue (emulator.net.spec.LinkShape.queue_packets)
SRTT_QUEUE_SHARE = 0.7  # of the peak queue's wait the smoothed RTT keeps (fitted at 50 and 200 Mbit/s)
STANDING_QUEUE_CAP_BYTES = 6.5e6  # the deepest wait measured (5.3 s at 10 Mbit/s): relay plus device queue
MIN_RTT_S = 1e-4  # a LAN-like floor, so a lossy link with no added delay still has a finite ceiling
LOSS_SPREAD = 0.6  # a cache's loss-limited time: spread x sqrt(expected loss events) (see above)


def mathis_bytes_per_s(mss_bytes: float, rtt_s: float, loss: float, c: float = MATHIS_C) -> float:
    """Steady-state goodput of one loss-limited TCP connection: MSS / RTT * c / sqrt(p); inf
    without loss, 0 on a cut link (p = 1: no packet gets through, whatever the formula says)."""
    if loss <= 0:
        return math.inf
    if loss >= 1:
        return 0.0
    return mss_bytes / max(rtt_s, MIN_RTT_S) * c / math.sqrt(loss)


def loss_time_cv(wire_bytes: float, loss: float) -> float:
    """How widely a cache's loss-limited time spreads around the Mathis mean (standard deviation
    over mean): LOSS_SPREAD over the square root of the loss events it expects, at least one; 0
    without loss or on a cut link."""
    if loss <= 0.0 or loss >= 1.0:
        return 0.0
    events = loss * wire_bytes / PACKET_BYTES
    return LOSS_SPREAD / math.sqrt(events if events > 1.0 else 1.0)


def loss_time_factor(rng: random.Random, cv: float) -> float:
    """One cache's draw of its loss-limited time over the mean: lognormal with mean 1 and spread
    `cv` (its rate is the mean over this)."""
    if cv <= 0.0:
        return 1.0
    sigma = math.sqrt(math.log(1.0 + cv * cv))
    return rng.lognormvariate(-0.5 * sigma * sigma, sigma)


def initial_window_bytes(connections: int) -> float:
    """What `connections` new connections may send in their first round trip, together."""
    return float(connections * INITIAL_WINDOW * MSS_BYTES)


def is_lockout(rate_bytes_per_s: float, rtt_s: float, queue_bytes: float) -> bool:
    """Whether the buffer is deeper than the path's BDP, so that newcomers wait behind incumbents."""
    return rate_bytes_per_s < math.inf and queue_bytes > rate_bytes_per_s * rtt_s


def slow_start_s(num_bytes: float, rate_bytes_per_s: float, rtt_s: float, window_bytes: float) -> float:
    """Closed form of the fluid's ramp: seconds a lone transfer of `num_bytes` takes on a link of
    `rate_bytes_per_s` whose window starts at `window_bytes` and doubles each `rtt_s`, sending at
    min(rate, window / RTT) (propagation delay not included). The reference the tests check."""
    sent, t, window = 0.0, 0.0, window_bytes
    while window / rtt_s < rate_bytes_per_s:
        if sent + window >= num_bytes:
            return t + (num_bytes - sent) / (window / rtt_s)
        sent, t, window = sent + window, t + rtt_s, 2 * window
    return t + (num_bytes - sent) / rate_bytes_per_s


def smoothed_rtt_s(rtt_s: float, queue_bytes: float, rate_bytes_per_s: float) -> float:
    """The senders' smoothed RTT after a peak of `queue_bytes` waiting at the bottleneck."""
    if rate_bytes_per_s == math.inf or rate_bytes_per_s <= 0:
        return rtt_s
    return rtt_s + SRTT_QUEUE_SHARE * min(max(queue_bytes, 0.0), STANDING_QUEUE_CAP_BYTES) / rate_bytes_per_s


def is_idle_spell(idle_s: float, rtt_s: float) -> bool:
    """Whether connections idle for `idle_s` have had their window shrunk (longer than an RTO)."""
    return idle_s > RTO_MIN_S + rtt_s


def tail_lanes(tail_bytes: float, connections: int, chunk_bytes: float = CHUNK_BYTES) -> float:
    """How many connections' worth of rate a cache's last layer gets once its prefill has ended:
    its bytes over its largest chunk (its chunks go out in parallel, one per connection, and it is
    there when the largest is), at least 1, at most `connections`."""
    if tail_bytes <= 0:
        return float(connections)
    return max(1.0, min(float(connections), tail_bytes / min(tail_bytes, chunk_bytes)))
