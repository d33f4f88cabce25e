"""Small training steps as a user writes them (with an optimizer, causal attention, views of one
input), as factories `dtrlab capture --script FILE:FN` and `dtrlab run --script FILE:FN` take."""

import torch
from torch import nn
from torch.nn import functional as F


def _optimizer(name: str, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01)
    if name == "momentum":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    return torch.optim.AdamW(params, lr=1e-3)


def _mlp_step(optimizer: str, batch: int):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    opt = _optimizer(optimizer, model.parameters())
    x, y = torch.randn(batch, 32), torch.randn(batch, 8)

    def step():
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()

    return step


def _cnn_step(optimizer: str, batch: int):
    """Batch norm (its running statistics written in place) and gradients zeroed in place."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 4))
    opt = _optimizer(optimizer, model.parameters())
    x, y = torch.randn(batch, 3, 8, 8), torch.randint(0, 4, (batch,))

    def step():
        opt.zero_grad(set_to_none=False)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def mlp_sgd(batch=4):
    return _mlp_step("sgd", batch)


def mlp_momentum(batch=4):
    return _mlp_step("momentum", batch)


def mlp_adam(batch=4):
    return _mlp_step("adam", batch)


def mlp_adamw(batch=4):
    return _mlp_step("adamw", batch)


def cnn_momentum(batch=2):
    return _cnn_step("momentum", batch)


def cnn_adam(batch=2):
    return _cnn_step("adam", batch)


class _CausalAttention(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(x).split(d, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


def causal_attention(batch=4, seq=16, d_model=32, heads=4):
    """One causal self-attention layer, forward and backward."""
    torch.manual_seed(0)
    model = _CausalAttention(d_model, heads)
    x = torch.randn(batch, seq, d_model)

    def step():
        model.zero_grad(set_to_none=True)
        model(x).square().mean().backward()

    return step


STEPS = ("mlp_sgd", "mlp_momentum", "mlp_adam", "mlp_adamw", "cnn_momentum", "cnn_adam")


def two_views_of_one_input(batch=64, d_model=1024):
    """Two inputs that are views of one storage, made outside the step (issue 30: `unbind`)."""
    torch.manual_seed(0)
    model = nn.Linear(d_model, d_model)
    xs = torch.randn(2, batch, d_model).unbind(0)

    def step():
        model.zero_grad(set_to_none=True)
        (model(xs[0]) * model(xs[1])).sum().backward()

    return step


def mlp_view_write(batch=4):
    """Adam, and a write through a view of an activation that needs gradients (issue 24, point 6)."""
    torch.manual_seed(0)
    first, second = nn.Linear(16, 32), nn.Linear(32, 4)
    opt = torch.optim.Adam([*first.parameters(), *second.parameters()], lr=1e-3)
    x = torch.randn(batch, 16)

    def step():
        opt.zero_grad()
        h = first(x)
        h.narrow(1, 0, 8).mul_(3)
        second(torch.relu(h)).square().mean().backward()
        opt.step()

    return step
