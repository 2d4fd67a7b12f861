"""The emulator: scenarios, the control plane, and the live, virtual and analytic engines (see
docs/architecture.md for the layers). Importing it loads nothing else: the compiled build of the
virtual engine's hot path is activated by the engine's entry points (emulator/virtual/accel_on.py)."""
