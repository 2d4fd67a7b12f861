"""How much of the machine something other than the calibration used while it measured. A
calibration is a measurement of the machine, so a foreign load (another job, a hypervisor stealing
a vCPU) during the CPU-sharing rounds makes the profile wrong in a way no later step can see: on 2
cores, one foreign busy core made two busy probes x2.15 instead of x0.97. The meter reads the
kernel's counters (/proc/stat's busy and steal time for the whole machine, /proc/PID/stat for ours),
so the rounds can be retried and the profile can say what it saw.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal (guest is inside user)
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


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
