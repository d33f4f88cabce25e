"""A ratio is a fraction of the step's unbounded peak as the engines count it: a user's step with an
optimizer, and every zoo model, run at ratio 1.0 with no eviction, simulated and live, and the
simulated unbounded peak is the live runtime's, counted by storage identity, to the byte."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

import user_steps  # noqa: E402 (tests/capture: the user's steps)
from conftest import cli_invoke  # noqa: E402
from dtrlab.capture.recorder import record  # noqa: E402
from dtrlab.capture.save import to_program  # noqa: E402
from dtrlab.capture.zoo import ZOO  # noqa: E402
from dtrlab.live.session import LiveSession  # noqa: E402
from dtrlab.sim.simulate import baseline, budget_from_ratio, simulate  # noqa: E402
from dtrlab.trace import load  # noqa: E402
from dtrlab.capture.naming import VIEW_OP  # noqa: E402
from dtrlab.capture.save import to_text  # noqa: E402
from dtrlab.trace.lower import lower  # noqa: E402
from dtrlab.trace.read import Alias, Call, Constant, Copy, Memory, Mutate  # noqa: E402

STEPS_FILE = Path(user_steps.__file__)


def _by_identity(session: LiveSession) -> int:
    """Bytes of the distinct storages behind the values the session holds (by data pointer),
    apart from the session's own counter."""
    seen = {}
    for v in session.held():
        st = v.untyped_storage()
        seen[st.data_ptr() or -id(v)] = st.nbytes()
    return sum(seen.values())


def _live_unbounded_peaks(step, plan) -> tuple[int, int]:
    """(the engine's peak, the most bytes held by storage identity after any operator) of the
    step run live with no budget."""
    most = [0]

    def count(session: LiveSession) -> None:
        most[0] = max(most[0], _by_identity(session))

    session = LiveSession(plan=plan, after_op=count)
    with session:
        step()
    return session.peak_bytes, most[0]


def _zoo_step(name: str):
    torch.manual_seed(0)
    step = ZOO[name].make(**ZOO[name].tiny)
    step()  # warm-up
    return step


def _user_step(name: str):
    step = getattr(user_steps, name)()
    step()  # warm-up: the optimizer makes its state
    return step


CASES = [("user", n) for n in user_steps.STEPS] + [("zoo", n) for n in sorted(ZOO)]


@pytest.mark.parametrize("kind, name", CASES)
def test_the_unbounded_peak_is_the_live_runtimes_and_ratio_one_evicts_nothing(kind, name):
    step = _user_step(name) if kind == "user" else _zoo_step(name)
    capture = record(step)
    program = to_program(capture, name)
    peak = baseline(program).peak_bytes
    result = simulate(program, budget_from_ratio(program, 1.0))
    assert (result.outcome, result.evictions) == ("ok", 0)
    assert result.peak_bytes == peak
    for plan in (capture.instructions, None):  # planned and unplanned
        assert _live_unbounded_peaks(step, plan) == (peak, peak), (name, plan is None)
    if kind == "user":
        # The optimizer writes its constants (parameters, state): each one's owner keeps the
        # original (a COPY), which the unbounded run then counts as the engines do.
        assert any(isinstance(x, Mutate) for x in capture.instructions)
        assert any(isinstance(x, Copy) for x in capture.instructions)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp_adam", "cnn_momentum"])
def test_capture_simulate_and_run_at_ratio_one(name, tmp_path):
    trace = tmp_path / f"{name}.log.gz"
    cli_invoke("capture", "--script", f"{STEPS_FILE}:{name}", "--out", str(trace), "--json", check=True)
    simulated = json.loads(cli_invoke("simulate", str(trace), "--ratio", "1.0", "--json", check=True).stdout)
    assert (simulated["outcome"], simulated["evictions"]) == ("ok", 0)
    ran = json.loads(cli_invoke("run", "--script", f"{STEPS_FILE}:{name}", "--ratio", "1.0", "--compare-sim",
                                "--json", check=True).stdout)
    assert [(s["outcome"], s["evictions"]) for s in ran["steps"]] == [("ok", 0)]
    assert ran["simulated"]["outcome"] == "ok" and ran["same_decisions"] == [True]


def test_views_of_one_storage_made_outside_the_step_count_once():
    """Issue 30: `torch.randn(2, B, D).unbind(0)` made two CONSTANTs of the whole storage each, so
    the unbounded peak (and every budget of a ratio) counted its 524,288 bytes twice. The second
    view is now an alias of the first (VIEW_OP), and the storage counts once, as PyTorch holds it."""
    step = _user_step("two_views_of_one_input")
    capture = record(step)
    storage_bytes = 2 * 64 * 1024 * 4
    text = to_text(capture)
    views = [k for k, x in enumerate(text.instructions) if isinstance(x, Call) and x.name == VIEW_OP]
    assert len(views) == 1
    k = views[0]
    view, memory, alias = text.instructions[k:k + 3]
    assert isinstance(memory, Memory) and memory.size_bytes == storage_bytes
    assert isinstance(alias, Alias) and alias.alias == 0
    after = baseline(lower(text)).peak_bytes
    # The trace as it was written before: the second view a CONSTANT of its own.
    before_ins = (*text.instructions[:k], Constant(view.line, view.results[0]), memory, *text.instructions[k + 3:])
    before = baseline(lower(dataclasses.replace(text, instructions=before_ins))).peak_bytes
    assert after == capture.peak_bytes  # the recorder's count, by storage identity
    assert before == after + storage_bytes
    assert _live_unbounded_peaks(step, capture.instructions) == (after, after)
    assert _live_unbounded_peaks(step, None) == (after, after)
