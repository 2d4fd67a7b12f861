"""The virtual engine: a discrete-event simulation of a scenario on cost models (profiles, KV sizes,
a fluid link), driving the same control plane as the live engine. `engine.run_virtual` is its API.

Its hot modules run compiled when a current mypyc build exists (emulator.accel); `RUNS_AS` says
which and why.
"""

from emulator import accel

RUNS_AS = accel.activate(__path__)
