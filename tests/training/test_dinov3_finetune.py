"""Fine-tuning a DINOv3-shaped scratch model as timm's train.py does, with ``--layer-decay`` and
``--grad-checkpointing``; its layer-decay groups against timm's own DINOv3 (``Eva``).

timm's train.py is not in the pip package nor in its sdist, so, as tests/training/test_naflex_training.py does,
the test makes the calls train.py makes (timm 1.0.x) for

    train.py --data-dir ROOT --device cpu --model scratch_dinov3_s16 \
        --model-kwargs depth=2 embed_dim=64 num_heads=4 img_size=32 --img-size 32 --num-classes 2 \
        --layer-decay 0.75 --grad-checkpointing --opt adamw --lr 2e-3 --weight-decay 0.05 \
        --epochs 4 --warmup-epochs 0 -b 8

``create_model`` with the keywords train.py passes, ``set_grad_checkpointing``, ``create_optimizer_v2`` with
``optimizer_kwargs(cfg=args)`` (which carries ``layer_decay``), ``create_scheduler_v2`` stepped per update and
per epoch, and the ``ClassificationTask`` with label smoothing, over timm's dataset and loader.
"""

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from timm.data import create_dataset, create_loader, resolve_data_config
from timm.models import group_parameters
from timm.optim import create_optimizer_v2, optimizer_kwargs
from timm.scheduler import create_scheduler_v2
from timm.task import ClassificationTask
from torch import nn

import timm_vitscratch  # noqa: F401  (registers the zoo)

pytestmark = pytest.mark.slow  # timm's train.py and validate.py, torchrun DDP, the digits example

#: --model-kwargs: DINOv3-S's layout (registers, rope, layer scale, Eva names) at a width and depth that train in seconds
MODEL_KWARGS = dict(depth=2, embed_dim=64, num_heads=4, img_size=32)
#: train.py's arguments the optimizer and scheduler read
ARGS = argparse.Namespace(opt="adamw", lr=2e-3, weight_decay=0.05, momentum=0.9, layer_decay=0.75, epochs=4)


@pytest.fixture(scope="module")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """root/train/{dark,light}/*.png: 32x32 images whose class sets the brightness."""
    root = tmp_path_factory.mktemp("dinov3_images")
    rng = np.random.default_rng(0)
    for label, name in enumerate(("dark", "light")):
        folder = root / "train" / name
        folder.mkdir(parents=True)
        for index in range(16):
            pixels = rng.normal(60 + 130 * label, 30, (32, 32, 3)).clip(0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / f"{index}.png")
    return root


def _train_py_model(name: str = "scratch_dinov3_s16", **kwargs: Any) -> nn.Module:
    """The create_model call of train.py (no --pretrained, --num-classes 2, --model-kwargs MODEL_KWARGS)."""
    return timm.create_model(
        name,
        pretrained=False,
        in_chans=3,
        num_classes=2,
        drop_rate=0.0,
        drop_path_rate=None,
        drop_block_rate=None,
        global_pool=None,
        bn_momentum=None,
        bn_eps=None,
        scriptable=False,
        checkpoint_path=None,
        **{**MODEL_KWARGS, **kwargs},
    )


def test_train_py_fine_tunes_dinov3_with_layer_decay_and_grad_checkpointing(image_root: Path) -> None:
    torch.manual_seed(0)
    model = _train_py_model()
    model.set_grad_checkpointing(enable=True)  # --grad-checkpointing
    data_config = resolve_data_config({"img_size": 32}, model=model)  # --img-size 32
    dataset = create_dataset("", root=str(image_root), split="train", is_training=True, batch_size=8)
    loader = create_loader(
        dataset,
        input_size=data_config["input_size"],
        batch_size=8,
        is_training=True,
        interpolation=data_config["interpolation"],
        mean=data_config["mean"],
        std=data_config["std"],
        num_workers=0,
        use_prefetcher=False,
    )
    task = ClassificationTask(model, criterion_kwargs=dict(smoothing=0.1), verbose=False)
    optimizer = create_optimizer_v2(model, **optimizer_kwargs(cfg=ARGS))
    scheduler, epochs = create_scheduler_v2(
        optimizer, sched="cosine", num_epochs=ARGS.epochs, warmup_epochs=0, updates_per_epoch=len(loader)
    )
    # --layer-decay 0.75 over depth 2: stem 0.75³, block 0 0.75², block 1 and the final norm 0.75, head 1
    assert sorted({group["lr_scale"] for group in optimizer.param_groups}) == pytest.approx(
        [0.75**3, 0.75**2, 0.75, 1.0]
    )
    # checkpointing starts each block twice per update: in the forward and again in the backward (a pre-hook: the
    # recomputation stops once it has the tensors backward needs, before the block's forward hooks)
    calls = []
    model.blocks[0].register_forward_pre_hook(lambda *_: calls.append(1))

    epoch_losses, updates = [], 0
    for epoch in range(epochs):
        task.train()
        losses = []
        for images, labels in loader:
            loss = task(images, labels)["loss"]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            updates += 1
            scheduler.step_update(num_updates=updates)
            losses.append(loss.item())
        scheduler.step(epoch + 1)
        epoch_losses.append(sum(losses) / len(losses))

    assert (epochs, updates) == (4, 16)
    assert len(calls) == 2 * updates
    assert all(np.isfinite(epoch_losses))
    assert epoch_losses[-1] < 0.8 * epoch_losses[0], epoch_losses


def test_grad_checkpointing_gives_the_gradients_of_the_plain_backward() -> None:
    torch.manual_seed(0)
    plain = _train_py_model().train()
    checkpointed = _train_py_model().train()
    checkpointed.load_state_dict(plain.state_dict())
    checkpointed.set_grad_checkpointing(enable=True)
    images, labels = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 0, 1])
    for model in (plain, checkpointed):
        nn.functional.cross_entropy(model(images), labels).backward()
    for (name, a), (_, b) in zip(plain.named_parameters(), checkpointed.named_parameters(), strict=True):
        assert a.grad is not None and b.grad is not None, name
        assert torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-7), name


def _groups(model: nn.Module) -> dict[str, tuple[float, float]]:
    """Parameter name -> (lr_scale, weight_decay) of timm's optimizer factory with --layer-decay 0.75."""
    optimizer = create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05, layer_decay=0.75)
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: (g["lr_scale"], g["weight_decay"]) for g in optimizer.param_groups for p in g["params"]}


@pytest.mark.parametrize(
    "ours,reference",
    [
        ("scratch_dinov3_s16", "vit_small_patch16_dinov3"),
        ("scratch_dinov3_s16_plus_qkvb", "vit_small_plus_patch16_dinov3_qkvb"),
    ],
)
def test_layer_decay_and_weight_decay_groups_match_timm_dinov3(ours: str, reference: str) -> None:
    kwargs = dict(img_size=32, patch_size=8, embed_dim=64, depth=3, num_heads=4, num_classes=5)
    model, theirs = timm.create_model(ours, **kwargs), timm.create_model(reference, **kwargs)
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    groups = _groups(model)
    assert groups == _groups(theirs)  # same lr scale and weight decay for every parameter name
    for coarse in (False, True):  # group_matcher: the same layer for every parameter name
        assert group_parameters(model, model.group_matcher(coarse)) == group_parameters(
            theirs, theirs.group_matcher(coarse)
        )
    names = set(groups)
    assert model.no_weight_decay() & names == theirs.no_weight_decay() & names == {"cls_token", "reg_token"}
    # registers and patch embedding in the stem; layer scale, q/v bias and norms without weight decay
    assert groups["reg_token"] == (pytest.approx(0.75**4), 0.0)
    assert groups["patch_embed.proj.weight"] == (pytest.approx(0.75**4), 0.05)
    assert groups["blocks.0.gamma_1"] == (pytest.approx(0.75**3), 0.0)
    assert groups["blocks.2.mlp.fc2.weight"] == (pytest.approx(0.75), 0.05)
    assert groups["head.weight"] == (1.0, 0.05)
    if ours.endswith("_qkvb"):
        assert groups["blocks.1.attn.q_bias"] == (pytest.approx(0.75**2), 0.0)
