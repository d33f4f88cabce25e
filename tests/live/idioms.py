"""The training-step idioms of the conformance suite (tests/live/test_idioms.py): each a small real
step as users write it, with everything it changes named so a run can be compared bitwise.

Owns the idioms (tiny CPU models, one factory each) and what a step's state is: parameters and
their gradients, buffers, optimizer state, learning rates, tensors the step keeps (an EMA) and the
values it logs. idioms_table.py runs them through capture, simulate and the live runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

BATCH, FEATURES, HIDDEN, CLASSES = 128, 16, 16, 8  # activations outweigh weights: a budget has room to evict
VOCAB = 16
DEPTH = 4
WIDE = 48  # _optimizer_peak's width: weights of 9 KiB against activations of 1.5 KiB


@dataclass
class Rig:
    """One idiom's training state and its step. modules: named modules (their parameters, gradients
    and buffers); optimizers and schedulers: what the step updates; kept: tensors the step writes
    besides those (an EMA of the weights); log: values the step reads out (`.item()`)."""

    step: Callable[[], None]
    modules: dict[str, nn.Module]
    optimizers: list[torch.optim.Optimizer] = field(default_factory=list)
    kept: dict[str, torch.Tensor] = field(default_factory=dict)
    log: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Idiom:
    """name: its row in docs/idioms.md; what: one line on what it does; make: a fresh Rig, the same
    every call (torch seeded inside)."""

    name: str
    what: str
    make: Callable[[], Rig]


def state_of(rig: Rig) -> list[tuple[str, object]]:
    """Everything the step changes, named: tensors (plain or live) and Python numbers."""
    out: list[tuple[str, object]] = []
    seen: set[int] = set()
    for m_name, module in rig.modules.items():
        for name, p in module.named_parameters(remove_duplicate=False):
            if id(p) in seen:  # a tied weight is one parameter
                continue
            seen.add(id(p))
            out.append((f"{m_name}.{name}", p.detach()))
            out.append((f"{m_name}.{name}.grad", p.grad))
        for name, b in module.named_buffers():
            out.append((f"{m_name}.{name}", b))
    for k, opt in enumerate(rig.optimizers):
        index = {id(p): j for j, p in enumerate(p for g in opt.param_groups for p in g["params"])}
        for g, group in enumerate(opt.param_groups):
            out.append((f"optimizer{k}.group{g}.lr", group["lr"]))
        for p, st in opt.state.items():
            for key in sorted(st):
                out.append((f"optimizer{k}.state[{index[id(p)]}].{key}", st[key]))
    out.extend(rig.kept.items())
    out.extend((f"log[{i}]", v) for i, v in enumerate(rig.log))
    return out


# --- models -----------------------------------------------------------------------------------

class _Residual(nn.Module):
    """h + relu(linear(h)): each block keeps its input and its activation for the backward pass."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, h):
        return h + F.relu(self.linear(h))


def _mlp(depth: int = DEPTH) -> nn.Sequential:
    """A residual MLP: a stem, `depth` residual blocks, a classifier head."""
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), *(_Residual() for _ in range(depth)), nn.Linear(HIDDEN, CLASSES))


def _data():
    return torch.randn(BATCH, FEATURES), torch.randint(0, CLASSES, (BATCH,))


def _classifier(optimizer: Callable[[list], torch.optim.Optimizer], after_backward=None) -> Callable[[], Rig]:
    """An MLP classifier trained with `optimizer`; `after_backward(model)` runs between the backward
    pass and the update (gradient clipping)."""

    def make() -> Rig:
        torch.manual_seed(0)
        model, (x, y) = _mlp(), _data()
        opt = optimizer(list(model.parameters()))

        def step():
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if after_backward is not None:
                after_backward(model)
            opt.step()

        return Rig(step, {"model": model}, [opt])

    return make


def _sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=False)


# --- idioms -----------------------------------------------------------------------------------

def _clipping() -> list[Idiom]:
    out = []
    for foreach, label in ((None, "default"), (True, "foreach=True"), (False, "foreach=False")):
        out.append(Idiom(f"clip_grad_norm_ ({label})", "clip_grad_norm_(max_norm=1.0) between backward and SGD",
                         _classifier(_sgd, lambda m, f=foreach: nn.utils.clip_grad_norm_(m.parameters(), 1.0,
                                                                                         foreach=f))))
        out.append(Idiom(f"clip_grad_value_ ({label})", "clip_grad_value_(0.01) between backward and SGD",
                         _classifier(_sgd, lambda m, f=foreach: nn.utils.clip_grad_value_(m.parameters(), 0.01,
                                                                                          foreach=f))))
    return out


_OPTIMIZERS = {
    "SGD": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=1e-4), True),
    "Adam": (torch.optim.Adam, dict(lr=1e-3), True),
    "AdamW": (torch.optim.AdamW, dict(lr=1e-3, weight_decay=0.01), True),
    "RMSprop": (torch.optim.RMSprop, dict(lr=1e-3, momentum=0.9), False),  # no fused kernel (torch 2.13)
    "Adagrad": (torch.optim.Adagrad, dict(lr=0.1), True),
}


def _optimizers() -> list[Idiom]:
    out = []
    for name, (cls, kwargs, fused) in _OPTIMIZERS.items():
        variants = [("foreach=True", dict(foreach=True)), ("foreach=False", dict(foreach=False))]
        if fused:
            variants.append(("fused=True", dict(fused=True)))
        for label, extra in variants:
            spelled = ", ".join(f"{k}={v}" for k, v in kwargs.items())
            out.append(Idiom(f"{name} ({label})", f"{name}({spelled}, {label})",
                             _classifier(lambda ps, c=cls, kw={**kwargs, **extra}: c(ps, **kw))))
    return out


def _scheduler() -> Rig:
    torch.manual_seed(0)
    model, (x, y) = _mlp(), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=100)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()

    return Rig(step, {"model": model}, [opt])


def _accumulation() -> Rig:
    torch.manual_seed(0)
    model, (x, y) = _mlp(), _data()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    micro = 2

    def step():
        opt.zero_grad()
        for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
            (F.cross_entropy(model(xs), ys) / micro).backward()
        opt.step()

    return Rig(step, {"model": model}, [opt])


def _frozen() -> Rig:
    torch.manual_seed(0)
    model, (x, y) = _mlp(), _data()
    model[0].requires_grad_(False)  # a frozen first layer: no gradient, no update
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1, momentum=0.9, foreach=False)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return Rig(step, {"model": model}, [opt])


class _Tagger(nn.Module):
    """A token embedding, residual blocks, and an output layer over the vocabulary (its weight the
    embedding's when tied)."""

    def __init__(self, tie: bool, freeze: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.embed.weight.requires_grad_(not freeze)
        self.blocks = nn.Sequential(*(_Residual() for _ in range(DEPTH)))
        self.out = nn.Linear(HIDDEN, VOCAB, bias=False)
        if tie:
            self.out.weight = self.embed.weight

    def forward(self, tokens):
        return self.out(self.blocks(self.embed(tokens)))


def _tagger(tie: bool, freeze: bool) -> Callable[[], Rig]:
    def make() -> Rig:
        torch.manual_seed(0)
        model = _Tagger(tie, freeze)
        tokens = torch.randint(0, VOCAB, (BATCH,))
        target = torch.randint(0, VOCAB, (BATCH,))
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3, foreach=False)

        def step():
            opt.zero_grad()
            F.cross_entropy(model(tokens), target).backward()
            opt.step()

        return Rig(step, {"model": model}, [opt])

    return make


def _ema() -> Rig:
    torch.manual_seed(0)
    model, (x, y) = _mlp(), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
    ema = {f"ema.{n}": p.detach().clone() for n, p in model.named_parameters()}

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        with torch.no_grad():
            for e, p in zip(ema.values(), model.parameters()):
                e.mul_(0.99).add_(p, alpha=0.01)

    return Rig(step, {"model": model}, [opt], kept=ema)


def _zero_grad_keep() -> Rig:
    torch.manual_seed(0)
    model, (x, y) = _mlp(), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)

    def step():
        opt.zero_grad(set_to_none=False)  # the gradients of the step before are zeroed in place
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return Rig(step, {"model": model}, [opt])


def _autocast() -> Rig:
    torch.manual_seed(0)
    model, (x, y) = _mlp(), _data()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    return Rig(step, {"model": model}, [opt])


class _ScaledTanh(torch.autograd.Function):
    """tanh(a x) with its own backward, from the saved output."""

    @staticmethod
    def forward(ctx, x, a: float):
        y = torch.tanh(a * x)
        ctx.save_for_backward(y)
        ctx.a = a
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * ctx.a * (1 - y * y), None


class _CustomNet(nn.Module):
    """Residual blocks whose activation is the custom function."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.head = nn.Linear(FEATURES, HIDDEN), nn.Linear(HIDDEN, CLASSES)
        self.blocks = nn.ModuleList(nn.Linear(HIDDEN, HIDDEN, bias=False) for _ in range(DEPTH))

    def forward(self, x):
        h = self.stem(x)
        for linear in self.blocks:
            h = h + _ScaledTanh.apply(linear(h), 0.5)
        return self.head(h)


def _custom_function() -> Rig:
    torch.manual_seed(0)
    model, (x, y) = _CustomNet(), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return Rig(step, {"model": model}, [opt])


class _Checkpointed(nn.Module):
    """Residual blocks, every other one recomputed in the backward pass (torch.utils.checkpoint)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(FEATURES, HIDDEN)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(HIDDEN, HIDDEN, bias=False), nn.GELU())
                                    for _ in range(DEPTH))
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        h = self.stem(x)
        for k, block in enumerate(self.blocks):
            h = h + (checkpoint(block, h, use_reentrant=False) if k % 2 == 0 else block(h))
        return self.head(h)


def _checkpointed() -> Rig:
    torch.manual_seed(0)
    model, (x, y) = _Checkpointed(), _data()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return Rig(step, {"model": model}, [opt])


class _Noisy(nn.Module):
    """Random operators in the forward pass: dropout in every block, Gaussian noise, a random row mask."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.head = nn.Linear(FEATURES, HIDDEN), nn.Linear(HIDDEN, CLASSES)
        self.blocks = nn.ModuleList(nn.Linear(HIDDEN, HIDDEN, bias=False) for _ in range(DEPTH))

    def forward(self, x):
        h = self.stem(x)
        h = h + 0.1 * torch.randn_like(h)
        for linear in self.blocks:
            h = h + F.dropout(F.relu(linear(h)), 0.3, training=True)
        keep = (torch.rand(h.shape[0], 1) > 0.2).to(h.dtype)
        return self.head(h * keep)


def _random_ops() -> Rig:
    torch.manual_seed(0)
    model, (x, y) = _Noisy(), _data()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return Rig(step, {"model": model}, [opt])


class _TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(FEATURES, HIDDEN), *(_Residual() for _ in range(DEPTH)))
        self.cls, self.reg = nn.Linear(HIDDEN, CLASSES), nn.Linear(HIDDEN, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.cls(h), self.reg(h)


def _several_heads() -> Rig:
    torch.manual_seed(0)
    model, (x, y) = _TwoHeads(), _data()
    target = torch.randn(BATCH, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)

    def step():
        opt.zero_grad()
        logits, value = model(x)
        (F.cross_entropy(logits, y) + 0.5 * F.mse_loss(value, target)).backward()
        opt.step()

    return Rig(step, {"model": model}, [opt])


def _logging() -> Rig:
    torch.manual_seed(0)
    model, (x, y) = _mlp(), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
    rig = Rig(lambda: None, {"model": model}, [opt])

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        rig.log.append(loss.item())  # read after the backward pass, as a training loop logs it
        rig.log.append(model[0].weight.grad.norm().item())
        opt.step()

    rig.step = step
    return rig


def _batch_norm() -> Rig:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.BatchNorm1d(HIDDEN), nn.ReLU(),
                          *(_Residual() for _ in range(DEPTH)), nn.Linear(HIDDEN, CLASSES))
    x, y = _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4, foreach=False)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return Rig(step, {"model": model}, [opt])


def _optimizer_peak() -> Rig:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDE, WIDE), nn.Tanh(), nn.Linear(WIDE, CLASSES))
    x, y = torch.randn(8, WIDE), torch.randint(0, CLASSES, (8,))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return Rig(step, {"model": model}, [opt])


IDIOMS: tuple[Idiom, ...] = (
    *_clipping(),
    *_optimizers(),
    Idiom("LR scheduler in the step", "OneCycleLR stepped after SGD, inside the step", _scheduler),
    Idiom("gradient accumulation", "two micro-batches, each loss / 2 backward, then Adam", _accumulation),
    Idiom("frozen parameters", "first layer requires_grad_(False), SGD over the rest", _frozen),
    Idiom("frozen embedding", "an nn.Embedding whose weight does not need gradients, AdamW", _tagger(False, True)),
    Idiom("weight tying", "the output layer's weight is the embedding's, AdamW", _tagger(True, False)),
    Idiom("EMA under no_grad", "an exponential moving average of the weights after SGD, under torch.no_grad()",
          _ema),
    Idiom("zero_grad(set_to_none=False)", "the step before's gradients zeroed in place, SGD", _zero_grad_keep),
    Idiom("autocast bfloat16", 'forward and loss under torch.autocast("cpu", dtype=torch.bfloat16), AdamW',
          _autocast),
    Idiom("custom autograd.Function", "a torch.autograd.Function with its own backward, SGD", _custom_function),
    Idiom("checkpoint in the model", "blocks under torch.utils.checkpoint(use_reentrant=False), Adam", _checkpointed),
    Idiom("dropout and random operators", "dropout, randn_like noise, a torch.rand row mask, AdamW", _random_ops),
    Idiom("loss from several heads", "cross-entropy of one head + 0.5 x MSE of another, Adam", _several_heads),
    Idiom(".item() after backward", "the loss and a gradient norm read with .item() for logging, SGD", _logging),
    Idiom("batch norm", "BatchNorm1d (running statistics written in the step), SGD with momentum", _batch_norm),
    Idiom("peak inside optimizer.step", "wide and shallow, Adam: its state outweighs the activations, so a "
          "tight budget runs out inside optimizer.step()", _optimizer_peak),
)

BY_NAME = {i.name: i for i in IDIOMS}
assert len(BY_NAME) == len(IDIOMS), "two idioms share a name"
