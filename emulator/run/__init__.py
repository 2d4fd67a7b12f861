"""The engine-neutral run core: what both engines do to a running scenario, written once (today the
knob registry; see design.md "one run core, two clocks"). No asyncio, sockets or processes here.
"""
