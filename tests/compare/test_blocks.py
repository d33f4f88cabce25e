"""find_blocks against the zoo's structure as written in capture/zoo.py, and checkpointed blocks
against plain PyTorch: what they recompute, counted in the operators a step runs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dtrlab.capture.recorder import record  # noqa: E402
from dtrlab.capture.zoo import ZOO, DenseNet, ResNetCifar, _Block, _DenseLayer  # noqa: E402
from dtrlab.compare.blocks import checkpointed, find_blocks  # noqa: E402


def test_blocks_are_the_zoo_models_repeated_submodules():
    resnet = ResNetCifar(depth=32)
    assert find_blocks(resnet) == list(resnet.layers)  # 3 stages of 5 basic blocks, the stem not one
    assert len(find_blocks(resnet)) == 15 and all(isinstance(b, _Block) for b in find_blocks(resnet))
    encoder = ZOO["transformer"].make(layers=4).model
    assert find_blocks(encoder) == list(encoder.encoder.layers)
    assert find_blocks(ZOO["transformer"].make(layers=1).model) == []  # one layer is not repeated
    unet = ZOO["unet"].make().model
    assert find_blocks(unet) == list(unet.down) + list(unet.merge)  # the double convolutions; no ConvTranspose
    dense = DenseNet((2, 3, 2), growth=4)
    blocks = find_blocks(dense)
    assert [type(b) for b in blocks].count(_DenseLayer) == 7
    assert [b for b in blocks if not isinstance(b, _DenseLayer)] == list(dense.transitions)
    assert find_blocks(ZOO["lstm"].make(**ZOO["lstm"].tiny).model) == []  # one cell, run per time step


def _ops(step) -> list[str]:
    return list(record(step).op_names)


def test_checkpointing_recomputes_each_blocks_forward_and_selective_keeps_the_convolutions():
    step = ZOO["resnet32"].make(**ZOO["resnet32"].small)  # 3 blocks, 8 convolutions in them of 9
    blocks = find_blocks(step.model)
    plain = _ops(step)
    with checkpointed(blocks):
        full = _ops(step)
    with checkpointed(blocks, selective=True):
        selective = _ops(step)
    conv = "aten.convolution.default"
    in_blocks = sum(isinstance(m, torch.nn.Conv2d) for b in blocks for m in b.modules())
    assert in_blocks == 8
    assert full.count(conv) == plain.count(conv) + in_blocks  # every block's forward run again
    assert selective.count(conv) == plain.count(conv)  # saved, not run again
    bn = "aten.native_batch_norm.default"  # not in the policy: recomputed under both
    assert full.count(bn) == selective.count(bn) > plain.count(bn)
    assert all("forward" not in b.__dict__ for b in blocks)  # put back
