"""Small models of the public traces' families, each as a factory of one training step.

Owns the models, their default sizes and the words that describe a model at given sizes; a factory
(batch, ..., device) returns a zero-argument step.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

Step = Callable[[], None]


def _step(model: nn.Module, inputs: tuple[torch.Tensor, ...], loss: Callable[..., torch.Tensor]) -> Step:
    """Forward, loss, backward; gradients start from None so each step allocates them afresh."""
    model.train()

    def step() -> None:
        model.zero_grad(set_to_none=True)
        loss(model(*inputs[:-1]), inputs[-1]).backward()

    step.model = model  # what a caller that also updates the parameters needs (the live tests)
    return step


# --- ResNet-32 (CIFAR style: 3 stages of 5 basic blocks) -------------------------------------


class _Block(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNetCifar(nn.Module):
    def __init__(self, depth: int = 32, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        blocks = (depth - 2) // 6
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers, c = [], width
        for stage in range(3):
            c_out = width * 2**stage
            for b in range(blocks):
                layers.append(_Block(c, c_out, 2 if stage > 0 and b == 0 else 1))
                c = c_out
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.layers(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


def resnet32(batch: int = 8, image: int = 32, depth: int = 32, width: int = 16, device: str = "cpu") -> Step:
    model = ResNetCifar(depth, width).to(device)
    x = torch.randn(batch, 3, image, image, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    return _step(model, (x, y), F.cross_entropy)


# --- the DTR paper's LSTM ------------------------------------------------------------------


class LSTMModel(nn.Module):
    """An LSTM written cell by cell, as the DTR prototype's, so every gate is an operator."""

    def __init__(self, input_size: int, hidden: int) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(input_size, hidden)
        self.hidden = hidden

    def forward(self, xs: torch.Tensor) -> torch.Tensor:
        h = c = xs.new_zeros(xs.shape[1], self.hidden)
        outs = []
        for x in xs:  # (seq, batch, input)
            h, c = self.cell(x, (h, c))
            outs.append(h)
        return torch.stack(outs)


def lstm(batch: int = 8, input_size: int = 512, hidden: int = 1700, seq: int = 128,
         device: str = "cpu") -> Step:
    model = LSTMModel(input_size, hidden).to(device)
    x = torch.randn(seq, batch, input_size, device=device)
    target = torch.randn(seq, batch, hidden, device=device)
    return _step(model, (x, target), F.mse_loss)


# --- Transformer encoder -------------------------------------------------------------------


class Encoder(nn.Module):
    def __init__(self, vocab: int, d_model: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.encoder(self.embed(tokens))).flatten(0, 1)


def transformer(batch: int = 8, seq: int = 64, d_model: int = 128, heads: int = 4, layers: int = 4,
                vocab: int = 1000, device: str = "cpu") -> Step:
    model = Encoder(vocab, d_model, heads, layers).to(device)
    tokens = torch.randint(0, vocab, (batch, seq), device=device)
    target = torch.randint(0, vocab, (batch * seq,), device=device)
    return _step(model, (tokens, target), F.cross_entropy)


# --- U-Net ---------------------------------------------------------------------------------


def _double_conv(c_in: int, c_out: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(),
                         nn.Conv2d(c_out, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU())


class UNet(nn.Module):
    def __init__(self, channels: int = 3, classes: int = 2, width: int = 16, depth: int = 4) -> None:
        super().__init__()
        widths = [width * 2**i for i in range(depth + 1)]
        self.down = nn.ModuleList([_double_conv(channels, widths[0])] +
                                  [_double_conv(widths[i], widths[i + 1]) for i in range(depth)])
        self.up = nn.ModuleList([nn.ConvTranspose2d(widths[i + 1], widths[i], 2, stride=2)
                                 for i in reversed(range(depth))])
        self.merge = nn.ModuleList([_double_conv(2 * widths[i], widths[i]) for i in reversed(range(depth))])
        self.head = nn.Conv2d(widths[0], classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        skips.pop()
        for up, merge in zip(self.up, self.merge):
            x = merge(torch.cat([skips.pop(), up(x)], dim=1))
        return self.head(x)


def unet(batch: int = 2, image: int = 64, width: int = 16, depth: int = 4, device: str = "cpu") -> Step:
    model = UNet(3, 2, width, depth).to(device)
    x = torch.randn(batch, 3, image, image, device=device)
    y = torch.randint(0, 2, (batch, image, image), device=device)
    return _step(model, (x, y), F.cross_entropy)


# --- DenseNet ------------------------------------------------------------------------------


class _DenseLayer(nn.Module):
    def __init__(self, c_in: int, growth: int) -> None:
        super().__init__()
        self.bn1, self.conv1 = nn.BatchNorm2d(c_in), nn.Conv2d(c_in, 4 * growth, 1, bias=False)
        self.bn2, self.conv2 = nn.BatchNorm2d(4 * growth), nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        x = self.conv1(F.relu(self.bn1(torch.cat(features, 1))))
        return self.conv2(F.relu(self.bn2(x)))


class DenseNet(nn.Module):
    """DenseNet-BC: dense blocks whose layers each read the concatenation of all before them."""

    def __init__(self, blocks: tuple[int, ...] = (6, 12, 24, 16), growth: int = 32, classes: int = 10) -> None:
        super().__init__()
        c = 2 * growth
        self.stem = nn.Conv2d(3, c, 3, padding=1, bias=False)
        self.blocks, self.transitions = nn.ModuleList(), nn.ModuleList()
        for i, n in enumerate(blocks):
            self.blocks.append(nn.ModuleList([_DenseLayer(c + k * growth, growth) for k in range(n)]))
            c += n * growth
            if i < len(blocks) - 1:
                self.transitions.append(nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(),
                                                      nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2)))
                c //= 2
        self.norm = nn.BatchNorm2d(c)
        self.fc = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for i, block in enumerate(self.blocks):
            features = [x]
            for layer in block:
                features.append(layer(features))
            x = torch.cat(features, 1)
            if i < len(self.transitions):
                x = self.transitions[i](x)
        x = F.relu(self.norm(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def densenet(batch: int = 4, image: int = 32, growth: int = 12, blocks: tuple[int, ...] = (6, 12, 24, 16),
             device: str = "cpu") -> Step:
    model = DenseNet(tuple(blocks), growth).to(device)
    x = torch.randn(batch, 3, image, image, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    return _step(model, (x, y), F.cross_entropy)


# --- the registry --------------------------------------------------------------------------


@dataclass(frozen=True)
class ZooModel:
    """A model of the zoo: its step factory, default batch, the sizes a test uses, and its words.

    describe: the factory's keyword arguments (every one, device aside) -> one line saying what
    the model is at those sizes; description() fills in the factory's defaults, so the words come
    from the sizes a capture really used."""

    name: str
    make: Callable[..., Step]
    batch: int
    tiny: dict  # keyword arguments (batch included) that capture in well under a second
    describe: Callable[..., str]
    roomy: dict = field(default_factory=dict)  # changes to `tiny` so activations, not constants, fill the peak

    @property
    def small(self) -> dict:
        """Tiny sizes with room to evict: at `tiny` the constants and the trace's in-place copies fill
        most of the peak (the LSTM, ResNet-32 and Transformer cannot meet 0.9 of theirs); these run
        in about a second under a budget too (the live tests and the report's live section)."""
        return {**self.tiny, **self.roomy}

    def sizes(self, **given) -> dict:
        """Every size keyword of the factory: the defaults, overridden by `given`."""
        defaults = {k: p.default for k, p in inspect.signature(self.make).parameters.items() if k != "device"}
        return {**defaults, "batch": self.batch, **given}

    def description(self, **given) -> str:
        return self.describe(**self.sizes(**given))


def _resnet_words(batch, image, depth, width) -> str:
    return (f"CIFAR ResNet-{depth} (3 stages of {(depth - 2) // 6} basic blocks, width {width}), "
            f"{image}x{image} images, batch {batch}")


def _lstm_words(batch, input_size, hidden, seq) -> str:
    return f"the DTR paper's LSTM, cell by cell: input {input_size}, hidden {hidden}, {seq} steps, batch {batch}"


def _transformer_words(batch, seq, d_model, heads, layers, vocab) -> str:
    return (f"Transformer encoder: {layers} layers, d_model {d_model}, {heads} heads, {seq} tokens, "
            f"vocabulary {vocab}, batch {batch}")


def _unet_words(batch, image, width, depth) -> str:
    return f"U-Net: {depth} levels, width {width}, {image}x{image} images, batch {batch}"


def _densenet_words(batch, image, growth, blocks) -> str:
    layers = 2 * sum(blocks) + 5  # two convolutions a dense layer, the stem, three transitions, the classifier
    return (f"DenseNet-BC-{layers}, blocks {tuple(blocks)}, growth {growth}, {image}x{image} images, "
            f"batch {batch}")


ZOO: dict[str, ZooModel] = {m.name: m for m in (
    ZooModel("resnet32", resnet32, 8, dict(batch=2, image=8, depth=8, width=4), _resnet_words, dict(batch=8)),
    ZooModel("lstm", lstm, 8, dict(batch=2, input_size=8, hidden=16, seq=4), _lstm_words, dict(seq=16)),
    ZooModel("transformer", transformer, 8, dict(batch=2, seq=8, d_model=16, heads=2, layers=1, vocab=32),
             _transformer_words, dict(batch=8)),
    ZooModel("unet", unet, 2, dict(batch=1, image=16, width=4, depth=2), _unet_words, dict(batch=4)),
    ZooModel("densenet", densenet, 4, dict(batch=2, image=8, growth=4, blocks=(2, 2)), _densenet_words),
)}
