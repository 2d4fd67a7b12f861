"""The engine-neutral run core: what both engines do to a running scenario, written once. The
request lifecycle and the node board (core.py, board.py, journey.py), the TTFT window, the
timeline interpreter, the scheduler feed and the workload clock; the knob registry sits below this
package and scenario/ (emulator/knobs.py). Sans-I/O: no asyncio, sockets, processes or clock here;
an engine feeds events with the time and carries out the answers (docs/architecture.md).
"""
