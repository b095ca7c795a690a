"""Fine-tuning with timm's own training components: task, optimizer, scheduler, checkpoints."""

import argparse

import pytest
import safetensors.torch
import timm
import torch
from timm.models import load_checkpoint
from timm.task import ClassificationTask, TokenDistillationTask, resume_task_checkpoint
from timm.utils import CheckpointSaver

from examples.training_loop import create_train_state, evaluate_top1, train, train_step
from tests.support import TINY, tiny
from timm_vitscratch.model_dir import save_model_directory

pytestmark = pytest.mark.slow  # timm's train.py and validate.py, torchrun DDP, the digits example


def _separable_batch(num_classes: int = 4, size: int = 32, batch: int = 32):
    """Images whose class sets the mean brightness of one colour channel: easy to learn."""
    generator = torch.Generator().manual_seed(1)
    labels = torch.arange(batch) % num_classes
    images = torch.randn(batch, 3, size, size, generator=generator) * 0.5
    images[torch.arange(batch), labels % 3] += 1.0 + (labels // 3).float()[:, None, None]
    return images, labels


def _task(name: str, model):
    if name == "scratch_deit_ti16_distilled":
        # hard distillation through timm's token task, teacher = another (untrained) scratch ViT
        teacher = tiny("scratch_vit_ti16", num_classes=model.num_classes).eval()
        return TokenDistillationTask(model, teacher, distill_type="hard", verbose=False)
    return ClassificationTask(model, criterion_kwargs=dict(smoothing=0.1), verbose=False)


@pytest.mark.parametrize("name", ["scratch_vit_ti16", "scratch_vit_b16_in21k", "scratch_deit_ti16_distilled"])
def test_timm_optimizer_scheduler_and_task_lower_the_loss(name):
    extra = dict(representation_size=48) if name.endswith("_in21k") else {}
    model = tiny(name, num_classes=4, **extra)
    task = _task(name, model)
    images, labels = _separable_batch()
    state = create_train_state(model, total_updates=20, lr=3e-3, warmup_updates=2)
    assert type(state.scheduler).__name__ == "CosineLRScheduler"
    task.train()
    with torch.no_grad():  # no dropout in TINY: the training forward is deterministic
        before = task(images, labels)["loss"].item()
    train(task, state, [(images, labels)] * 20)
    with torch.no_grad():
        after = task(images, labels)["loss"].item()
    assert state.updates == 20 and len(state.losses) == 20
    assert after < 0.7 * before, (before, after)
    if name == "scratch_deit_ti16_distilled":
        assert model.distilled_training  # the token task switched the pair on
        result = task(images, labels)
        assert {"task_loss", "distill_loss"} <= set(result)


def test_distilled_model_trains_as_plain_classifier_without_teacher():
    # what timm's train.py does without --kd-model-name (and --model-kwargs distilled_training=False):
    # one criterion on the model's output
    model = tiny("scratch_deit_ti16_distilled", num_classes=4, distilled_training=False)
    task = ClassificationTask(model, verbose=False)
    images, labels = _separable_batch()
    state = create_train_state(model, total_updates=1)
    result = task.train()(images, labels)
    assert isinstance(result["output"], torch.Tensor) and result["output"].shape == (32, 4)
    result["loss"].backward()
    assert model.head.weight.grad.abs().sum() > 0 and model.head_dist.weight.grad.abs().sum() > 0
    state.optimizer.step()


@pytest.mark.parametrize(
    "ours,reference",
    [("scratch_vit_ti16", "vit_tiny_patch16_224"), ("scratch_deit_ti16_distilled", "deit_tiny_distilled_patch16_224")],
)
def test_layer_decay_groups_match_timm_model(ours, reference):
    from timm.optim import create_optimizer_v2

    def scales(model):
        optimizer = create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05, layer_decay=0.75)
        names = {id(p): n for n, p in model.named_parameters()}
        return {names[id(p)]: (g["lr_scale"], g["weight_decay"]) for g in optimizer.param_groups for p in g["params"]}

    depth = 3
    ours_scales = scales(tiny(ours, depth=depth))
    assert ours_scales == scales(timm.create_model(reference, **dict(TINY, depth=depth)))
    # the scale rises by 1/0.75 per block from the stem to the head
    for index in range(depth):
        assert ours_scales[f"blocks.{index}.mlp.fc1.weight"] == (pytest.approx(0.75 ** (depth - index)), 0.05)
        assert ours_scales[f"blocks.{index}.norm1.bias"][1] == 0.0  # biases and norms: no weight decay
    assert ours_scales["pos_embed"] == (pytest.approx(0.75 ** (depth + 1)), 0.0)
    assert ours_scales["patch_embed.proj.weight"][0] == pytest.approx(0.75 ** (depth + 1))
    # the final norm shares the last block's scale (timm's ViT grouping); the head gets the full rate
    assert ours_scales["norm.weight"] == (pytest.approx(0.75), 0.0)
    assert ours_scales["head.weight"] == (1.0, 0.05)


def _save_safetensors(model, path):
    safetensors.torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return str(path)


def test_saved_at_32_loads_at_64_through_timm_pretrained_loading_like_timm_vit(tmp_path):
    source = tiny("scratch_vit_ti16", num_classes=6)
    path = _save_safetensors(source, tmp_path / "at32.safetensors")
    arch = {k: v for k, v in TINY.items() if k != "img_size"}
    overlay = dict(file=path, num_classes=6)  # the file's head fits: keep it
    ours = timm.create_model(
        "scratch_vit_ti16", pretrained=True, pretrained_cfg_overlay=overlay, img_size=64, num_classes=6, **arch
    ).eval()
    # timm's own ViT, loading the same file at 64 through its own filter, is the reference
    reference = timm.create_model(
        "vit_tiny_patch16_224", pretrained=True, pretrained_cfg_overlay=overlay, img_size=64, num_classes=6, **arch
    ).eval()
    assert ours.pos_embed.shape == (1, 1 + 8 * 8, 64) != source.pos_embed.shape
    assert torch.allclose(ours.pos_embed, reference.pos_embed, atol=1e-6)
    assert torch.equal(ours.blocks[1].mlp.fc2.weight, source.blocks[1].mlp.fc2.weight)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert (ours(x) - reference(x)).abs().max() <= 1e-5


def test_pretrained_path_with_new_head_like_train_py(tmp_path):
    source = tiny("scratch_vit_b16_in21k", num_classes=6, representation_size=48)
    path = _save_safetensors(source, tmp_path / "in21k.safetensors")
    # train.py --pretrained-path F --num-classes 3: file overlay with num_classes=-1 forces a new head
    model = tiny(
        "scratch_vit_b16_in21k",
        pretrained=True,
        num_classes=3,
        representation_size=48,
        pretrained_cfg_overlay=dict(file=path, num_classes=-1),
    )
    assert model.head.out_features == 3
    state = model.state_dict()
    for name, value in source.state_dict().items():
        if not name.startswith("head."):
            assert torch.equal(state[name], value), name  # everything else loaded, pre_logits too


def _train_py_checkpoint(tmp_path, with_ema: bool):
    """A checkpoint written the way train.py writes one: timm's CheckpointSaver over a task."""
    model = tiny(num_classes=4)
    task = ClassificationTask(model, verbose=False)
    if with_ema:
        task.setup_ema(decay=0.5)
    state = create_train_state(model, total_updates=3)
    images, labels = _separable_batch()
    for _ in range(3):
        train_step(task, state, images, labels)
    args = argparse.Namespace(model="scratch_vit_ti16", num_classes=4)
    saver = CheckpointSaver(
        model=task.get_trainable_module(),
        optimizer=state.optimizer,
        args=args,
        checkpoint_dir=str(tmp_path),
        recovery_dir=str(tmp_path),
        task=task,
    )
    saver.save_checkpoint(epoch=0, metric=1.0)
    return task, state, tmp_path / "last.pth.tar"


def test_train_py_checkpoint_state_dict_and_ema_load_into_our_model(tmp_path):
    task, _, path = _train_py_checkpoint(tmp_path, with_ema=True)
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)  # our own file: inspect it
    assert {"state_dict", "state_dict_ema", "optimizer", "epoch", "args"} <= set(checkpoint)
    trained, ema = task.get_trainable_module(), task.get_trainable_module(ema=True).module
    for use_ema, expected in ((False, trained), (True, ema)):
        fresh = tiny(num_classes=4)
        load_checkpoint(fresh, str(path), use_ema=use_ema)  # timm's loader, weights_only=True
        for name, value in expected.state_dict().items():
            assert torch.equal(fresh.state_dict()[name], value), (use_ema, name)
    assert not torch.equal(trained.head.weight, ema.head.weight)


def test_train_py_resume_restores_model_optimizer_and_epoch(tmp_path):
    task, state, path = _train_py_checkpoint(tmp_path, with_ema=False)
    model = tiny(num_classes=4)
    resumed = ClassificationTask(model, verbose=False)
    optimizer = create_train_state(model, total_updates=3).optimizer
    next_epoch = resume_task_checkpoint(resumed, str(path), optimizer=optimizer, log_info=False)
    assert next_epoch == 1
    assert torch.equal(model.blocks[0].attn.qkv.weight, task.get_trainable_module().blocks[0].attn.qkv.weight)
    assert optimizer.state_dict()["state"][0]["step"] == state.optimizer.state_dict()["state"][0]["step"] == 3


class _Hostile:
    def __reduce__(self):
        return (print, ("hostile pickle executed",))


def test_hostile_checkpoint_is_refused_by_the_loading_paths_train_py_uses(tmp_path, capsys):
    path = tmp_path / "hostile.pth.tar"
    torch.save({"state_dict": tiny().state_dict(), "payload": _Hostile()}, path)
    with pytest.raises(Exception, match="weights_only"):
        load_checkpoint(tiny(), str(path))  # --initial-checkpoint
    with pytest.raises(Exception, match="weights_only"):
        resume_task_checkpoint(ClassificationTask(tiny(), verbose=False), str(path))  # --resume
    assert "hostile pickle executed" not in capsys.readouterr().out


def test_bfloat16_autocast_on_cpu_trains():
    # train.py --amp --amp-dtype bfloat16 on a CPU device: torch.autocast("cpu", bfloat16), no scaler
    model = tiny(num_classes=4)
    task = ClassificationTask(model, verbose=False)
    state = create_train_state(model, total_updates=1)
    images, labels = _separable_batch()
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        result = task.train()(images, labels)
    assert result["output"].dtype == torch.bfloat16
    result["loss"].backward()
    assert model.blocks[0].attn.qkv.weight.grad.dtype == torch.float32
    assert torch.isfinite(result["loss"])
    state.optimizer.step()


def test_save_model_directory_round_trips_through_timm_local_dir(tmp_path):
    from timm_vitscratch.files import sha256_file
    from timm_vitscratch.model_dir import WEIGHTS_NAME, read_config

    model = tiny("scratch_vit_b16_in21k", num_classes=5, representation_size=48).eval()
    # a torch.compile wrapper (as train.py --torchcompile holds the model) is unwrapped: no _orig_mod. keys
    directory = save_model_directory(torch.compile(model), tmp_path / "trained", source=dict(kind="test"))
    config = read_config(directory)
    assert config["vitscratch"]["sha256"] == sha256_file(directory / WEIGHTS_NAME)
    assert config["vitscratch"]["source"] == {"kind": "test"}
    stored = safetensors.torch.load_file(str(directory / WEIGHTS_NAME))  # the safetensors library reads it
    assert set(stored) == set(model.state_dict())
    assert config["architecture"] == "scratch_vit_b16_in21k" and config["model_args"]["depth"] == 2
    loaded = timm.create_model(f"local-dir:{directory}", pretrained=True).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    assert evaluate_top1(loaded, [(x, loaded(x).argmax(1))]) == 100.0


def test_timm_factory_device_and_dtype_arguments():
    # timm's distillation tasks build their teacher with create_model(..., device=...)
    model = tiny(device="meta")
    assert {p.device.type for p in model.parameters()} == {"meta"}
    model = tiny(dtype=torch.bfloat16, num_classes=3)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    model.reset_classifier(5)
    assert model.head.weight.dtype == torch.bfloat16
    assert model(torch.randn(1, 3, 32, 32, dtype=torch.bfloat16)).shape == (1, 5)


def test_logit_distillation_with_teacher_created_by_name_from_a_model_dir(tmp_path):
    from timm.task import LogitDistillationTask

    teacher_dir = save_model_directory(tiny(num_classes=4), tmp_path / "teacher")
    # train.py --kd-model-name local-dir:DIR: timm creates the teacher by name, pretrained, device given
    task = LogitDistillationTask(
        tiny(num_classes=4), f"local-dir:{teacher_dir}", device=torch.device("cpu"), verbose=False
    )
    images, labels = _separable_batch()
    result = task.train()(images, labels)
    assert torch.isfinite(result["loss"]) and result["output"].shape == (32, 4)
