"""The six public traces lower to exactly the reference parser's counts, from every source shape."""

from __future__ import annotations

import gzip
import json
import shutil
import zipfile

import numpy as np
import pytest

from conftest import REFERENCE, TRACES, needs_shared, public_program
from dtrlab.trace import load, load_one
from dtrlab.trace.lower import COMPUTE, GET, PIN, RELEASE
from dtrlab.trace.read import open_source
from dtrlab.trace.stats import trace_stats
from trace_helpers import assert_same_program

pytestmark = needs_shared

NAMES = ["tv_densenet121", "inceptionv4", "resnet32", "transformer", "unet", "lstm"]


def reference():
    return json.loads((REFERENCE / "lowering.json").read_text())


def test_the_reference_covers_the_six_traces():
    assert sorted(reference()) == sorted(NAMES)
    assert [s.name for s in open_source(TRACES)] == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_counts_match_the_reference_parser(name):
    want = reference()[name]
    p = public_program(name)
    kinds = p.step_kind
    got = {
        "operators": p.n_ops,
        "forward_operators": int((~p.op_backward).sum()),
        "backward_operators": int(p.op_backward.sum()),
        "tensors": p.n_tensors,
        "constants": int(p.op_constant.sum()),
        "schedule_steps": len(kinds),
        "compute_steps": int((kinds == COMPUTE).sum()),
        "get_steps": int((kinds == GET).sum()),
        "pin_steps": int((kinds == PIN).sum()),
        "release_steps": int((kinds == RELEASE).sum()),
        "compute_ns": p.compute_ns,
    }
    assert got == want


@pytest.mark.parametrize("name", NAMES)
def test_stats_agree_with_the_reference(name):
    want = reference()[name]
    stats = trace_stats(public_program(name)).to_dict()
    assert {k: stats[k] for k in want} == want


@pytest.mark.parametrize("name", NAMES)
def test_program_invariants(name):
    p = public_program(name)
    # outputs are consecutive and in creation order
    assert np.array_equal(p.op_out_start, np.concatenate([[0], np.cumsum(p.op_n_out)[:-1]]))
    assert np.array_equal(p.tensor_op, np.repeat(np.arange(p.n_ops), p.op_n_out))
    # arguments exist before their operator runs
    arg_op = np.repeat(np.arange(p.n_ops), np.diff(p.op_arg_ptr))
    assert (p.tensor_op[p.op_args] < arg_op).all()
    # an alias takes no bytes and shares its argument's storage
    alias = p.tensor_alias_arg >= 0
    assert (p.tensor_size_bytes[alias] == 0).all()
    for t in np.flatnonzero(alias)[:200]:
        op = p.tensor_op[t]
        assert p.tensor_storage[t] == p.tensor_storage[p.args_of(op)[p.tensor_alias_arg[t]]]
    # a storage's root is a non-alias tensor holding the storage's bytes
    assert (p.tensor_alias_arg[p.storage_root] == -1).all()
    assert np.array_equal(p.tensor_size_bytes[p.storage_root], p.storage_size_bytes)
    assert np.array_equal(p.tensor_storage[p.storage_root], np.arange(p.n_storages))
    # constants cost nothing and have no arguments; backward never turns back to forward
    assert (p.op_cost_ns[p.op_constant] == 0).all()
    assert (np.diff(p.op_arg_ptr)[p.op_constant] == 0).all()
    assert (np.diff(p.op_backward.astype(int)) >= 0).all()
    assert (np.diff(p.op_line) > 0).all()
    assert p.meta["skipped_lines"] == 1 and p.meta["instructions"]["CALL"] > 0


# --- source shapes ---------------------------------------------------------------------------------


def log(name):
    (path,) = TRACES.glob(f"{name}-*.log")
    return path


def test_single_log_file_equals_the_manifest_trace():
    # A lone file has no manifest: it skips to START because there is one.
    assert_same_program(load_one(log("unet"), cache=False), public_program("unet"))


def test_gzipped_log_file(tmp_path):
    gz = tmp_path / (log("unet").name + ".gz")
    gz.write_bytes(gzip.compress(log("unet").read_bytes()))
    program = load_one(gz, cache=False)
    assert program.name == "unet"
    # sha256 is of the trace text, so a compressed copy is the same program
    assert_same_program(program, public_program("unet"))


def test_folder_with_manifest_and_trace_selection():
    programs = load(TRACES, ["res", "U-Net"], cache=False)
    assert [p.name for p in programs] == ["resnet32", "unet"]  # by short name or by title


def test_folder_without_manifest(tmp_path):
    for name in ("unet", "resnet32"):
        shutil.copy(log(name), tmp_path)
    programs = load(tmp_path, cache=False)
    assert sorted(p.name for p in programs) == ["resnet32", "unet"]
    for p in programs:
        assert_same_program(p, public_program(p.name))


def test_logs_zip_is_read_without_extracting(tmp_path):
    manifest = json.loads((TRACES / "manifest.json").read_text())
    keep = [m for m in manifest["models"] if m["log"].startswith(("unet", "resnet32"))]
    archive = tmp_path / "logs.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("logs/manifest.json", json.dumps({"models": keep}))
        for model in keep:
            zf.write(TRACES / model["log"], "logs/" + model["log"])
    before = sorted(tmp_path.rglob("*"))
    sources = open_source(archive)
    assert [s.path for s in sources] == [f"{archive}:logs/{m['log']}" for m in keep]
    programs = load(archive, cache=False)
    assert sorted(tmp_path.rglob("*")) == before  # nothing was extracted
    assert [p.name for p in programs] == ["resnet32", "unet"]
    for p in programs:
        assert_same_program(p, public_program(p.name))
