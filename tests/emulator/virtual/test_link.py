"""The fluid link: max-min fair shares, loss-limited caps, layer-wise pipelining, delay and link
changes, against hand-computed finish times. (Slow start and lockout: test_link_tcp.py.)"""

from __future__ import annotations

import math

import pytest

from emulator.virtual.core import Simulator
from emulator.virtual.link import MSS_BYTES, FluidLink, LinkState, mathis_bytes_per_s
from emulator.transport.frames import CHUNK_BYTES
from emulator.virtual.costs import MAX_SENDS, layer_sends
from emulator.virtual.tcp import LOSS_C, tail_lanes

GB = 1e9


def _run(state: LinkState, starts: list[tuple[float, float, dict]]) -> tuple[dict, FluidLink]:
    """Start each (at_s, bytes, kwargs) transfer; returns {index: arrival time} and the link."""
    sim = Simulator()
    link = FluidLink(sim, state)
    arrived: dict[int, float] = {}
    for i, (at_s, size, kwargs) in enumerate(starts):
        sim.schedule(at_s, lambda a: link.start(a[1], lambda k: arrived.__setitem__(k, sim.now), a[0], **a[2]),
                     (i, size, kwargs))
    sim.run()
    return arrived, link


def test_two_equal_transfers_started_together_each_get_half_and_finish_together() -> None:
    arrived, link = _run(LinkState(GB, delay_s=0.01), [(0.0, 2 * GB, {}), (0.0, 2 * GB, {})])
    assert arrived[0] == pytest.approx(4.01) and arrived[1] == pytest.approx(4.01)  # 2 GB at 0.5 GB/s
    assert link.bytes_delivered == 4 * GB
    assert link.bytes_sent == pytest.approx(4 * GB)
    assert link.busy_s == pytest.approx(4.0)


def test_a_transfer_speeds_up_when_its_neighbour_finishes() -> None:
    # 1 GB and 3 GB share 1 GB/s: the small one ends at 2 s; the big one then has 2 GB left alone.
    arrived, _ = _run(LinkState(GB, delay_s=0.0), [(0.0, GB, {}), (0.0, 3 * GB, {})])
    assert (arrived[0], arrived[1]) == (pytest.approx(2.0), pytest.approx(4.0))


def test_a_late_starter_takes_its_share_from_then_on() -> None:
    # A alone for 1 s (1 GB sent), then A and B at 0.5 GB/s: A's last 1 GB takes 2 s more.
    # (A shallow buffer: with the default one, B would be locked out behind A, test_link_tcp.py.)
    arrived, _ = _run(LinkState(GB, delay_s=0.0, queue_bytes=0.0), [(0.0, 2 * GB, {}), (1.0, 2 * GB, {})])
    assert arrived[0] == pytest.approx(3.0)
    assert arrived[1] == pytest.approx(4.0)  # 1 GB by t=3, then alone at 1 GB/s


def test_a_pipelined_cache_waiting_for_its_next_layer_leaves_its_share_to_the_others() -> None:
    # A: 1.2 GB, 0.1 GB handed over at 0 and at 3 s, the 1 GB rest when its prefill ends at 4 s;
    # B: 1.9 GB whole. Halves until A has sent its first 0.1 GB (0.2 s), then B alone: its last
    # 1.8 GB by 2.0 s. A sends 0.1 GB at 3 s and its last layer from 4 s: 1 GB alone, 5.0 s.
    sim = Simulator()
    link = FluidLink(sim, LinkState(GB, delay_s=0.0))
    arrived: dict[str, float] = {}
    a = link.start(1.2 * GB, lambda k: arrived.__setitem__(k, sim.now), "A", [(0.0, 0.1 * GB, 0.0), (3.0, 0.1 * GB, 0.0)])
    link.start(1.9 * GB, lambda k: arrived.__setitem__(k, sim.now), "B")
    sim.schedule(4.0, lambda _: link.end_production(a))
    sim.run()
    assert arrived == {"B": pytest.approx(2.0), "A": pytest.approx(5.0)}
    assert link.bytes_sent == pytest.approx(3.1 * GB)


def test_the_loss_response_caps_each_transfer_on_a_lossy_link() -> None:
    assert mathis_bytes_per_s(MSS_BYTES, 0.02, 0.01) == pytest.approx(8948 / 0.02 * 1.2247 / 0.1, rel=1e-4)
    one = mathis_bytes_per_s(MSS_BYTES, 0.02, 0.01, LOSS_C)  # the tun-fitted constant, 1.3
    assert one == pytest.approx(8948 / 0.02 * 1.3 / 0.1)  # ~5.8 MB/s per connection
    state = LinkState(GB, delay_s=0.01, loss=0.01, rtt_s=0.02, connections=4)
    assert state.per_transfer_cap == pytest.approx(4 * one)
    arrived, _ = _run(state, [(0.0, 100e6, {})])
    # 4 new connections ramp from 4 x 10 segments, doubling per 20 ms, until the cap binds
    w0, rounds = 4 * 10 * MSS_BYTES, math.ceil(math.log2(4 * one * 0.02 / (4 * 10 * MSS_BYTES)))
    ramp_bytes = w0 * (2**rounds - 1)
    assert arrived[0] == pytest.approx(rounds * 0.02 + (100e6 - ramp_bytes) / (4 * one) + 0.01)
    assert LinkState(GB, 0.0).per_transfer_cap == math.inf


def test_a_cache_sent_as_it_is_produced_has_the_loss_response_of_one_sent_whole() -> None:
    # 4 connections, 20 ms, 1 % loss, constant 0.5 for both kinds: 8948 / 0.02 * 0.5 / 0.1 = 2.24 MB/s
    # each. 30 MB handed over in thirds at 0, 0.5 and 1 s (the last a 10 MB layer: ten chunks, all
    # four lanes) outruns the 8.9 MB/s ceiling, and the first window (358 KB per 20 ms) covers it:
    # the cache ends at 30 MB / ceiling, as the same cache sent whole does.
    state = LinkState(GB, delay_s=0.01, loss=0.01, rtt_s=0.02, connections=4, loss_c=0.5)
    piped = 4 * mathis_bytes_per_s(MSS_BYTES, 0.02, 0.01, 0.5)
    assert 4 * state.pipelined_lane_cap == pytest.approx(piped) == state.per_transfer_cap
    assert piped < 4 * 10 * MSS_BYTES / 0.02
    sim = Simulator()
    link = FluidLink(sim, state)
    arrived: dict[str, float] = {}
    cache = link.start(30e6, lambda k: arrived.__setitem__(k, sim.now), "piped", [(0.0, 10e6, 0.0), (0.5, 10e6, 0.0)])
    sim.schedule(1.0, lambda _: link.end_production(cache))
    sim.run()
    assert arrived["piped"] == pytest.approx(30e6 / piped + 0.01)
    whole, _ = _run(state, [(0.0, 30e6, {})])
    assert whole[0] == pytest.approx(arrived["piped"])


def test_a_last_layer_shares_a_busy_link_by_its_connections() -> None:
    # TCP shares a bottleneck per connection. A's last layer (1 MB: one chunk, one connection) goes
    # at its prefill's end, 1 s, when B (6 MB whole, 4 connections) starts: A takes 1/5 of 10 MB/s
    # and ends at 1.5 s, B has sent 4 MB by then and sends its last 2 MB alone by 1.7 s. (Equal
    # halves per transfer ended A at 1.2 s.) A shallow buffer: no lockout.
    sim = Simulator()
    link = FluidLink(sim, LinkState(10e6, delay_s=0.0, queue_bytes=0.0))
    arrived: dict[str, float] = {}
    a = link.start(1.5e6, lambda k: arrived.__setitem__(k, sim.now), "A", [(0.0, 0.5e6, 0.0)])
    sim.schedule(1.0, lambda _: (link.end_production(a), link.start(6e6, lambda k: arrived.__setitem__(k, sim.now), "B")))
    sim.run()
    assert arrived == {"A": pytest.approx(1.5), "B": pytest.approx(1.7)}


@pytest.mark.parametrize(("tail_mb", "lanes"), [(1.0, 1.0), (2.5 * CHUNK_BYTES / 1e6, 2.5), (40.0, 4.0)])
def test_a_last_layer_after_the_prefill_rides_as_many_connections_as_it_has_chunks(tail_mb: float,
                                                                                     lanes: float) -> None:
    # 20 ms, 1 % loss, constant 2.0: one connection carries 8948 / 0.02 * 2 / 0.1 = 8.95 MB/s. The
    # first 2 MB, handed over at 0, are across long before the prefill ends at 1 s; the last layer
    # then goes in CHUNK_BYTES chunks, one connection each, and ends with its largest:
    # tail / (lanes x 8.95 MB/s).
    state = LinkState(GB, delay_s=0.01, loss=0.01, rtt_s=0.02, connections=4, loss_c=2.0)
    lane = 8948 / 0.02 * 2.0 / 0.1
    assert state.pipelined_lane_cap == pytest.approx(lane)
    assert tail_lanes(tail_mb * 1e6, 4) == pytest.approx(lanes)
    tail = tail_mb * 1e6
    sim = Simulator()
    link = FluidLink(sim, state)
    arrived: list[float] = []
    cache = link.start(2e6 + tail, lambda _: arrived.append(sim.now), None, [(0.0, 2e6, 0.0)])
    sim.schedule(1.0, lambda _: link.end_production(cache))
    sim.run()
    assert arrived[0] == pytest.approx(1.0 + tail / (lanes * lane) + 0.01)


def test_a_cache_after_an_idle_spell_rides_its_shrunk_windows_constant() -> None:
    # 20 ms, 1 % loss, constants 2.0 busy and 1.0 after idle: one connection carries 8.95 and
    # 4.47 MB/s. Each cache: 2 MB at its start, a 1 MB last layer (one chunk, one lane) 1 s later.
    # The first opens the connections (not idle: new ones ramp instead); the second starts 0.1 s
    # after the first is across (under the RTO: the window is as it was), the third 1 s after the
    # second (over it: Linux has shrunk the application-limited window, tcp.py).
    state = LinkState(GB, delay_s=0.01, loss=0.01, rtt_s=0.02, connections=4, loss_c=2.0, loss_c_after_idle=1.0)
    busy, idle = state.pipelined_lane_cap, state.pipelined_lane_cap_after_idle
    assert (busy, idle) == (pytest.approx(8948 / 0.02 * 2.0 / 0.1), pytest.approx(8948 / 0.02 * 1.0 / 0.1))
    sim = Simulator()
    link = FluidLink(sim, state)
    arrived: list[float] = []

    def cache(_: object) -> None:
        transfer = link.start(3e6, lambda __: (arrived.append(sim.now), sim.schedule(
            sim.now + (0.1 if len(arrived) == 1 else 1.0), cache) if len(arrived) < 3 else None), None,
            [(0.0, 2e6, 0.0)])
        sim.schedule(sim.now + 1.0, lambda __: link.end_production(transfer))

    sim.schedule(0.0, cache)
    sim.run()
    first_end = 1.0 + 1e6 / busy
    assert arrived[0] == pytest.approx(first_end + 0.01)
    second_start = arrived[0] + 0.1
    assert arrived[1] == pytest.approx(second_start + 1.0 + 1e6 / busy + 0.01)
    third_start = arrived[1] + 1.0
    assert arrived[2] == pytest.approx(third_start + 1.0 + 1e6 / idle + 0.01)


def test_pipelined_transfer_ends_a_last_layer_after_the_prefill_when_the_link_keeps_up() -> None:
    # 1 GB in ten layers over 4 s on a 1 GB/s link: each of the first nine (0.1 GB at 0.4, 0.8,
    # ... 3.6 s) is across in 0.1 s; the last goes when the prefill ends at 4 s and takes 0.1 s.
    sim = Simulator()
    link = FluidLink(sim, LinkState(GB, delay_s=0.0))
    arrived: list[float] = []
    layers = [(0.4 * (i + 1), 0.1 * GB, 0.0) for i in range(9)]
    transfer = link.start(GB, lambda _: arrived.append(sim.now), None, layers)
    sim.schedule(4.0, lambda _: link.end_production(transfer))
    sim.run()
    assert arrived == [pytest.approx(4.1)]


def test_pipelined_transfer_is_bandwidth_bound_from_its_first_layer_when_the_link_is_slower() -> None:
    # 1 GB in five layers over 0.5 s on a 0.1 GB/s link: nothing goes before the first layer ends
    # (0.1 s); from then on the link never waits for the prefill: 0.1 + 1 GB / 0.1 GB/s.
    sim = Simulator()
    link = FluidLink(sim, LinkState(0.1 * GB, delay_s=0.0))
    arrived: list[float] = []
    transfer = link.start(GB, lambda _: arrived.append(sim.now), None, layer_sends((0.2,) * 5, 0.5, GB))
    sim.schedule(0.5, lambda _: link.end_production(transfer))
    sim.run()
    assert arrived == [pytest.approx(10.1)]


def test_layers_merge_into_a_few_sends_each_at_its_last_layers_end() -> None:
    assert layer_sends((0.2,) * 5, 0.5, GB) == [(pytest.approx(0.1 * (i + 1)), pytest.approx(0.2 * GB), 0.0)
                                                for i in range(4)]
    sends = layer_sends((1 / 61,) * 61, 6.1, 61.0)  # 60 layers before the last, in sends of 8 layers
    assert len(sends) == MAX_SENDS
    assert [round(t, 6) for t, _, _ in sends] == [0.8, 1.6, 2.4, 3.2, 4.0, 4.8, 5.6, 6.0]
    assert [round(b, 6) for _, b, _ in sends] == [8.0] * 7 + [4.0]


def test_layers_the_link_clears_before_the_next_send_merge_and_the_cache_arrives_as_sent_one_by_one() -> None:
    # 60 equal layers of 1 GB before the last over 6.1 s (one per 0.1 s). At 100 GB/s a layer takes
    # 0.01 s: the last send may hold the 10 layers it clears in the 0.1 s before the prefill ends,
    # the one before it everything else it clears in the 1 s to that send: two sends, not eight.
    shares = (1 / 61,) * 61
    sends = layer_sends(shares, 6.1, 61 * GB, send_bytes_per_s=100 * GB)
    assert [(round(t, 6), round(b / GB, 6), round(late / GB, 6)) for t, b, late in sends] == [
        (5.0, 50.0, 49.0), (6.0, 10.0, 9.0)]  # late: the layers before each send's last
    # a link slower than the prefill merges nothing (up to MAX_SENDS), as without a rate
    assert layer_sends(shares[:8], 0.8, 8 * GB, send_bytes_per_s=GB) == layer_sends(shares[:8], 0.8, 8 * GB)
    assert layer_sends(shares, 6.1, 61 * GB, send_bytes_per_s=GB) == layer_sends(shares, 6.1, 61 * GB)
    # the cache arrives when it did layer by layer (the tail's 1 GB at 100 GB/s after 6.1 s), and
    # the queue reads as it did: one layer less the 0.1 GB BDP, not a merged send's 50 GB
    arrived, peaks = {}, {}
    for name, given in (("by layer", [((i + 1) * 0.1, GB, 0.0) for i in range(60)]), ("merged", sends)):
        sim = Simulator()
        link = FluidLink(sim, LinkState(100 * GB, delay_s=0.0, rtt_s=0.001))
        transfer = link.start(61 * GB, lambda k: arrived.__setitem__(k, sim.now), name, given)
        sim.schedule(6.1, lambda _: link.end_production(transfer))
        sim.run()
        peaks[name] = link.take_queue_peak()[0]
    assert arrived == {"by layer": pytest.approx(6.11, rel=1e-3), "merged": pytest.approx(6.11, rel=1e-3)}
    assert peaks["merged"] == pytest.approx(peaks["by layer"]) and peaks["by layer"] == pytest.approx(0.9 * GB)


def test_a_link_change_resets_the_shares_mid_transfer_and_cancel_stops_one() -> None:
    sim = Simulator()
    link = FluidLink(sim, LinkState(GB, delay_s=0.0))
    arrived: dict[str, float] = {}
    link.start(2 * GB, lambda k: arrived.__setitem__(k, sim.now), "a")
    doomed = link.start(2 * GB, lambda k: arrived.__setitem__(k, sim.now), "b")
    sim.schedule(1.0, lambda _: link.set_state(LinkState(2 * GB, delay_s=0.0)))  # each 1 GB/s now
    sim.schedule(1.5, lambda _: link.cancel(doomed))  # a alone at 2 GB/s from 1.5 s
    sim.run()
    # a: 0.5 GB by 1 s, 0.5 GB more by 1.5 s, the last 1 GB at 2 GB/s: done at 2.0 s
    assert arrived == {"a": pytest.approx(2.0)}
    assert link.bytes_delivered == 2 * GB
    assert link.bytes_sent == pytest.approx(3 * GB)  # b's 1 GB so far counts as sent


def test_an_unshaped_link_delivers_after_the_delay_only() -> None:
    arrived, link = _run(LinkState(math.inf, delay_s=0.005), [(1.0, GB, {}), (1.0, GB, {})])
    assert arrived == {0: pytest.approx(1.005), 1: pytest.approx(1.005)}
    assert link.bytes_delivered == 2 * GB


@pytest.mark.parametrize(("tail_mb", "tail_lanes_held"), [(1.0, 1.0), (2.5 * CHUNK_BYTES / 1e6, 2.5), (40.0, 4.0)])
@pytest.mark.parametrize("same_sender", [True, False])
def test_caches_from_one_sender_queue_on_its_connections(tail_mb: float, tail_lanes_held: float,
                                                          same_sender: bool) -> None:
    # One prefill worker sends every cache to one decode worker over the same 4 connections, taking
    # chunks in order: A's last layer (its prefill ends at 1 s) holds the lanes its chunks ride, and
    # B, 6 MB whole from the same sender at 1 s, gets the others (whole ones: a chunk rides one)
    # until A is across, then all four.
    # From another sender B has 4 connections of its own. 20 ms, 1 % loss, constant 2.0: one
    # connection carries 8.95 MB/s; the 100 MB/s link never binds.
    state = LinkState(100e6, delay_s=0.01, loss=0.01, rtt_s=0.02, connections=4, loss_c=2.0)
    lane = state.pipelined_lane_cap
    sim = Simulator()
    link = FluidLink(sim, state)
    arrived: dict[str, float] = {}
    a = link.start(2e6 + tail_mb * 1e6, lambda k: arrived.__setitem__(k, sim.now), "A", [(0.0, 2e6, 0.0)], sender=0)
    sim.schedule(1.0, lambda _: (link.end_production(a), link.start(
        6e6, lambda k: arrived.__setitem__(k, sim.now), "B", sender=0 if same_sender else 1)))
    sim.run()
    a_tail_s = tail_mb * 1e6 / (tail_lanes_held * lane)
    assert arrived["A"] == pytest.approx(1.0 + a_tail_s + 0.01)
    if same_sender:
        beside = math.floor(4.0 - tail_lanes_held) * lane * a_tail_s  # B's bytes on the lanes A leaves free
        assert arrived["B"] == pytest.approx(1.0 + a_tail_s + (6e6 - beside) / (4 * lane) + 0.01)
    else:
        assert arrived["B"] == pytest.approx(1.0 + 6e6 / (4 * lane) + 0.01)


def test_on_a_lossless_link_one_senders_caches_take_its_connections_chunk_by_chunk_in_order() -> None:
    # No loss: no window binds, and the bottleneck goes by connections. The live sender's chunk
    # queue hands its 4 connections 1 MiB chunks in order, so the older cache rides as many as it has
    # chunks left and the newer one the rest. A (3 chunks) and B (4) from one sender at 0 on 10 MB/s:
    # A on 3 connections (7.5 MB/s) is across at 0.4 s, B has 1 MB by then and the link alone after.
    # From two senders each has 4 connections of its own: halves until A is across at 0.6 s.
    for senders, a_s in (((0, 0), 0.4), ((0, 1), 0.6)):
        sim = Simulator()
        link = FluidLink(sim, LinkState(10e6, delay_s=0.0, queue_bytes=0.0))
        arrived: dict[str, float] = {}
        for name, size, sender in (("A", 3e6, senders[0]), ("B", 4e6, senders[1])):
            link.start(size, lambda k: arrived.__setitem__(k, sim.now), name, sender=sender)
        sim.run()
        assert arrived == {"A": pytest.approx(a_s), "B": pytest.approx(0.7)}


def test_a_newer_cache_waits_while_an_older_one_of_its_sender_holds_every_connection() -> None:
    # A has 5 chunks to send, more than the 4 connections: B (1 MB), from the same sender at 0 on
    # 10 MB/s, gets none until A is across at 0.5 s, then the link: across at 0.6 s.
    sim = Simulator()
    link = FluidLink(sim, LinkState(10e6, delay_s=0.0, queue_bytes=0.0))
    arrived: dict[str, float] = {}
    for name, size in (("A", 5e6), ("B", 1e6)):
        link.start(size, lambda k: arrived.__setitem__(k, sim.now), name, sender=0)
    sim.run()
    assert arrived == {"A": pytest.approx(0.5), "B": pytest.approx(0.6)}
