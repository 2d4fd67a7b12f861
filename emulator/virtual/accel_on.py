"""Importing this module activates the compiled build of the virtual engine
(emulator.virtual.accel), so an entry point (the virtual engine, the command line,
bench/virtual_speed.py) imports it before the compiled modules load; `RUNS_AS` says which engine
runs, in words."""

from emulator.virtual import accel

RUNS_AS = accel.activate()
