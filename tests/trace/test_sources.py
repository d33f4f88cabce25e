"""Sources as users have them: simrd's logs.zip, its unzipped folder and the folder above, and
folders whose traces share a short name."""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile

import pytest

from conftest import SIMRD_ZIP, TRACES, cli_invoke, needs_shared, needs_simrd_zip, public_program, require
from dtrlab.errors import UsageError
from dtrlab.trace import load, load_one, open_source, shipped_traces
from dtrlab.trace.read import select, unique_names
from trace_helpers import assert_same_program

PUBLIC = ["tv_densenet121", "inceptionv4", "resnet32", "transformer", "unet", "lstm"]


@pytest.fixture(scope="module")
def unzipped(tmp_path_factory):
    """What `unzip logs.zip` leaves in an empty folder: ./logs/manifest.json and ./logs/*.log."""
    require("needs_simrd_zip")
    root = tmp_path_factory.mktemp("unzipped")
    with zipfile.ZipFile(SIMRD_ZIP) as zf:
        zf.extractall(root)
    return root


def digests(source) -> dict[str, str]:
    return {s.name: hashlib.sha256(s.read_bytes()).hexdigest() for s in open_source(source)}


@needs_shared
@needs_simrd_zip
def test_simrd_manifest_names_logs_from_the_zip_root():
    # The premise: simrd writes `logs/NAME.log` in logs/manifest.json, our copy writes `NAME.log`.
    with zipfile.ZipFile(SIMRD_ZIP) as zf:
        logs = [m["log"] for m in json.loads(zf.read("logs/manifest.json"))["models"]]
    assert logs and all(log.startswith("logs/") and not (TRACES / log).exists() for log in logs)


@needs_shared
@needs_simrd_zip
@pytest.mark.parametrize("layout", ["zip", "logs folder", "folder above logs"])
def test_every_layout_holds_the_public_traces(unzipped, layout):
    source = {"zip": SIMRD_ZIP, "logs folder": unzipped / "logs", "folder above logs": unzipped}[layout]
    sources = open_source(source)
    assert [s.name for s in sources] == PUBLIC
    assert all(s.has_start for s in sources)
    assert digests(source) == digests(TRACES)


@needs_shared
@needs_simrd_zip
@pytest.mark.parametrize("name", PUBLIC)
def test_programs_from_the_zip_equal_those_from_the_manifest_folder(name):
    assert_same_program(load_one(SIMRD_ZIP, name, cache=False), public_program(name))


@needs_shared
@needs_simrd_zip
def test_programs_from_the_unzipped_folders_equal_the_public_ones(unzipped):
    for source in (unzipped, unzipped / "logs"):
        for program in load(source, ["unet", "resnet32"], cache=False):
            assert_same_program(program, public_program(program.name))


@needs_shared
@needs_simrd_zip
def test_trace_info_reads_each_layout(unzipped):
    want = json.loads(cli_invoke("trace", "info", TRACES, "-t", "unet", "-t", "resnet32", "--json", check=True).stdout)
    for source in (SIMRD_ZIP, unzipped / "logs", unzipped):
        got = json.loads(cli_invoke("trace", "info", source, "-t", "unet", "-t", "resnet32", "--json",
                                    check=True).stdout)
        assert got == want
    assert [i["name"] for i in want] == ["unet", "resnet32"]  # in the order asked


@needs_shared
@needs_simrd_zip
def test_reproduce_resolves_the_zip_to_the_public_programs():
    from dtrlab.report.pipeline import trace_source
    from dtrlab.report.plan import QUICK

    with trace_source(str(SIMRD_ZIP)) as (path, label):
        programs = QUICK.choose(load(path))  # what reproduce reads
    assert label == str(SIMRD_ZIP)
    assert programs and [p.name for p in programs] == [n for n in PUBLIC if n in {p.name for p in programs}]
    for p in programs:
        assert p.sha256 == public_program(p.name).sha256


# --- unique names ------------------------------------------------------------------------------------


@pytest.mark.parametrize("files, names", [
    (["resnet32-8-captured.log.gz", "resnet32-56-9000000000.0-x.log", "unet-6.log"], ["resnet32-8", "resnet32-56", "unet"]),
    (["a-b-c.log", "a-b-d.log", "a-e.log"], ["a-b-c", "a-b-d", "a-e"]),
    (["resnet32.log", "resnet32-8.log"], ["resnet32", "resnet32-8"]),
    (["Lstm-1.log", "lstm-2.log"], ["Lstm-1", "lstm-2"]),  # case is ignored, as select ignores it
    (["x.log", "x.jsonl"], ["x.log", "x.jsonl"]),  # every word the same: the file names
    (["d1/x.log", "d2/x.log"], ["d1/x.log", "d2/x.log"]),
    (["x.log", "x.log"], ["x.log#1", "x.log#2"]),
])
def test_unique_names(files, names):
    assert unique_names(files) == names
    assert len({n.lower() for n in names}) == len(names)


@pytest.fixture
def clashing(tmp_path):
    """The shipped resnet32-8 capture beside the public resnet32-56 trace, in one folder."""
    require("needs_shared")
    shutil.copy(next(p for p in open_source(shipped_traces()) if p.name == "resnet32").path, tmp_path)
    shutil.copy(next(TRACES.glob("resnet32-*.log")), tmp_path)
    return tmp_path


def test_short_names_that_clash_are_lengthened(clashing):
    assert sorted(s.name for s in open_source(clashing)) == ["resnet32-56", "resnet32-8"]
    with pytest.raises(UsageError, match=r"pick one trace with --trace \(traces: resnet32-56, resnet32-8\)"):
        load_one(clashing, "resnet32", cache=False)
    program = load_one(clashing, "resnet32-56", cache=False)
    assert program.name == "resnet32-56" and program.sha256 == public_program("resnet32").sha256


def test_an_exact_name_wins_over_prefixes(tmp_path):
    sources = open_source(shipped_traces())
    renamed = [s.__class__(n, s.title, s.path, s.has_start, s.load) for s, n in
               zip(sources, ["resnet32", "resnet32-8", "lstm", "lstm-8", "unet"])]
    assert [s.name for s in select(renamed, ["resnet32"])] == ["resnet32"]
    assert [s.name for s in select(renamed, ["LSTM-8"])] == ["lstm-8"]
    assert [s.name for s in select(renamed, ["res"])] == ["resnet32", "resnet32-8"]


@pytest.mark.slow
def test_a_sweep_over_clashing_names_resumes(clashing):
    store = clashing / "store.duckdb"
    args = ["sweep", clashing, "--budget-bytes", "2000000000,3000000000", "--store", store, "--workers", "1"]
    for _ in range(2):  # the second run finds every result stored and reports no change
        cli_invoke(*args, check=True)
    from dtrlab.sweep.store import results_dataframe

    df = results_dataframe(str(store))
    assert sorted(df["trace"].unique()) == ["resnet32-56", "resnet32-8"] and len(df) == 4
