"""The live engine's gateway side: the gateway and its request tracker, node table and loops, the
knobs, the launcher that spawns worker processes (`emulator.worker`), sessions and teardown."""
