"""`dtrlab timeline` end to end: each format written and read back, the CSV equal to the event log,
and bad input as one line with exit status 2."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dtrlab.sim.instruments import KIND_NAMES

from conftest import TRACES, cli_invoke, needs_shared
from timeline_cases import perfetto_packets, public_run


@needs_shared
def test_csv_is_the_event_log_row_for_row(tmp_path):
    out = tmp_path / "run.csv"
    done = cli_invoke("timeline", str(TRACES), "-t", "resnet32", "-r", "0.102", "-f", "csv", "-o", str(out), "--json")
    assert done.exit_code == 0, done.stderr
    info = json.loads(done.stdout)
    log = public_run("resnet32", 0.102).log
    df = pd.read_csv(out)
    assert info["events"] == info["written"] == len(df) == len(log)
    assert df["kind"].tolist() == [KIND_NAMES[k] for k in log.kind]
    for column in ("clock_ns", "storage", "tensor", "depth", "memory_bytes", "pinned_bytes", "locked_bytes", "pool_size"):
        assert df[column].tolist() == getattr(log, column).tolist(), column
    for k, term in enumerate(log.term_names):
        assert df[f"term_{term}"].fillna(-1).tolist() == pd.Series(log.terms[:, k]).fillna(-1).tolist()


@needs_shared
@pytest.mark.parametrize("fmt", ["perfetto", "memviz"])
def test_each_format_is_written_with_its_counts(tmp_path, fmt):
    out = tmp_path / f"run.{fmt}"
    done = cli_invoke("timeline", str(TRACES), "-t", "unet", "-r", "0.6", "-f", fmt, "-o", str(out), "--json")
    assert done.exit_code == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["file_bytes"] == out.stat().st_size > 0 and info["outcome"] == "ok"
    if fmt == "perfetto":
        assert len(perfetto_packets(out)) == info["written"]["packets"]
    else:
        assert info["written"]["peak_bytes"] == public_run("unet", 0.6).result.peak_bytes


@pytest.mark.parametrize("args,message", [
    (["--window", "9:1"], "--window '9:1': START must not be after END"),
    (["--window", "a:b"], "--window 'a:b': expected START:END"),
    (["--format", "chrome"], "Invalid value for '--format'"),
])
def test_bad_arguments_are_one_line(tmp_path, args, message):
    base = ["-r", "0.5", "-f", "csv", "-o", str(tmp_path / "x.csv")]
    if args[0] == "--format":
        base = base[:2] + base[4:]
    done = cli_invoke("timeline", *base, *args)
    assert done.exit_code == 2 and done.stderr.startswith("dtrlab: ") and message in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1


def test_an_out_path_in_a_missing_folder_is_refused(tmp_path):
    done = cli_invoke("timeline", "-r", "0.5", "-f", "csv", "-o", str(tmp_path / "nope" / "x.csv"))
    assert done.exit_code == 2 and done.stderr == f"dtrlab: {tmp_path / 'nope'}: no such folder\n"
