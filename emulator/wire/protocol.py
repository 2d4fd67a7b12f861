"""The control protocol between the gateway and its workers: JSON lines, one pydantic model per op.

Every line is one JSON object with `"v": 1` and `"op"`, at most MAX_LINE_BYTES long; the size is
checked before parsing and each model forbids extra fields and coerces no types. Times `t` are
`time.monotonic()` (CLOCK_MONOTONIC, comparable across processes). The KV bytes do not pass here.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from emulator.control.types import FailReason
from emulator.errors import WorkerError
from emulator.limits import MAX_CALIBRATION_LENGTHS, MAX_CALIBRATION_STEPS, MAX_CALIBRATION_TOKENS, MAX_STEP_S
from model_stub.config import BLOCK_TOKENS

VERSION = 1
MAX_LINE_BYTES = 1 << 20
STREAM_LIMIT = MAX_LINE_BYTES + 1  # asyncio StreamReader `limit=` for a control connection
MAX_RID = (1 << 63) - 1  # the KV transport carries request ids as u64
MAX_TCP_RTT_MS = (2**32 - 1) / 1000  # TCP_INFO's RTTs are u32 microseconds
MAX_NODE_CHARS = 64  # a node id or device name (they end up in log lines)
HEX_256 = r"^[0-9a-f]{64}$"  # 32 bytes as lowercase hex: a nonce or an HMAC-SHA256

Rid = Annotated[int, Field(ge=0, le=MAX_RID)]
Time = Annotated[float, Field(ge=0)]
Role = Literal["prefill", "decode"]
# The tags a worker may report; the rest (no node, refused command, run ends) are the gateway's own.
WORKER_FAIL_REASONS = frozenset({
    FailReason.WORKER_LOST, FailReason.PREFILL_FAILED, FailReason.TRANSFER_FAILED,
    FailReason.LINK_DOWN, FailReason.DEADLINE, FailReason.DECODE_FAILED})


def _worker_reason(reason: FailReason) -> FailReason:
    if reason not in WORKER_FAIL_REASONS:
        raise ValueError(f"{reason.value} is the gateway's own tag; a worker reports one of "
                         f"{', '.join(sorted(WORKER_FAIL_REASONS))}")
    return reason


WorkerFailReason = Annotated[FailReason, AfterValidator(_worker_reason)]


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    v: Literal[1] = VERSION


# worker -> gateway


class Hello(_Msg):
    """The first line a worker sends, answering the gateway's `challenge` (see wire/auth.py)."""

    op: Literal["hello"] = "hello"
    node: str = Field(min_length=1, max_length=MAX_NODE_CHARS)
    roles: list[Role] = Field(min_length=1, max_length=2)
    kv_port: Annotated[int, Field(ge=1, le=65535)] | None
    pid: int
    device: str = Field(max_length=MAX_NODE_CHARS)
    threads: Annotated[int, Field(ge=1)]
    proof: str = Field(pattern=HEX_256)  # HMAC-SHA256(run secret, nonce || node), hex


class PrefillStarted(_Msg):
    op: Literal["prefill_started"] = "prefill_started"
    rid: Rid
    t: Time


class PrefillDone(_Msg):
    op: Literal["prefill_done"] = "prefill_done"
    rid: Rid
    t_start: Time
    t_end: Time
    cached_len: Annotated[int, Field(ge=0)]  # prefix tokens actually reused from the store
    kv_bytes: Annotated[int, Field(ge=0)]  # layer frames handed to the transport
    first_token: Annotated[int, Field(ge=0)]
    held_s: Annotated[float, Field(ge=0)]  # extra time the speed factor added


class TransferDone(_Msg):
    """A transfer's end; a failed one carries its tag in `reason` and the sender's words in `detail`."""

    op: Literal["transfer_done"] = "transfer_done"
    rid: Rid
    t_start: Time
    t_end: Time
    status: Literal["delivered", "failed"]
    reason: WorkerFailReason | None = None
    detail: str = ""

    @model_validator(mode="after")
    def _check(self) -> TransferDone:
        if self.status == "failed" and self.reason is None:
            raise ValueError("reason: missing on a failed transfer; name its FailReason tag")
        if self.status == "delivered" and self.reason is not None:
            raise ValueError(f"reason: {self.reason.value} on a delivered transfer; send none")
        return self


class FirstToken(_Msg):
    op: Literal["first_token"] = "first_token"
    rid: Rid
    t: Time


class Completed(_Msg):
    op: Literal["completed"] = "completed"
    rid: Rid
    t: Time
    tokens: list[Annotated[int, Field(ge=0)]]
    tpot_s: Annotated[float, Field(ge=0)]


class Failed(_Msg):
    """A request the worker gave up: the tag the gateway files it under, and the worker's words."""

    op: Literal["failed"] = "failed"
    rid: Rid
    stage: Literal["prefill", "transfer", "decode"]
    reason: WorkerFailReason
    detail: str = Field(min_length=1)


class LinkStats(BaseModel):
    """A sender's TCP view (transport/congestion.py); the bounds are the kernel's own (TCP_INFO
    keeps RTTs as u32 microseconds), so a non-finite or absurd figure never reaches the scheduler."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    retrans_rate: Annotated[float, Field(ge=0, le=1)]  # retransmitted of the segments sent
    rtt_ms: Annotated[float, Field(ge=0, le=MAX_TCP_RTT_MS)]
    rtt_inflation: Annotated[float, Field(ge=1, le=MAX_TCP_RTT_MS * 1000)]  # smoothed / minimum RTT, at least 1
    bytes_sent: Annotated[int, Field(ge=0, le=MAX_RID)]


class Stats(_Msg):
    op: Literal["stats"] = "stats"
    t: Time
    queue_depth: Annotated[int, Field(ge=0)]
    batch_size: Annotated[int, Field(ge=0)]
    role: Role
    link: LinkStats | None


class RoleSet(_Msg):
    op: Literal["role_set"] = "role_set"
    role: Role


class Calibrated(_Msg):
    """A `calibrate` answered: seconds of each prefill (in the order asked) and of one decode step."""

    op: Literal["calibrated"] = "calibrated"
    prefill_s: list[Annotated[float, Field(gt=0, le=MAX_STEP_S)]] = Field(
        min_length=1, max_length=MAX_CALIBRATION_LENGTHS)
    decode_step_s: Annotated[float, Field(gt=0, le=MAX_STEP_S)]


# gateway -> worker


class Challenge(_Msg):
    """The first line on every control connection: the nonce the worker's hello must answer."""

    op: Literal["challenge"] = "challenge"
    nonce: str = Field(pattern=HEX_256)


class Prefill(_Msg):
    """Prefill `prompt` (base64 of the byte tokens) and ship its KV to `kv_target`.

    `resume_tokens`/`resume_key` name a prefix entry to resume from (0/"" = none); `store` lists
    [tokens, key] snapshots of this prompt's prefix to keep afterwards.
    """

    op: Literal["prefill"] = "prefill"
    rid: Rid
    prompt: str = Field(min_length=1)
    decode_node: str = Field(min_length=1)
    kv_target: tuple[str, Annotated[int, Field(ge=1, le=65535)]]
    output_len: Annotated[int, Field(ge=1)]
    resume_tokens: Annotated[int, Field(ge=0)] = 0
    resume_key: str = ""
    store: list[tuple[Annotated[int, Field(ge=1)], Annotated[str, Field(min_length=1)]]] = []
    deadline_s: Annotated[float, Field(gt=0)]

    @model_validator(mode="after")
    def _check(self) -> Prefill:
        num_tokens = len(decode_prompt(self.prompt))
        if self.resume_tokens % BLOCK_TOKENS or self.resume_tokens >= num_tokens:
            raise ValueError(
                f"resume_tokens: {self.resume_tokens} must be a multiple of {BLOCK_TOKENS} "
                f"below the prompt's {num_tokens} tokens; send 0 to prefill from scratch")
        if self.resume_tokens and not self.resume_key:
            raise ValueError("resume_key: empty while resume_tokens > 0; name the prefix entry")
        for tokens, key in self.store:
            if tokens % BLOCK_TOKENS or tokens > num_tokens:
                raise ValueError(
                    f"store: [{tokens}, {key!r}] must sit on a multiple of {BLOCK_TOKENS} "
                    f"within the prompt's {num_tokens} tokens; round it down to a block boundary")
        return self

    def prompt_tokens(self) -> list[int]:
        return decode_prompt(self.prompt)


class Decode(_Msg):
    op: Literal["decode"] = "decode"
    rid: Rid
    first_token: Annotated[int, Field(ge=0)]
    output_len: Annotated[int, Field(ge=1)]
    prompt_len: Annotated[int, Field(ge=1)]


class SetRole(_Msg):
    op: Literal["set_role"] = "set_role"
    role: Role


class Cancel(_Msg):
    op: Literal["cancel"] = "cancel"
    rid: Rid


class Shutdown(_Msg):
    op: Literal["shutdown"] = "shutdown"


class Calibrate(_Msg):
    """Time a prefill of each of `lengths` tokens and `decode_steps` decode steps on the torch thread,
    before any request (emulator/live/calibration.py); nothing is shipped or stored."""

    op: Literal["calibrate"] = "calibrate"
    lengths: list[Annotated[int, Field(ge=1, le=MAX_CALIBRATION_TOKENS)]] = Field(
        min_length=1, max_length=MAX_CALIBRATION_LENGTHS)
    decode_steps: Annotated[int, Field(ge=1, le=MAX_CALIBRATION_STEPS)]


Message = (
    Hello | PrefillStarted | PrefillDone | TransferDone | FirstToken | Completed | Failed | Stats
    | RoleSet | Calibrated | Challenge | Prefill | Decode | SetRole | Cancel | Shutdown | Calibrate
)
OP_TO_MODEL: dict[str, type[_Msg]] = {
    m.model_fields["op"].default: m
    for m in (Hello, PrefillStarted, PrefillDone, TransferDone, FirstToken, Completed, Failed,
              Stats, RoleSet, Calibrated, Challenge, Prefill, Decode, SetRole, Cancel, Shutdown, Calibrate)
}


def encode_prompt(tokens: Sequence[int] | bytes) -> str:
    """Byte tokens (0-255) as the base64 text a `prefill` carries."""
    try:
        return base64.b64encode(bytes(tokens)).decode("ascii")
    except ValueError:
        raise WorkerError("prompt: tokens must be bytes 0-255; the model is byte-level") from None


def decode_prompt(text: str) -> list[int]:
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"prompt: {_clip(text)} is not base64; encode the bytes with "
                         "encode_prompt") from None
    if not data:
        raise ValueError("prompt: decodes to no tokens; send at least one byte")
    return list(data)


def encode(msg: Message) -> bytes:
    """One message as a JSON line (with its newline); refuses lines the reader would refuse."""
    line = msg.model_dump_json().encode() + b"\n"
    if len(line) - 1 > MAX_LINE_BYTES:
        raise WorkerError(f"{msg.op}: {len(line) - 1} bytes exceeds MAX_LINE_BYTES "
                          f"({MAX_LINE_BYTES}); shorten the prompt")
    return line


def decode(line: bytes) -> Message:
    """One JSON line (trailing newline optional) as its message; WorkerError names what is wrong."""
    line = line.rstrip(b"\r\n")
    if len(line) > MAX_LINE_BYTES:
        raise WorkerError(f"line: {len(line)} bytes exceeds MAX_LINE_BYTES ({MAX_LINE_BYTES}); "
                          "send shorter messages")
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise WorkerError(f"line: {_clip(line)} is not JSON ({err}); send one JSON object "
                          "per line") from None
    except RecursionError:
        raise WorkerError("line: nested too deeply to parse; send a flat JSON object") from None
    if not isinstance(obj, dict):
        raise WorkerError(f"line: a JSON {type(obj).__name__} is not an object; send one JSON "
                          "object per line")
    if type(obj.get("v")) is not int or obj["v"] != VERSION:
        raise WorkerError(f"v: {_clip(obj.get('v'))} is not a supported version; send \"v\": "
                          f"{VERSION}")
    op = obj.get("op")
    model = OP_TO_MODEL.get(op) if isinstance(op, str) else None
    if model is None:
        raise WorkerError(f"op: {_clip(op)} is not a known op; use one of {', '.join(OP_TO_MODEL)}")
    try:
        return model.model_validate_json(line)  # type: ignore[return-value]
    except ValidationError as err:
        raise WorkerError(_one_line(op, err)) from None


def _one_line(op: str, err: ValidationError) -> str:
    first = err.errors(include_url=False)[0]
    field = ".".join(str(p) for p in first["loc"]) or "message"
    kind, msg = first["type"], first["msg"].removeprefix("Value error, ")
    if kind == "extra_forbidden":
        return f"{op}.{field}: is not a field of {op}; remove it"
    if kind == "missing":
        return f"{op}.{field}: missing; add it"
    if kind == "value_error":  # a model validator's words start with the field; a field's do not
        return f"{op}.{field}: {msg}" if first["loc"] else f"{op}.{msg}"
    return f"{op}.{field}: {_clip(first.get('input'))} rejected; {msg[:1].lower()}{msg[1:]}"


def _clip(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


async def read_message(reader: asyncio.StreamReader) -> Message | None:
    """The next message, or None at a clean end of stream.

    An oversized line is skipped whole before WorkerError is raised, so the connection can go on;
    the reader must be made with `limit=STREAM_LIMIT` (or more).
    """
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as err:
        if err.partial.strip():
            raise WorkerError(f"line: connection closed after {len(err.partial)} bytes of an "
                              "unterminated line; end every message with a newline") from None
        return None
    except asyncio.LimitOverrunError:
        skipped = await _skip_line(reader)
        raise WorkerError(f"line: {skipped} bytes exceeds MAX_LINE_BYTES ({MAX_LINE_BYTES}); "
                          "send shorter messages") from None
    return decode(line)


async def read_line(reader: asyncio.StreamReader, max_bytes: int) -> bytes:
    """One line of at most `max_bytes`, before anything is parsed (a hello from an unknown peer);
    WorkerError when it is longer or the peer closes first."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as err:
        raise WorkerError(f"line: connection closed after {len(err.partial)} bytes; "
                          "send one JSON line") from None
    except asyncio.LimitOverrunError:
        line = b"x" * (max_bytes + 1)
    if len(line) - 1 > max_bytes:
        raise WorkerError(f"line: over {max_bytes} bytes; a hello is shorter")
    return line


def claimed_node(line: bytes) -> str:
    """The node a (possibly invalid) hello line names, clipped and printable, for a log line."""
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return ""
    node = obj.get("node") if isinstance(obj, dict) else None
    return _clip(node, MAX_NODE_CHARS + 2) if isinstance(node, str) else ""


async def _skip_line(reader: asyncio.StreamReader) -> int:
    skipped = 0
    while True:
        try:
            return skipped + len(await reader.readuntil(b"\n"))
        except asyncio.LimitOverrunError as err:
            skipped += len(await reader.readexactly(max(err.consumed, 1)))
        except asyncio.IncompleteReadError as err:
            return skipped + len(err.partial)


async def write_message(writer: asyncio.StreamWriter, msg: Message) -> None:
    writer.write(encode(msg))
    await writer.drain()
