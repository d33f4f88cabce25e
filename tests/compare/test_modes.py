"""Every mode's step against plain PyTorch's: the same gradients from the same state (bitwise for the
eager and staged modes, within staged.inductor.GRAD_TOLERANCE for inductor), and the measured peaks ordered
as what each mode keeps says they must be."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dtrlab.capture.zoo import ZOO  # noqa: E402
from dtrlab.compare import Mode, compare, find_blocks, prepare  # noqa: E402
from dtrlab.staged.inductor import GRAD_TOLERANCE, max_relative_difference  # noqa: E402
from dtrlab.compare.world import grads_of, zoo_step  # noqa: E402


def plain_grads(name: str, sizes: dict) -> list:
    """One step of the zoo model written out in plain PyTorch, no dtrlab mode in the way."""
    torch.manual_seed(0)
    step = ZOO[name].make(**sizes)
    step()
    return [p.grad for p in step.model.parameters()]


def mode_grads(name: str, sizes: dict, mode: Mode) -> list:
    world = zoo_step(name, sizes)
    prepare(mode, world, costs="unit").step()
    return grads_of(world)


def assert_bitwise(name: str, sizes: dict, modes) -> None:
    want = plain_grads(name, sizes)
    for mode in modes:
        got = mode_grads(name, sizes, mode)
        assert len(got) == len(want)
        assert all(torch.equal(a, b) for a, b in zip(want, got)), mode.label


@pytest.mark.parametrize("name,sizes", [("unet", {}), ("densenet", {}), ("transformer", {"layers": 2})])
def test_eager_modes_give_plain_pytorchs_gradients_bitwise(name, sizes):
    # the Transformer's layers are called with keyword arguments (src_mask, is_causal)
    assert_bitwise(name, {**ZOO[name].tiny, **sizes}, (Mode("plain"), Mode("checkpoint"), Mode("sac")))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["unet", "densenet"])
def test_staged_modes_give_plain_pytorchs_gradients_bitwise(name):
    assert_bitwise(name, ZOO[name].small, (Mode("staged", 1.0), Mode("staged", 0.7)))


def test_checkpointing_per_block_lowers_the_measured_peak_of_a_model_with_many_blocks():
    # U-Net at its small sizes: five double convolutions, activations most of the peak
    peaks = {}
    for name in ("plain", "checkpoint", "sac"):
        runner = prepare(Mode(name), zoo_step("unet", ZOO["unet"].small))
        runner.step()  # the optimizer's state made, as in every later step
        peaks[name] = runner.peak_bytes()
    assert peaks["checkpoint"] < 0.8 * peaks["plain"]
    assert peaks["checkpoint"] < peaks["sac"] <= peaks["plain"]  # SAC keeps the convolutions besides the inputs


def test_compare_times_each_mode_in_turns():
    points = compare("resnet32", ZOO["resnet32"].tiny, [Mode("plain"), Mode("checkpoint")], repeat=3)
    assert [p.label for p in points] == ["plain", "checkpoint"]
    assert all(p.step_s > 0 and p.peak_bytes > 0 and p.peak_kind == "storages" and not p.skipped for p in points)


@pytest.mark.slow
def test_modes_that_cannot_run_say_why_in_one_line():
    points = compare("lstm", ZOO["lstm"].tiny, [Mode("plain"), Mode("checkpoint"), Mode("staged", 0.05)],
                     repeat=1, costs="unit")
    plain, ckpt, staged = points
    assert plain.peak_bytes > 0 and not plain.skipped
    assert ckpt.peak_bytes is None and "no repeated blocks" in ckpt.skipped
    assert staged.peak_bytes is None and staged.skipped.startswith("the step does not fit")


@pytest.mark.slow
def test_a_staged_step_under_a_lower_ratio_measures_a_lower_peak():
    points = compare("unet", ZOO["unet"].small, [Mode("staged", 1.0), Mode("staged", 0.7)], repeat=1, costs="unit")
    assert points[1].peak_bytes < points[0].peak_bytes


def test_a_mode_takes_a_setting_only_where_it_has_one():
    with pytest.raises(ValueError):
        Mode("staged")
    with pytest.raises(ValueError):
        Mode("checkpoint", 0.5)
    assert Mode("compile", 0.3).label == "compile 0.3"


@pytest.mark.slow
def test_compiled_steps_give_plain_pytorchs_gradients_within_tolerance_each_from_its_own_compilation():
    # inductor compiles each model for about 30 s here; the Transformer (ResNet-32 at width 4 corrupts
    # the heap in inductor's backward on this machine: docs/checkpointing.md)
    from torch._dynamo.utils import counters

    sizes = dict(ZOO["transformer"].tiny, layers=2)
    want = plain_grads("transformer", sizes)
    graphs = counters["stats"]["unique_graphs"]
    for budget in (0.2, 0.8):  # two models of one class in one process, under two budgets
        world = zoo_step("transformer", sizes)
        runner = prepare(Mode("compile", budget), world)
        runner.step()
        got = grads_of(world)
        assert max_relative_difference(want, got) <= GRAD_TOLERANCE
        assert runner.peak_kind == "allocator" and runner.peak_bytes() > 0
    # each compiled its own graph: none ran the other's partition
    assert counters["stats"]["unique_graphs"] - graphs == 2


@pytest.mark.slow
def test_checkpointing_updates_batch_norms_running_statistics_twice_and_staging_does_not():
    # docs/checkpointing.md: a recomputed batch norm in training mode updates its running statistics
    # again, so PyTorch's checkpointing changes the model's buffers; the staged step keeps them bitwise.
    buffers, in_blocks = {}, None
    for mode in (Mode("plain"), Mode("checkpoint"), Mode("sac"), Mode("staged", 1.0)):
        world = zoo_step("resnet32", ZOO["resnet32"].tiny)
        prepare(mode, world, costs="unit").step()
        buffers[mode.name] = list(world.model.buffers())
        in_blocks = sum(len(list(b.buffers())) for b in find_blocks(world.model))

    def differ(name):
        return sum(not torch.equal(a, b) for a, b in zip(buffers["plain"], buffers[name]))
    assert in_blocks == 24 and len(buffers["plain"]) == 27  # the stem's batch norm is in no block
    assert differ("staged") == 0
    assert differ("checkpoint") == differ("sac") == in_blocks  # mean, variance and count of each
