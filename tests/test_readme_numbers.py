"""Every number the README's Safety section quotes is the code's: each phrase below is found in the
section and its numbers equal the constants (emulator/limits.py, emulator/net/spec.py and the few
modules that own the rest), and no number in the section goes unchecked, so a bound that drifts in
either place fails here. The first screen says what to do first."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from emulator import limits as L
from emulator.net import spec
from emulator.net.spec import LinkSpec
from emulator.run import ending
from emulator.telemetry.control_messages import ThresholdControl
from emulator.telemetry.error_echo import ERROR_ECHO_PERIOD_S
from emulator.transport.receiver import STALL_TIMEOUT_S
from emulator.virtual import budget

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?(?:e-?[0-9]+)?)"  # 1,048,576  0.001  1e-6


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


SAFETY = section("Safety")


def case(phrase: str, *values: float):
    """`phrase` with `{}` where each quoted number stands, and the values the code has there."""
    return pytest.param(phrase, values, id=phrase.split("{}")[0].strip()[:40] or phrase[:40])


CASES = [
    case("prompts and thresholds at most {} tokens", L.MAX_TOKENS),
    case("outputs {},", L.MAX_OUTPUT_TOKENS),
    case("durations {} days", L.MAX_DURATION_S / 86_400),
    case("{} M requests per run", L.MAX_REQUESTS / 1e6),
    case("rates from {} to {} requests/s", L.MIN_RATE_PER_S, L.MAX_RATE_PER_S),
    case("{} instances per cluster and per decode batch", L.MAX_INSTANCES),
    case("{} instances per cluster and per decode batch", L.MAX_DECODE_BATCH),
    case("GPU indices 0..{}", L.MAX_GPUS - 1),
    case("bandwidth is {} to {} Mbit/s ({} Gbit/s)", spec.MIN_BANDWIDTH_MBIT, spec.MAX_BANDWIDTH_MBIT,
         spec.MAX_BANDWIDTH_MBIT / 1000),
    case("Delay and jitter are 0 or {} to {} ms", spec.MIN_DELAY_MS, spec.MAX_DELAY_MS),
    case("({} per core, {} GiB each, {} % of memory)", L.LIVE_WORKERS_PER_CORE, L.LIVE_WORKER_BYTES / GIB,
         L.LIVE_MEMORY_SHARE * 100),
    case("a scenario file is a regular file of at most {} MiB", L.MAX_SCENARIO_BYTES / MIB),
    case("nested at most {} deep in at most {} YAML nodes", L.MAX_NESTING, L.MAX_YAML_NODES),
    case("integers of at most {} digits", L.MAX_INT_DIGITS),
    case("a control message is at most {} KiB and {} deep", L.MAX_CONTROL_BYTES / KIB, L.MAX_NESTING),
    case("a hello must come within {} s in at most {} KiB", L.HANDSHAKE_TIMEOUT_S, L.MAX_HELLO_BYTES / KIB),
    case("At most {} connections may be unproven at once", L.MAX_PENDING_HANDSHAKES),
    case("up to {} unproven connections", L.MAX_KV_PENDING_HANDSHAKES),
    case("({} GiB of partial caches in all, half of it per peer", L.MAX_KV_PARTIAL_BYTES / GIB),
    case("{} connections in all and {} per peer, a {} s stall timeout", L.MAX_KV_CONNECTIONS,
         L.MAX_KV_CONNECTIONS_PER_PEER, STALL_TIMEOUT_S),
    case("the duration again, at least {} s", ending.MIN_DRAIN_S),
    case("{} M + {} per request + {} per simulated second", budget.BASE_EVENTS / 1e6, budget.EVENTS_PER_REQUEST,
         budget.EVENTS_PER_SIM_S),
    case("`summary.json` and `sweep.json` {} MiB and {} deep, `report.html` {} MiB, a parquet file {} GiB, {} M "
         "rows and {} columns", L.MAX_RUN_JSON_BYTES / MIB, L.MAX_RUN_JSON_DEPTH, L.MAX_REPORT_BYTES / MIB,
         L.MAX_PARQUET_BYTES / GIB, L.MAX_PARQUET_ROWS / 1e6, L.MAX_PARQUET_COLUMNS),
    case("a log tail {} KiB", L.MAX_LOG_TAIL_BYTES / KIB),
    case("`loss_pct: {}` cuts a link", 100.0 if LinkSpec(loss_pct=100).is_cut else -1.0),
    case('needs `"v": {}`', float(typing.get_args(ThresholdControl.model_fields["v"].annotation)[0])),
    case("127.0.0.1:{}", float(re.search(r"PORT \?= ([0-9]+)", (ROOT / "Makefile").read_text()).group(1))),
]
# Words that hold numbers the section states but no bound in the code: file modes, names, addresses.
NOT_BOUNDS = ("HMAC-SHA256", "127.0.0.1", "0700", "0600", "6\nlowercase hex digits", "exit code is 2",
              "6 lowercase hex digits", "prfaas-<uid>", "prfaas-locks-<uid>")
WORDS = {"once a\nsecond": ERROR_ECHO_PERIOD_S == 1.0,
         "once a second": ERROR_ECHO_PERIOD_S == 1.0, "half of it per peer": L.KV_PEER_SHARE == 0.5}


def _pattern(phrase: str) -> re.Pattern[str]:
    """The phrase with any run of spaces matching a line break too, each `{}` a captured number."""
    def words(part: str) -> str:
        inner = r"\s+".join(map(re.escape, part.split()))
        return (r"\s+" if part[:1].isspace() else "") + inner + (r"\s+" if part[-1:].isspace() and inner else "")

    return re.compile(NUMBER.join(words(part) for part in phrase.split("{}")))


def _value(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.mark.parametrize(("phrase", "values"), CASES)
def test_the_safety_section_quotes_the_codes_bound(phrase: str, values: tuple[float, ...]) -> None:
    found = _pattern(phrase).search(SAFETY)
    assert found, f"README Safety no longer says {phrase!r}; say it, or change this test with the code"
    assert [_value(g) for g in found.groups()] == pytest.approx(list(values)), phrase


def test_the_bounds_it_states_in_words_are_the_codes() -> None:
    for words, holds in WORDS.items():
        if re.search(r"\s+".join(map(re.escape, words.split())), SAFETY):
            assert holds, words


def test_no_number_in_the_safety_section_goes_unchecked() -> None:
    """Blank out what the cases and NOT_BOUNDS cover; any digit left is a number nobody checks."""
    rest = SAFETY
    for param in CASES:
        rest = _pattern(param.values[0]).sub(" ", rest)
    for words in NOT_BOUNDS:
        rest = re.sub(r"\s+".join(map(re.escape, words.split())), " ", rest)
    left = sorted(set(re.findall(r"[^\s]*[0-9][^\s]*", rest)))
    assert left == [], f"numbers in README Safety that no case checks: {left}"


def test_the_first_screen_says_what_to_do_first() -> None:
    """Within the README's first 25 lines: `make run`, then the Classroom page at 127.0.0.1:8501."""
    first = "\n".join(README.splitlines()[:25])
    assert "make run" in first and "http://127.0.0.1:8501" in first and "Classroom" in first
    assert first.index("make run") < first.index("Classroom")


def test_the_workers_priority_the_tour_quotes_is_the_workers() -> None:
    from emulator.worker.worker import WORKER_NICE

    assert [int(n) for n in re.findall(r"\(nice ([0-9]+)\)", README)] == [WORKER_NICE]
