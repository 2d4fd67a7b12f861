"""The emulator: scenarios, the control plane, and the live, virtual and analytic engines (see
design.md for the layout).

`RUNS_AS` says whether the compiled build of the virtual engine's hot path is in use (emulator.accel
decides, on this import, before any of those modules loads).
"""

from emulator import accel

RUNS_AS = accel.activate()
