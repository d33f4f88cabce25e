"""A capture is the step's steady state: the first capture in a process holds no tensor longer than
the next one does (issue 24, point 13: a causal-attention step's first capture peaked 28% higher)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

import dtrlab  # noqa: E402

# Run in a fresh process: what happens once per process (a lazy import, a first call) must not
# have happened yet, as it has in a test session that captured before.
_SCRIPT = """
import json, sys
import user_steps
from dtrlab.capture.recorder import record, record_median
from dtrlab.trace.read import Call, Constant, Copy, Mutate, Release

def shape(capture):  # the instructions without their times
    return [(type(x).__name__, getattr(x, "name", None)) for x in capture.instructions]

step = user_steps.causal_attention()
step()  # a plain warm-up, as `dtrlab run` does before it captures its plan
first, second = record(step), record(step)
median = record_median(user_steps.causal_attention(), repeat=1)
json.dump({"peaks": [first.peak_bytes, second.peak_bytes, median.peak_bytes],
           "same": shape(first) == shape(second) == shape(median),
           "dynamo": "torch._dynamo" in sys.modules}, sys.stdout)
"""


@pytest.mark.slow
def test_the_first_capture_in_a_process_is_the_steady_state():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(dtrlab.__file__).parents[1]), str(Path(__file__).parent)]))
    done = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    first, second, median = out["peaks"]
    assert first == second == median
    assert out["same"]
    # The cause was a one-time import of torch._dynamo by the recorder's first dispatch (a handler
    # defined in a TorchDispatchMode's body is wrapped in dynamo's "disable"): the import's reference
    # cycle held the step's frames while the cycle collector was off, so the first capture kept
    # the attention's q, k, v and output to the step's end (111,240 bytes against 99,848).
    assert not out["dynamo"]
