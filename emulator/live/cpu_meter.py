"""How much of the machine something other than the calibration used while it measured. A
calibration is a measurement of the machine, so a foreign load (another job, a hypervisor stealing
a vCPU) during the CPU-sharing rounds makes the profile wrong in a way no later step can see: on 2
cores, one foreign busy core made two busy probes x2.15 instead of x0.97; a speed reference timed
while something else ran read 0.175 s where the minutes around it read 0.14 s, and the virtual run it
scaled came out 21 % slow. The meter reads the kernel's counters (/proc/stat's busy and steal time for
the whole machine, /proc/PID/stat for ours), so a disturbed measurement runs again
(`least_disturbed`) and the profile can say what it saw.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal (guest is inside user)
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
FOREIGN_CORES_LIMIT = 0.25  # other load during a measurement above which it runs again
TRIES, RETRY_PAUSE_S = 3, 2.0
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CpuReading:
    at_s: float  # time.monotonic()
    machine_busy_s: float  # every CPU's busy and stolen time since boot
    ours_s: float  # the CPU time of this process and the pids it was given


def machine_busy_s(stat_path: str = "/proc/stat") -> float:
    with open(stat_path, encoding="ascii") as f:
        fields = f.readline().split()
    if not fields or fields[0] != "cpu":
        raise OSError(f"{stat_path}: no aggregate cpu line")
    ticks = [int(v) for v in fields[1:]]
    return sum(ticks[i] for i in BUSY_FIELDS if i < len(ticks)) * TICK_S


def process_cpu_s(pid: int) -> float:
    """utime + stime of one process; 0 once it has gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return 0.0
    fields = text[text.rfind(")") + 2:].split()  # the command name may hold spaces and parens
    return sum(int(fields[i]) for i in (11, 12)) * TICK_S


def read_cpu(pids: Iterable[int]) -> CpuReading:
    return CpuReading(time.monotonic(), machine_busy_s(), sum(process_cpu_s(p) for p in {os.getpid(), *pids}))


def foreign_cores(before: CpuReading, after: CpuReading) -> float:
    """The mean number of cores busy with anything but ours between two readings (never below 0:
    the two counters tick apart)."""
    wall_s = after.at_s - before.at_s
    if wall_s <= 0:
        return 0.0
    foreign_s = (after.machine_busy_s - before.machine_busy_s) - (after.ours_s - before.ours_s)
    return max(0.0, foreign_s / wall_s)


@dataclass(frozen=True, slots=True)
class Metered(Generic[T]):
    """A measurement, the foreign load it ran under, and how many tries it took to get it."""

    value: T
    foreign_cores: float
    tries: int = 1

    @property
    def note(self) -> str:
        """'' for a first try that ran quiet; else what the reader should know, in parentheses."""
        if self.tries == 1 and self.foreign_cores <= FOREIGN_CORES_LIMIT:
            return ""
        doubtful = self.foreign_cores > FOREIGN_CORES_LIMIT
        return (f" (other load: {self.foreign_cores:.2f} cores, {self.tries} tries" +
                ("; the figure is doubtful, calibrate again on a quieter machine)" if doubtful else ")"))


def least_disturbed(measure: Callable[[], Metered[T]]) -> Metered[T]:
    """`measure` again (RETRY_PAUSE_S apart, up to TRIES in all) while something else kept more than
    FOREIGN_CORES_LIMIT cores busy through it; the least disturbed try, with the count."""
    tries = [measure()]
    while tries[-1].foreign_cores > FOREIGN_CORES_LIMIT and len(tries) < TRIES:
        time.sleep(RETRY_PAUSE_S)
        tries.append(measure())
    best = min(tries, key=lambda m: m.foreign_cores)
    return Metered(best.value, best.foreign_cores, len(tries))
