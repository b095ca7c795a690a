"""A checkpoint as timm's train.py writes it -> one ``vitscratch convert`` call -> ``vitscratch push`` -> ``hf-hub:``.

The conversion of train.py checkpoints of timm's own ViT (live and EMA weights, ``--verify``) is in
test_convert_features.py; this is the fine-tuning user's whole flow with a scratch model: convert,
load with ``local-dir:``, push to the local Hub, load back in a fresh process with ``hf-hub:``.
"""

import argparse

import pytest
import timm
import torch
from safetensors.torch import load_file, save_file
from timm.task import ClassificationTask
from timm.utils import CheckpointSaver, ModelEmaV3

from examples.training_loop import create_train_state, train_step
from tests.support.hub_fixtures import logits, repo_for, run_client
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.convert import convert

pytestmark = pytest.mark.slow  # timm's train.py and validate.py, torchrun DDP, the digits example

#: the converter maps shapes onto a registered variant: full ViT-Ti/16 width and depth, on 32x32 images
ARCH = dict(img_size=32, num_classes=4)


def _train_py_checkpoint(tmp_path):
    """Three updates of scratch_vit_ti16 with timm's ModelEmaV3, saved by timm's CheckpointSaver as train.py does."""
    model = timm.create_model("scratch_vit_ti16", **ARCH)
    ema = ModelEmaV3(model, decay=0.5)
    task = ClassificationTask(model, verbose=False)
    state = create_train_state(model, total_updates=3, lr=1e-3)
    generator = torch.Generator().manual_seed(3)
    for step in range(3):
        images, labels = torch.randn(8, 3, 32, 32, generator=generator), torch.arange(8) % 4
        train_step(task, state, images, labels)
        ema.update(model, step=step)
    args = argparse.Namespace(model="scratch_vit_ti16", num_classes=4, img_size=32, model_ema=True)
    saver = CheckpointSaver(
        model,
        state.optimizer,
        args=args,
        model_ema=ema,
        checkpoint_dir=str(tmp_path / "run"),
        recovery_dir=str(tmp_path / "run"),
    )
    (tmp_path / "run").mkdir()
    saver.save_checkpoint(epoch=0, metric=50.0)
    checkpoint = torch.load(tmp_path / "run" / "model_best.pth.tar", weights_only=False)  # our own file: inspect it
    assert {"state_dict", "state_dict_ema", "optimizer", "args"} <= set(checkpoint)
    assert isinstance(checkpoint["args"], argparse.Namespace)
    return model.eval(), ema.module.eval(), tmp_path / "run" / "model_best.pth.tar"


def test_train_py_checkpoint_converts_in_one_call_and_round_trips_through_the_hub(hub_env, tmp_path, request, capsys):
    live, ema, checkpoint = _train_py_checkpoint(tmp_path)
    assert not torch.equal(live.head.weight, ema.head.weight)
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(5))

    # the CLI: one call, EMA weights, checked against timm's own VisionTransformer
    ema_dir = tmp_path / "converted_ema"
    assert cli_main(["convert", str(checkpoint), str(ema_dir), "--ema", "--verify"]) == 0
    out = capsys.readouterr().out
    assert "timm format, detected from its keys, weights from 'state_dict_ema'" in out
    assert "model: scratch_vit_ti16" in out and "verify: max-abs-diff" in out
    # the Python API: the live weights of the same file
    result = convert(checkpoint, tmp_path / "converted_live")
    assert (result.model_name, result.wrapper, result.model_args["img_size"]) == ("scratch_vit_ti16", "state_dict", 32)

    for directory, trained in ((ema_dir, ema), (result.out_dir, live)):
        weights = load_file(str(directory / "model.safetensors"))
        assert weights.keys() == trained.state_dict().keys()
        assert all(torch.equal(weights[k], v) for k, v in trained.state_dict().items())
        loaded = timm.create_model(f"local-dir:{directory}", pretrained=True)
        assert torch.equal(logits(loaded, x), logits(trained, x))

    # vitscratch push, then timm.create_model("hf-hub:...") in a fresh process with an empty cache
    repo = repo_for(request)
    # a train.py checkpoint names no license (the directory records "unknown"): the push names the weights' own
    assert cli_main(["push", str(ema_dir), repo]) == 2
    assert "the weights' license is unknown" in capsys.readouterr().err
    assert cli_main(["push", str(ema_dir), repo, "--license", "apache-2.0"]) == 0
    assert f"pushed {ema_dir} to {repo}@main" in capsys.readouterr().out
    save_file({"x": x}, str(tmp_path / "x.safetensors"))
    (tmp_path / "client").mkdir()
    jobs = [
        dict(
            id="ema",
            kind="logits",
            model=f"hf-hub:{repo}",
            input=str(tmp_path / "x.safetensors"),
            output=str(tmp_path / "client" / "ema.safetensors"),
        )
    ]
    results = run_client(
        jobs,
        tmp_path / "client",
        {
            **hub_env,
            "HF_HOME": str(tmp_path / "hf-home-fresh"),
            "HF_HUB_CACHE": str(tmp_path / "hf-home-fresh" / "hub"),
        },
    )
    assert results["ema"].get("ok"), results
    from_hub = load_file(str(tmp_path / "client" / "ema.safetensors"))["logits"]
    assert (from_hub - logits(ema, x)).abs().max().item() == 0.0
