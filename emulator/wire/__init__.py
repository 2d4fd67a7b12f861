"""The gateway<->worker contract, imported by both sides: the control protocol (one pydantic model
per JSON-line op), the proof of origin a worker gives on connect (`auth`), and the settings file the
launcher writes and the worker reads (`worker_settings`). It holds no process, loop or model: it may
import only the shared vocabulary below it (`control.types`, `scenario.parts`, errors, limits, paths,
`model_stub.config`) and pydantic, never `emulator.live` or `emulator.worker`.
"""
