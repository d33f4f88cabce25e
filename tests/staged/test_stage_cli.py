"""`dtrlab stage`: a zoo model staged and run beside its plain step (the same state after the same steps);
mistakes and a budget that does not fit are one line and exit status 2."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

from dtrlab.capture.zoo import ZOO  # noqa: E402
from dtrlab.cli import main  # noqa: E402


def _cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in argv])
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


def _sizes(name: str) -> list[str]:
    return [arg for k, v in ZOO[name].tiny.items() for arg in ("--size", f"{k}={json.dumps(v)}")]


@pytest.mark.slow
def test_stage_runs_the_staged_step_beside_the_plain_one(capsys):
    code, out, err = _cli(["stage", "densenet", *_sizes("densenet"), "--ratio", "1.0", "--optimizer", "sgd",
                           "--steps", "2", "--json"], capsys)
    assert code in (0, None), err
    summary = json.loads(out)
    assert summary["state_equals_plain"] is True
    assert summary["plans"] == 2 and summary["recomputations"] == 0
    assert summary["measured_peak_bytes"] <= summary["simulated_peak_bytes"] <= summary["budget_bytes"]
    assert summary["staging_s"] > 0 and summary["staged_step_ms"] > 0


def test_stage_mistakes_are_one_line(capsys):
    code, out, err = _cli(["stage", "densenet", "--optimizer", "lion", "--ratio", "1"], capsys)
    assert code == 2 and "--optimizer" in err and len(err.strip().splitlines()) == 1
    code, out, err = _cli(["stage", "densenet", *_sizes("densenet"), "--ratio", "0.05"], capsys)
    assert code == 2 and "does not fit" in err and len(err.strip().splitlines()) == 1
