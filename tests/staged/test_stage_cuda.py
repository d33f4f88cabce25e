"""The staged step on a CUDA device: the budget holds in CUDA's own caching allocator
(torch.cuda.max_memory_allocated over a step, above where it stood, plus the state), within the
allocator's documented slack, and the state stays plain PyTorch's. Skipped where there is no CUDA."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from conftest import cli_invoke  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# A U-Net big enough that its activations, not its weights, make the peak (tests/live's CUDA sizes).
CUDA_SIZES = ("batch=8", "image=128", "width=16", "depth=3")
ROUNDING_BYTES = 512  # the caching allocator rounds every block up to a multiple of 512 bytes
WORKSPACE_BYTES = 16 << 20  # operators' own scratch (cuDNN's workspace), no tensor of the graph's


@pytest.mark.parametrize("ratio", [1.0, 0.7, 0.5])
def test_the_budget_holds_in_the_cuda_allocator(ratio):
    argv = ["stage", "unet", *(a for kv in CUDA_SIZES for a in ("--size", kv)), "--device", "cuda",
            "--ratio", str(ratio), "--optimizer", "sgd", "--steps", "3", "--json"]
    code, out, err = cli_invoke(*argv)
    assert code in (0, None), err
    s = json.loads(out)
    assert s["device"] == "cuda" and s["measured_peak_bytes"] <= s["budget_bytes"]
    blocks = torch.cuda.memory_stats()["active.all.peak"]
    assert s["cuda_peak_bytes"] <= s["budget_bytes"] + ROUNDING_BYTES * blocks + WORKSPACE_BYTES
    # the same operators in the same order as the plain step: within inductor's tolerance at least
    assert s["state_within_tolerance"] is True
