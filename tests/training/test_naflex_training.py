"""Native-resolution training with timm's NaFlex data pipeline: its loader, train.py's and validate.py's
``--naflex-loader`` sequences, and DDP under torchrun.

timm's train.py and validate.py are not in the pip package (nor in its sdist), so, as the other script
tests here do, the test makes the calls each script makes with ``--naflex-loader``, with the arguments it
passes (timm 1.0.x): ``model.get_patch_size()`` for the loader, ``create_naflex_loader`` with sequence-length
buckets (variable batch size), the task's loss scaled by ``batch / --batch-size`` (``--naflex-loss-scale
linear``), and for evaluation one fixed ``--naflex-max-seq-len``. docs/native_resolution.md shows the
commands themselves.
"""

import json
import os
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import timm
import torch
from PIL import Image
from timm.data import create_dataset, create_naflex_loader, resolve_data_config
from timm.optim import create_optimizer_v2
from timm.task import ClassificationTask
from timm.utils import CheckpointSaver, accuracy

import timm_vitscratch  # noqa: F401  (registers the zoo)
from tests.support import time_limits
from tests.support.naflex_batches import timm_naflexvit

pytestmark = pytest.mark.slow  # timm's train.py and validate.py, torchrun DDP, the digits example

REPO = Path(__file__).resolve().parents[2]
#: train.py --model scratch_vit_ti16 --model-kwargs ... : patch 16 (validate.py's default for models without
#: NaFlexVit's ``embeds``), a 4x4 position table resampled to every image's grid
MODEL_ARGS = dict(embed_dim=64, depth=2, num_heads=4, img_size=64)
SIZES = ((64, 64), (32, 96), (96, 48), (16, 128), (80, 80), (48, 32))


@pytest.fixture(scope="module")
def image_root(tmp_path_factory):
    """root/{train,validation}/{dark,light}/*.png: mixed sizes and aspect ratios, the class sets the brightness."""
    root = tmp_path_factory.mktemp("naflex_images")
    rng = np.random.default_rng(0)
    for split, count in (("train", 12), ("validation", 6)):
        for label, name in enumerate(("dark", "light")):
            folder = root / split / name
            folder.mkdir(parents=True)
            for index in range(count):
                height, width = SIZES[index % len(SIZES)]
                pixels = rng.normal(60 + 130 * label, 30, (height, width, 3)).clip(0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{index}.png")
    return root


def _model(**kwargs):
    # the keywords train.py passes to create_model
    return timm.create_model(
        "scratch_vit_ti16",
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
        checkpoint_path=kwargs.pop("checkpoint_path", None),
        **MODEL_ARGS,
        **kwargs,
    )


def _train_loader(root, model, seq_lens=(16, 32, 64), batch_size=4, **kwargs):
    config = resolve_data_config({}, model=model)
    dataset = create_dataset("", root=str(root), split="train", is_training=True, batch_size=batch_size)
    return create_naflex_loader(
        dataset,
        train_seq_lens=seq_lens,
        mixup_fn=None,
        rank=0,
        world_size=1,
        patchify_channels_last=True,
        mean=config["mean"],
        std=config["std"],
        pin_memory=False,
        img_dtype=torch.float32,
        device=torch.device("cpu"),
        distributed=False,
        use_prefetcher=True,
        batch_size=batch_size,
        is_training=True,
        num_workers=0,
        interpolation=config["interpolation"],
        **kwargs,
    )


def _eval_loader(root, model, patch_size, max_seq_len=64):
    config = resolve_data_config({}, model=model)
    dataset = create_dataset("", root=str(root), split="validation", is_training=False, batch_size=4)
    return create_naflex_loader(
        dataset,
        patch_size=patch_size,
        max_seq_len=max_seq_len,
        batch_size=4,
        is_training=False,
        mean=config["mean"],
        std=config["std"],
        pin_memory=False,
        img_dtype=torch.float32,
        device=torch.device("cpu"),
        distributed=False,
        use_prefetcher=True,
        num_workers=0,
        interpolation=config["interpolation"],
        crop_pct=config["crop_pct"],
    )


def test_create_naflex_loader_batches_run_packed_like_timms_naflexvit(image_root):
    model = _model().eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    reference = timm_naflexvit(model, num_classes=2, patch_size=16, **MODEL_ARGS)
    shapes = set()
    with torch.no_grad():
        for loader in (_train_loader(image_root, model), _eval_loader(image_root, model, model.get_patch_size())):
            for batch, target in loader:
                assert set(batch) >= {"patches", "patch_coord", "patch_valid"}
                shapes.add(tuple(batch["patches"].shape[:2]))
                logits = model(batch)
                assert logits.shape == (len(target), 2)
                assert (logits - reference(batch)).abs().max() <= 1e-5
    # sequence-length buckets with variable batch size (train), one fixed length (eval)
    assert len(shapes) >= 3 and any(seq == 64 for _, seq in shapes), shapes


def test_train_py_and_validate_py_naflex_sequences(image_root, tmp_path):
    """train.py --naflex-loader --naflex-train-seq-lens 16 32 64 -b 4 --epochs 4 --opt adamw --lr 2e-3, then
    validate.py --naflex-loader --checkpoint model_best.pth.tar on the validation split."""
    torch.manual_seed(0)
    random.seed(0)  # timm's augmentations draw from Python's generator
    model = _model()
    patch_size = model.get_patch_size()  # what train.py reads for the loader
    task = ClassificationTask(model, verbose=False)
    optimizer = create_optimizer_v2(model, "adamw", lr=2e-3, weight_decay=0.05)
    loader = _train_loader(image_root, model, patch_size=patch_size)
    eval_loader = _eval_loader(image_root, model, patch_size)
    batch_size_reference = 4.0
    epoch_losses, top1 = [], []
    for _ in range(4):
        task.train()
        seen, total = 0, 0.0
        for batch, target in loader:
            local = batch["patches"].shape[0]
            loss = task(batch, target)["loss"]
            (loss * (local / batch_size_reference)).backward()  # --naflex-loss-scale linear
            optimizer.step()
            optimizer.zero_grad()
            total, seen = total + loss.item() * local, seen + local
        epoch_losses.append(total / seen)
        model.eval()
        correct = count = 0
        with torch.inference_mode():  # train.py's validate(): top-1 over the eval loader
            for batch, target in eval_loader:
                output = model(batch)
                correct += accuracy(output, target, topk=(1,))[0].item() * len(target) / 100
                count += len(target)
        top1.append(100.0 * correct / count)
    print(f"train loss per epoch {[f'{x:.3f}' for x in epoch_losses]}, validation top-1 {top1}")
    assert epoch_losses[-1] < epoch_losses[0]
    assert top1[-1] == 100.0
    saver = CheckpointSaver(
        model=model,
        optimizer=optimizer,
        args=None,
        checkpoint_dir=str(tmp_path),
        recovery_dir=str(tmp_path),
        task=task,
        max_history=1,
    )
    saver.save_checkpoint(epoch=3, metric=top1[-1])

    # validate.py: the model from --checkpoint; its NaFlex loader takes NaFlexVit's embeds.patch_size, else 16
    evaluated = _model(checkpoint_path=str(tmp_path / "model_best.pth.tar")).eval()
    validate_patch = getattr(getattr(evaluated, "embeds", None), "patch_size", None) or (16, 16)
    assert validate_patch == evaluated.get_patch_size() == (16, 16)
    correct = count = 0
    with torch.inference_mode():
        for batch, target in _eval_loader(image_root, evaluated, validate_patch):
            correct += (evaluated(batch).argmax(dim=1) == target).sum().item()
            count += len(target)
    assert count == 12 and correct == 12


def test_torchrun_two_ranks_match_one_process_on_naflex_batches(tmp_path):
    """DDP (gloo, CPU) over the packed path, ranks holding unequal shares of each global batch."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    if os.path.isdir("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    module = ["-m", "tests.support.naflex_ddp_worker"]
    for command in (
        [sys.executable, *module, str(tmp_path / "one")],
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            *module,
            str(tmp_path / "two"),
        ],
    ):
        result = time_limits.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, quiet_seconds=120)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    one = safetensors.torch.load_file(tmp_path / "one" / "params_rank0.safetensors")
    ranks = [safetensors.torch.load_file(tmp_path / "two" / f"params_rank{r}.safetensors") for r in (0, 1)]
    for name, value in one.items():
        assert torch.equal(ranks[0][name], ranks[1][name]), name
        assert torch.allclose(ranks[0][name], value, rtol=1e-5, atol=1e-6), name
    losses = [json.loads((tmp_path / run / "result.json").read_text())["losses"] for run in ("one", "two")]
    assert torch.allclose(torch.tensor(losses[0]), torch.tensor(losses[1]), rtol=1e-5)
    initial = timm.create_model(
        "scratch_vit_ti16", num_classes=4, img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4
    )
    assert not torch.allclose(initial.state_dict()["head.weight"], one["head.weight"])


def test_variable_patch_size_loader_batches(image_root):
    """train.py --naflex-patch-sizes 8 16 32: the loader samples a patch size per batch, (B, N, Ph, Pw, C)."""
    model = _model().eval()
    loader = _train_loader(image_root, model, patch_size_choices=[8, 16, 32], seq_lens=(16, 32))
    sizes = set()
    with torch.no_grad():
        for batch, target in loader:
            sizes.add(tuple(batch["patches"].shape[2:4]))
            assert model(batch).shape == (len(target), 2)
    assert len(sizes) >= 2, sizes
