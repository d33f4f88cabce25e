"""dtrlab.stage on hypothesis-generated networks against plain eager PyTorch: each generated network
with its optimizer (SGD, SGD with momentum, Adam), staged at five budgets from the least at which DTR
fits its step to unbounded, gives in two steps (the plan without the optimizer's state, and the plan
with it) bitwise the eager steps' losses, parameters, buffers, gradients and optimizer state, and the
least budget recomputes (test_stage.assert_staged_bitwise_at_budgets)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch import nn  # noqa: E402

from test_stage import assert_staged_bitwise_at_budgets, mse_step  # noqa: E402

BATCH = 256  # activations, not parameters and optimizer state, fill the peak: low ratios leave room
ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU, "sigmoid": nn.Sigmoid}
OPTIMIZERS = ("sgd", "momentum", "adam")


@st.composite
def networks(draw):
    """A feed-forward network's description: widths, and per layer an activation, a norm (none,
    batch, layer), a residual connection (same width only) and a dropout probability (0: none)."""
    n_layers = draw(st.integers(2, 4))
    widths = [draw(st.sampled_from((8, 16, 24)))] + [draw(st.sampled_from((16, 24, 32))) for _ in range(n_layers)]
    layers = [dict(act=draw(st.sampled_from(sorted(ACTIVATIONS))), norm=draw(st.sampled_from(("none", "batch", "layer"))),
                   residual=draw(st.booleans()), dropout=draw(st.sampled_from((0.0, 0.0, 0.2, 0.5))))
              for _ in range(n_layers)]
    return dict(widths=widths, layers=layers, optimizer=draw(st.sampled_from(OPTIMIZERS)),
                seed=draw(st.integers(0, 2**16)))


class Net(nn.Module):
    def __init__(self, widths: list[int], layers: list[dict]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList()
        self.residual = []
        for (w_in, w_out), spec in zip(zip(widths, widths[1:]), layers):
            norm = {"none": nn.Identity, "batch": nn.BatchNorm1d, "layer": nn.LayerNorm}[spec["norm"]]
            parts = [nn.Linear(w_in, w_out), norm(w_out) if spec["norm"] != "none" else norm(),
                     ACTIVATIONS[spec["act"]]()]
            if spec["dropout"]:
                parts.append(nn.Dropout(spec["dropout"]))
            self.blocks.append(nn.Sequential(*parts))
            self.residual.append(spec["residual"] and w_in == w_out)
        self.head = nn.Linear(widths[-1], 3)

    def forward(self, x):
        for block, residual in zip(self.blocks, self.residual):
            x = x + block(x) if residual else block(x)
        return self.head(x)


def world(spec: dict):
    """The network's training step (its optimizer after the backward), the model, the optimizer."""
    torch.manual_seed(spec["seed"])
    model = Net(spec["widths"], spec["layers"])
    opt = {"sgd": lambda p: torch.optim.SGD(p, lr=0.05),
           "momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
           "adam": lambda p: torch.optim.Adam(p, lr=1e-2)}[spec["optimizer"]](model.parameters())
    return mse_step(model, opt, torch.randn(BATCH, spec["widths"][0]), torch.randn(BATCH, 3)), model, opt


@pytest.mark.slow
# No shrinking: an example takes seconds, and a failing one is printed as generated.
@settings(max_examples=5, deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate),
          suppress_health_check=[HealthCheck.too_slow])
@given(spec=networks())
def test_generated_networks_staged_are_bitwise_the_eager_step_at_five_budgets(spec):
    assert_staged_bitwise_at_budgets(lambda: world(spec))
