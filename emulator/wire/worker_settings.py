"""A worker's settings: one schema the launcher fills from the scenario and the worker validates.

They travel as a JSON file in the run's log dir (`--settings PATH`), not as flags: one place holds
each default and bound, and `ps` shows only the node and the file's path. The file holds the
gateway's worker port, so it is written readable by its owner only (0600; issue 25); the secret
travels in the environment (emulator/wire/auth.py), never here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from emulator.errors import WorkerError
from emulator.limits import MAX_DECODE_BATCH
from emulator.paths import open_regular
from emulator.scenario.parts import MAX_CONNECTIONS
from model_stub.config import PRESET_NAMES, SIZES

MAX_WORKER_THREADS = 256
MAX_SETTINGS_BYTES = 64 * 1024  # the launcher writes under 1 KiB


class WorkerSettings(BaseModel):
    """Everything a worker needs besides its identity (--node) and the run's secret (environment)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gateway_host: str = Field("127.0.0.1", min_length=1, max_length=253)  # the gateway's control listener
    gateway_port: Annotated[int, Field(ge=1, le=65535)]

    netns: str = ""  # namespace for KV sockets ('' = the host's)
    kv_addr: str = Field("127.0.0.1", min_length=1)  # the decode receiver binds here
    preset: str = "kimi-linear-mini"
    size: str = "tiny"
    seed: int = 1234
    device: Literal["auto", "cpu", "cuda"] = "cpu"
    # weights and caches; auto: bfloat16 on CUDA, float32 on CPU. Caches travel in it; a decode
    # worker casts a cache of another dtype on arrival (workers of one run may sit on both).
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    threads: Annotated[int, Field(ge=1, le=MAX_WORKER_THREADS)] = 1
    speed_factor: Annotated[float, Field(gt=0, le=1)] = 1.0  # < 1 emulates slower hardware
    max_batch: Annotated[int, Field(ge=1, le=MAX_DECODE_BATCH)] = 8
    prefix_capacity_mib: Annotated[float, Field(ge=0)] = 256.0
    connections: Annotated[int, Field(ge=1, le=MAX_CONNECTIONS)] = 4  # per KV target
    congestion: Literal["cubic", "reno", "bbr"] = "cubic"
    orphan_timeout_s: Annotated[float, Field(gt=0)] = 30.0  # drop a cache whose decode never came
    verbose: bool = False

    @field_validator("preset", "size")
    @classmethod
    def _known(cls, value: str, info: ValidationInfo) -> str:
        choices = PRESET_NAMES if info.field_name == "preset" else SIZES
        if value not in choices:
            raise ValueError(f"{value!r} is not a {info.field_name}; use one of {', '.join(choices)}")
        return value

    @property
    def gateway(self) -> tuple[str, int]:
        return self.gateway_host, self.gateway_port

    def write(self, path: Path) -> Path:
        """Write to `path` readable by its owner only (0600, also when it existed); no symlink followed."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as file:
            os.fchmod(fd, 0o600)
            file.write(self.model_dump_json(indent=1) + "\n")
        return path


def read_settings(path: Path) -> WorkerSettings:
    """The settings in `path`; WorkerError names the first bad field."""
    try:
        with open(open_regular(path), "rb") as file:
            text = file.read(MAX_SETTINGS_BYTES + 1)
    except OSError as err:
        raise WorkerError(f"--settings: {path} cannot be read ({err.strerror})") from None
    if len(text) > MAX_SETTINGS_BYTES:
        raise WorkerError(f"--settings: {path} is over {MAX_SETTINGS_BYTES} bytes; pass the file the launcher wrote")
    try:
        return WorkerSettings.model_validate_json(text)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        field = ".".join(str(p) for p in first["loc"]) or "settings"
        raise WorkerError(f"settings.{field}: {first['msg'].removeprefix('Value error, ')}") from None
