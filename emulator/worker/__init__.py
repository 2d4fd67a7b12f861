"""The live worker process (`python -m emulator.worker`): one prefill or decode node that loads the
torch model, answers the gateway over the `wire` protocol, keeps its own prefix store, runs forward
passes on one compute thread, and ships or receives KV over shaped links. It may import `wire`,
`transport`, `net` (namespaced sockets), `control.types`, errors, limits, `model_stub` and torch;
never the gateway side (`emulator.live`), which only spawns it as a process.
"""
