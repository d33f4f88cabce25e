"""The one set of text formatters (formats.py) and the rule that no other module keeps its own."""

from __future__ import annotations

import re
from pathlib import Path

from dtrlab.formats import bytes_text, count_text, ns_text, overhead_text

SRC = Path(__file__).resolve().parents[1] / "src" / "dtrlab"


def test_bytes_are_exact_with_the_binary_unit_beside():
    assert bytes_text(0) == "0 B" and bytes_text(1023) == "1,023 B"
    assert bytes_text(1024) == "1,024 B (1.00 KiB)"
    assert bytes_text(5_505_024) == "5,505,024 B (5.25 MiB)"
    assert bytes_text(3 << 30) == "3,221,225,472 B (3.00 GiB)"
    assert bytes_text(5_505_024, scaled=False) == "5,505,024 B"


def test_counts_times_and_overheads():
    assert count_text(1234567) == "1,234,567" and count_text(2.6) == "3"
    assert ns_text(12_345_678) == "12,345,678 (12.3 ms)"
    assert overhead_text(None) == "-" and overhead_text(1.23456) == "1.235"


def test_no_module_formats_bytes_on_its_own():
    """A scaled byte figure is written by formats.py alone: no other module divides by 2**20 (or
    1 << 20) to print MiB, and no module defines a bytes formatter of its own."""
    own = []
    for path in SRC.rglob("*.py"):
        if path.name == "formats.py":
            continue
        text = path.read_text()
        for k, line in enumerate(text.splitlines(), 1):
            if re.search(r"def \w*(fmt_bytes|_bytes_text|_b)\(", line) or re.search(r"2\s*\*\*\s*20|1\s*<<\s*20", line) \
                    and "MiB" in line:
                own.append(f"{path.relative_to(SRC)}:{k}")
    assert not own, own
