"""A live step takes the paths its capture took: PyTorch chooses kernels by looking at its tensors,
and the runtime's wrappers pass each such check as the plain tensors of the capture do. Checked
predicate by predicate, then on real steps (gradient clipping, optimizers' foreach and fused
kernels) against plain PyTorch, bitwise, and against the simulation, decision by decision."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

from torch.optim import optimizer as torch_optimizer  # noqa: E402
from torch.utils import _foreach_utils  # noqa: E402
from torch.utils._python_dispatch import is_traceable_wrapper_subclass  # noqa: E402

from dtrlab.capture.recorder import record  # noqa: E402
from dtrlab.live.runs import same_decisions, simulate_plan  # noqa: E402
from dtrlab.live.session import LiveBudgetError, LiveSession, LiveTensor, PlanMismatch, make_plan  # noqa: E402
from dtrlab.sim.simulate import baseline  # noqa: E402
from live_helpers import deterministic_torch, same_bits  # noqa: E402,F401 (an autouse fixture)

PREDICATES = {
    "foreach support": lambda t: _foreach_utils._has_foreach_support([t], t.device),
    "optimizer's foreach default": lambda t: torch_optimizer._default_to_fused_or_foreach([t], False, False),
    "optimizer's fused default": lambda t: torch_optimizer._default_to_fused_or_foreach([t], False, True),
    "contiguous": lambda t: t.is_contiguous(),
    "channels last": lambda t: t.is_contiguous(memory_format=torch.channels_last),
    "device": lambda t: t.device,
    "dtype": lambda t: t.dtype,
    "layout": lambda t: t.layout,
    "floating point": lambda t: torch.is_floating_point(t),
    "strides": lambda t: (t.stride(), t.storage_offset()),
    "a traceable subclass": is_traceable_wrapper_subclass,
    "has a torch function": lambda t: torch.overrides.has_torch_function((t,)),
    "tolist": lambda t: t.tolist(),
}


def _kinds():
    """Tensors of several kinds, made inside a live step (LiveTensors) and plainly."""
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    image = torch.rand(2, 3, 4, 4)
    return [lambda: x.exp(), lambda: x.exp().t(), lambda: x[:, 1:3].mul(2), lambda: x.to(torch.bfloat16),
            lambda: x.long().add(1), lambda: image.mul(2).contiguous(memory_format=torch.channels_last)]


@pytest.mark.parametrize("predicate", sorted(PREDICATES))
def test_a_live_tensor_passes_pytorch_s_path_checks_as_a_plain_one(predicate):
    """Each check by which PyTorch picks a kernel path answers for a LiveTensor what it answers for
    the plain tensor the same operator makes (foreach support failed before the wrappers' type
    joined PyTorch's lists)."""
    check = PREDICATES[predicate]
    for make in _kinds():
        session = LiveSession()
        with session:
            live = make()
        assert type(live) is LiveTensor
        assert check(live) == check(make()), (predicate, make)


def _mlp_step(clip: str | None, optimizer: str, **options):
    """A small MLP's training step: forward, backward, the clipping named, the optimizer's step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4))
    opt = getattr(torch.optim, optimizer)(model.parameters(), lr=0.05, **options)
    x, y = torch.randn(16, 8), torch.randn(16, 4)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        if clip == "norm":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)  # the line a mismatch names
        elif clip == "value":
            torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)
        opt.step()

    return model, opt, step


def _state(model, opt, session=None):
    """Every parameter, gradient and optimizer state tensor after a step, as plain tensors."""
    value = session.value if session is not None else (lambda t: t)
    out = {}
    for name, p in model.named_parameters():
        out[name] = p.detach()
        out[name + ".grad"] = value(p.grad)
        for k, v in opt.state[p].items():
            out[f"{name}.{k}"] = value(v) if isinstance(v, torch.Tensor) else torch.tensor(v)
    return out


STEPS = [("norm", "AdamW", {}), ("norm", "AdamW", {"foreach": True}), ("norm", "Adam", {"fused": True}),
         ("value", "SGD", {"momentum": 0.9}), ("norm", "SGD", {"momentum": 0.9, "foreach": True}),
         (None, "RMSprop", {"foreach": True}), (None, "Adagrad", {"foreach": True})]


@pytest.mark.parametrize("clip, optimizer, options", STEPS)
@pytest.mark.parametrize("engine", ["c", "python"])
def test_clipping_and_foreach_optimizers_run_live_bitwise_with_the_simulation_s_decisions(
        clip, optimizer, options, engine):
    """Gradient clipping with its defaults (PyTorch's foreach path on plain tensors) and optimizers
    told to use foreach or fused kernels: the live step follows its capture unbounded and at ratios
    1.0, 0.9 and 0.7, decides as `simulate` on the capture, and where it finishes its parameters,
    gradients and optimizer state are plain PyTorch's bitwise (a twin made from the same seed,
    stepped plainly as often)."""
    model, opt, step = _mlp_step(clip, optimizer, **options)
    twin_model, twin_opt, twin_step = _mlp_step(clip, optimizer, **options)
    step()  # the optimizer's state made: the capture is of a step in its steady state
    twin_step()
    plan = make_plan(record(step).instructions)
    twin_step()
    peak = baseline(plan.program).peak_bytes
    for ratio in (None, 1.0, 0.9, 0.7):
        budget = 2**62 if ratio is None else int(peak * ratio)
        sim = simulate_plan(plan.program, budget, "dtr", 0)
        session = LiveSession(budget, plan=plan, engine=engine)
        try:
            with session:
                step()
            outcome = "ok"
        except LiveBudgetError:
            outcome = "oom"
        assert (outcome, tuple(session.evicted), session.replays, session.peak_bytes) == (
            sim.outcome, sim.evicted, sim.remats, sim.peak_bytes), ratio
        if outcome == "oom":  # the step stopped before it wrote its constants: the next starts as it did
            continue
        assert session.clock_ns == sim.clock_ns
        twin_step()
        live, plain = _state(model, opt, session), _state(twin_model, twin_opt)
        assert live.keys() == plain.keys()
        assert [k for k in plain if not same_bits(live[k], plain[k])] == [], ratio


def test_a_step_that_still_differs_names_the_user_s_line_and_the_likely_cause(monkeypatch):
    """With the wrappers' type taken out of PyTorch's foreach lists (as before they joined them),
    clipping takes the per-tensor path live: the one line names the user's line that clipped and
    the likely cause, in under 200 characters; the details keep the plan's instructions."""
    model, opt, step = _mlp_step("norm", "AdamW")
    step()
    plan = record(step).instructions
    for module in (torch_optimizer, _foreach_utils):
        monkeypatch.setattr(module, "_foreach_supported_types",
                            [t for t in module._foreach_supported_types if t is not LiveTensor])
    with pytest.raises(PlanMismatch) as info:
        with LiveSession(plan=plan):
            step()
    line = f"dtrlab: {info.value}"
    assert len(line) < 200, line
    assert re.fullmatch(r"dtrlab: the step differs from its plan at test_live_conformance.py:\d+( \(torch.nn.*\))?: "
                        r"linalg_vector_norm here, _foreach_norm.Scalar in the plan \(PyTorch chose a foreach or "
                        r"fused kernel in one run only\)( \(more: dtrlab --debug run \.\.\.\))?", line), line
    assert "Call(line=0, name='aten._foreach_norm.Scalar'" in info.value.details
    assert "in step: torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)" in info.value.details
