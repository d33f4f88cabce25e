"""`dtrlab capture`: a zoo model and a user's script become trace files; mistakes are one line."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

from conftest import cli_invoke  # noqa: E402
from dtrlab.trace import load  # noqa: E402


def test_capture_zoo_model(tmp_path):
    path = tmp_path / "r.log.gz"
    code, out, _ = cli_invoke("capture", "resnet32", "--batch", "1", "--size", "image=8", "--size", "depth=8",
                              "--size", "width=2", "--repeat", "2", "--out", str(path), "--json")
    assert code == 0
    summary = json.loads(out)
    assert summary["recorded_peak_bytes"] <= summary["simulated_peak_bytes"]
    (program,) = load(path, cache=False)
    assert program.n_ops > 50


def test_capture_script(tmp_path):
    script = tmp_path / "my_model.py"
    script.write_text("import torch\n"
                      "def make_step(batch=2):\n"
                      "    m = torch.nn.Linear(4, 4)\n"
                      "    x = torch.randn(batch, 4)\n"
                      "    def step():\n"
                      "        m.zero_grad(set_to_none=True)\n"
                      "        m(x).sum().backward()\n"
                      "    return step\n")
    path = tmp_path / "m.log"
    code, out, _ = cli_invoke("capture", "--script", f"{script}:make_step", "--batch", "3",
                              "--out", str(path), "--json")
    assert code == 0
    summary = json.loads(out)
    assert summary["recorded_peak_bytes"] == summary["simulated_peak_bytes"]
    assert load(path, cache=False)


@pytest.mark.parametrize("argv, message", [
    (["capture", "nosuch"], "unknown model"),
    (["capture"], "exactly one of MODEL and --script"),
    (["capture", "lstm", "--size", "bogus=1"], "takes no argument bogus"),
    (["capture", "--script", "missing.py:f"], "no such file"),
])
def test_capture_mistakes_are_one_line(argv, message):
    code, _, err = cli_invoke(*argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_capture_prints_bytes_as_people_read_them_and_why_its_two_peaks_differ(tmp_path):
    """No `batch None` for a script given no --batch; bytes through the CLI's one formatter; the
    gap between the simulated peak (what a ratio is of) and the plain step's is explained."""
    from pathlib import Path

    from dtrlab.formats import bytes_text as _bytes

    steps = Path(__file__).with_name("user_steps.py")
    argv = ["capture", "--script", f"{steps}:mlp_adam", "--out", str(tmp_path / "adam.log.gz")]
    code, out, _ = cli_invoke(*argv, "--json")
    assert code == 0
    summary = json.loads(out)
    assert "batch" not in summary
    simulated, plain = summary["simulated_peak_bytes"], summary["recorded_peak_bytes"]
    assert simulated > plain == summary["in_place_peak_bytes"]  # Adam writes its constants in place
    code, out, _ = cli_invoke(*argv)
    assert code == 0
    assert "None" not in out and "batch" not in out
    assert f"simulated peak     {_bytes(simulated)}" in out and f"plain step's peak  {_bytes(plain)}" in out
    assert f"It is {simulated - plain:,} bytes ({100 * (simulated - plain) / plain:.1f}%) above" in out
    assert f"written in place instead, the trace peaks at the plain step's {plain:,} bytes" in out
    code, out, _ = cli_invoke("capture", "--script", f"{steps}:mlp_adam", "--batch", "2",
                              "--out", str(tmp_path / "b.log"))
    assert "batch              2\n" in out
