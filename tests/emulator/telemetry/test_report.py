"""report.html as a reader sees it: figures by their human names, rounded, egress in the link's
unit, a threshold axis in whole tokens, and the run's decision timeline."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from emulator.telemetry.labels import FIGURE_LABELS, format_number, label
from emulator.telemetry.recorder import RunRecorder
from emulator.telemetry.records import RequestRecord
from emulator.telemetry.report import DECISIONS_TITLE, token_axis

DECISIONS = ["t=125.0s scheduler: traffic window mean 24431 tokens (held 2 intervals): t 19620 -> 17140 "
             "(model: 3.58 req/s, p 0.50, bottleneck pd-prefill)"]
KNOBS = ["t=20.0s timeline: link -> 10 Mbit/s, 10 ms, 0 % loss"]


def _page(tmp_path: Path, records: list[RequestRecord], threshold: float = 2047.0) -> str:
    recorder = RunRecorder(tmp_path)
    for record in records:
        recorder.add_request(record)
    for i in range(4):
        recorder.add_sample(float(i), threshold_tokens=threshold, egress_bit_per_s=6.2785e6 * i,
                            link_capacity_bit_per_s=100e6)
    recorder.finish({"engine": "virtual", "scenario": "s", "link_backend": "simulated",
                     "link": {"bandwidth_mbit": 100.0, "delay_ms": 10.0, "loss_pct": 0.0},
                     "decisions": DECISIONS, "knob_changes": KNOBS}, duration_s=3.0)
    return (tmp_path / "report.html").read_text()


def _summary_rows(page: str) -> dict[str, str]:
    summary = page.split("<h2>Summary</h2>")[1].split("</table>")[0]
    return dict(re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", summary))


def test_the_summary_table_uses_human_names_and_rounds(tmp_path: Path, records: list[RequestRecord]) -> None:
    rows = _summary_rows(_page(tmp_path, records))
    assert not [name for name in rows if "_" in name]  # no raw keys such as ttft_p50_s
    assert "TTFT P50 (s)" in rows and "link backend" in rows and "completed fraction" in rows
    for name, text in rows.items():
        assert not re.search(r"\d\.\d{4,}", text), (name, text)  # three significant digits, never 6.2785
    assert rows["link"] == "100 Mbit/s, 10 ms, 0% loss"
    assert "decisions" not in rows and "scheduler decisions" not in rows  # in its own section


def test_egress_is_charted_in_the_links_unit(tmp_path: Path, records: list[RequestRecord]) -> None:
    page = _page(tmp_path, records)
    assert '"title":{"text":"Mbit\\u002fs"}' in page  # 100 Mbit/s link: not 0.1 Gbit/s


def test_a_flat_threshold_gets_whole_token_ticks(tmp_path: Path, records: list[RequestRecord]) -> None:
    page = _page(tmp_path, records, threshold=2047.0)
    assert '"tickformat":",d"' in page
    axis = token_axis(pd.Series([2047.0, 2047.0]))
    assert axis["tickformat"] == ",d"
    low, high = axis["range"]
    assert low < 2047 - 100 and high > 2047 + 100  # Plotly's own range would be 2046..2048
    assert "range" not in token_axis([17140.0, 19620.0])  # a changing threshold keeps Plotly's range
    assert token_axis([]) == {"tickformat": ",d"}


def test_the_decision_timeline_is_a_table(tmp_path: Path, records: list[RequestRecord]) -> None:
    page = _page(tmp_path, records)
    section = page.split(f"<h2>{DECISIONS_TITLE}</h2>")[1].split("</section>")[0]
    assert "<tr><th>time (s)</th><th>what</th><th>why</th></tr>" in section
    rows = re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td></tr>", section)
    assert rows == [
        ("20", "link -&gt; 10 Mbit/s, 10 ms, 0 % loss", "the scenario&#x27;s timeline"),
        ("125", "threshold 19620 -&gt; 17140 tokens",
         "traffic window mean 24431 tokens (held 2 intervals); model: 3.58 req/s, p 0.50, bottleneck: local prefill"),
    ]


def test_a_run_without_decisions_says_none(tmp_path: Path) -> None:
    RunRecorder(tmp_path).finish({"engine": "virtual"})
    assert "none recorded" in (tmp_path / "report.html").read_text()


def test_every_summary_key_has_a_label() -> None:
    from emulator.telemetry.records import summarize

    assert set(summarize([], 1.0)) <= set(FIGURE_LABELS)
    assert label("some_new_key") == "some new key"


@pytest.mark.parametrize(("value", "text"), [
    (None, "-"), (float("nan"), "-"), (3, "3"), (12_345, "12,345"), (6.2785, "6.28"), (0.123456, "0.123"),
    (250.4, "250"), (1_234.5, "1,234"), ("proxy", "proxy"),
])
def test_format_number(value: object, text: str) -> None:
    assert format_number(value) == text
