"""Any architecture the model can express converts: depth, width, MLP ratio and heads off the variant table
are recorded as model_args; heads come from the source's config, a train.py checkpoint's args or --num-heads;
--verify compares features and logits, and refuses logits that cannot tell the weights apart."""

import argparse
import json

import pytest
import timm
import torch
from safetensors.torch import save_file
from timm.models._hub import save_config_for_hf

from tests.support.sources import batch, hf_config, load_converted, logits, max_diff, randomized
from timm_vitscratch.convert import convert
from timm_vitscratch.convert.plan import TAG_PROVENANCE
from timm_vitscratch.errors import VerificationError
from timm_vitscratch.model_dir import METADATA_KEY

pytestmark = pytest.mark.slow  # off-table architectures converted and verified

X = batch(64)


def test_train_py_checkpoint_of_a_depth_4_model(tmp_path):
    """train.py --model scratch_vit_ti16 --model-kwargs depth=4: heads read from the checkpoint's args."""
    model = randomized(lambda: timm.create_model("scratch_vit_ti16", depth=4, img_size=64, num_classes=5))
    args = argparse.Namespace(model="scratch_vit_ti16", model_kwargs={"depth": 4}, img_size=64)
    torch.save({"state_dict": model.state_dict(), "args": args, "epoch": 3}, tmp_path / "last.pth.tar")
    result = convert(tmp_path / "last.pth.tar", tmp_path / "out", verify=True)
    assert result.model_name == "scratch_vit_ti16" and result.heads_note is None
    assert result.model_args == {"num_classes": 5, "img_size": 64, "depth": 4}
    assert max_diff(logits(load_converted(tmp_path / "out"), X), logits(model, X)) == 0


def test_transformers_vit_off_the_table_with_six_heads(tmp_path):
    """A 6-layer 384-wide transformers ViT with MLP ratio 2.5: heads from its config.json."""
    import transformers

    config = hf_config(
        hidden_size=384, num_hidden_layers=6, num_attention_heads=6, intermediate_size=960, image_size=64
    )
    source = randomized(lambda: transformers.ViTForImageClassification(config))
    (tmp_path / "hf").mkdir()
    source.config.save_pretrained(tmp_path / "hf")
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(tmp_path / "hf" / "model.safetensors"))
    result = convert(tmp_path / "hf", tmp_path / "out", verify=True)
    assert result.model_name == "scratch_vit_s16" and result.heads_note is None
    assert result.model_args["depth"] == 6 and result.model_args["mlp_ratio"] == 2.5
    ours = load_converted(tmp_path / "out")
    assert ours.blocks[0].attn.num_heads == 6 and len(ours.blocks) == 6
    assert max_diff(logits(ours, X), logits(source, X)) <= 1e-4
    reloaded = timm.create_model(f"local-dir:{tmp_path / 'out'}", pretrained=True).eval()
    assert torch.equal(logits(reloaded, X), logits(ours, X))


def test_heads_assumed_are_said(tmp_path):
    """A bare timm state dict does not say its heads: the assumption is said in one line; --num-heads sets them."""
    source = randomized(
        lambda: timm.models.vision_transformer.VisionTransformer(
            img_size=64, patch_size=16, embed_dim=192, depth=2, num_heads=6, num_classes=4
        )
    )
    save_file(source.state_dict(), str(tmp_path / "h6.safetensors"))
    assumed = convert(tmp_path / "h6.safetensors", tmp_path / "assumed")
    assert assumed.heads_note.startswith("heads: 3, assumed from scratch_vit_ti16")
    right = convert(tmp_path / "h6.safetensors", tmp_path / "right", num_heads=6, verify=True)
    assert right.heads_note is None and right.model_args["num_heads"] == 6
    assert max_diff(logits(load_converted(tmp_path / "right"), X), logits(source, X)) <= 1e-4


def test_verify_fails_on_a_wrong_num_heads(tmp_path):
    """The source's config says 6 heads; --num-heads 2 builds another model, and --verify says so."""
    import transformers

    config = hf_config(num_hidden_layers=2, num_attention_heads=6, image_size=64)
    source = randomized(lambda: transformers.ViTForImageClassification(config))
    (tmp_path / "hf").mkdir()
    source.config.save_pretrained(tmp_path / "hf")
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(tmp_path / "hf" / "model.safetensors"))
    with pytest.raises(VerificationError, match="exceeds the tolerance"):
        convert(tmp_path / "hf", tmp_path / "wrong", num_heads=2, verify=True)
    assert not (tmp_path / "wrong").exists()
    assert convert(tmp_path / "hf", tmp_path / "right", verify=True).verification.passed


def test_verify_refuses_logits_that_cannot_tell_the_weights_apart(tmp_path):
    source = randomized(lambda: timm.create_model("vit_tiny_patch16_224", depth=2, img_size=64, num_classes=4))
    state = source.state_dict()
    state["head.weight"] = torch.zeros_like(state["head.weight"])
    save_file(state, str(tmp_path / "zero_head.safetensors"))
    with pytest.raises(VerificationError, match="the same for every input"):
        convert(tmp_path / "zero_head.safetensors", tmp_path / "out", verify=True)


def test_config_is_timms_save_config_for_hf_and_keeps_labels_and_preprocessing(tmp_path):
    """config.json equals timm's own save_config_for_hf output for the same model, apart from our block;
    label names from an image folder; a re-conversion keeps the source's preprocessing and labels."""
    source = randomized(lambda: timm.create_model("scratch_vit_ti16", depth=2, img_size=64, num_classes=3))
    torch.save(source.state_dict(), tmp_path / "w.pth")
    for name in ("cat", "dog", "owl"):
        (tmp_path / "images" / name).mkdir(parents=True)
    convert(tmp_path / "w.pth", tmp_path / "out", labels=tmp_path / "images")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["label_names"] == ["cat", "dog", "owl"]
    # the same model: these weights are not the variant's default tag, so its cfg carries no tag provenance
    # (and a licence the source names none of: recorded as unknown)
    same = timm.create_model(
        "scratch_vit_ti16",
        depth=2,
        img_size=64,
        num_classes=3,
        pretrained_cfg_overlay={**dict.fromkeys(TAG_PROVENANCE), "license": "unknown"},
    )
    save_config_for_hf(same, tmp_path / "timm.json", model_config={"label_names": ["cat", "dog", "owl"]})
    timms = json.loads((tmp_path / "timm.json").read_text())
    # model_args leaves num_classes to the top level (transformers passes it to create_model itself)
    assert timms["model_args"].pop("num_classes") == config["num_classes"] == 3
    assert {k: v for k, v in config.items() if k != METADATA_KEY} == timms
    # a model directory with its own preprocessing, converted again: kept, not reset to the variant's
    edited = dict(config)
    edited["pretrained_cfg"] = dict(
        config["pretrained_cfg"], mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25], interpolation="bilinear"
    )
    (tmp_path / "out" / "config.json").write_text(json.dumps(edited))
    convert(tmp_path / "out", tmp_path / "again")
    again = json.loads((tmp_path / "again" / "config.json").read_text())
    assert again["pretrained_cfg"]["mean"] == [0.5, 0.5, 0.5] and again["pretrained_cfg"]["interpolation"] == "bilinear"
    assert again["label_names"] == ["cat", "dog", "owl"]


def test_converted_directory_loads_with_timm_local_dir_and_hf_hub(tmp_path, hub_env, request):
    from tests.support.hub_fixtures import repo_for, upload_raw

    source = randomized(lambda: timm.create_model("scratch_vit_ti16", depth=2, img_size=64, num_classes=3))
    torch.save(source.state_dict(), tmp_path / "w.pth")
    convert(tmp_path / "w.pth", tmp_path / "out")
    local = timm.create_model(f"local-dir:{tmp_path / 'out'}", pretrained=True, num_classes=7)
    repo = repo_for(request)
    upload_raw(tmp_path / "out", repo)  # as it is: any client reading timm's Hub format must load it
    hub = timm.create_model(f"hf-hub:{repo}", pretrained=True, num_classes=7)
    for model in (local, hub):
        assert model.head.out_features == 7
        for key, value in source.state_dict().items():
            if not key.startswith("head."):
                assert torch.equal(model.state_dict()[key], value), key


def test_clip_quickgelu_directory_converts_with_its_activation_and_eps(tmp_path):
    """timm's save_for_hf of an OpenAI-CLIP tower (QuickGELU, LayerNorm eps 1e-5, norm before the blocks): the
    shapes cannot tell activation or eps, timm's config.json does; both are recorded, logits equal timm's."""
    source = randomized(
        lambda: timm.create_model("vit_base_patch32_clip_quickgelu_224", depth=2, img_size=64, num_classes=5)
    )
    timm.models.save_for_hf(source, tmp_path / "clip")
    result = convert(tmp_path / "clip", tmp_path / "out", verify=True)
    assert result.verification.passed
    assert {"act_layer": "quick_gelu", "norm_eps": 1e-5, "pre_norm": True}.items() <= result.model_args.items()
    assert max_diff(logits(load_converted(tmp_path / "out"), X), logits(source, X)) <= 1e-5
    # the bare weights say neither: timm's defaults (GELU, eps 1e-6) are what the output records
    save_file(source.state_dict(), str(tmp_path / "bare.safetensors"))
    bare = convert(tmp_path / "bare.safetensors", tmp_path / "bare")
    assert "act_layer" not in bare.model_args and "norm_eps" not in bare.model_args


def test_train_py_checkpoint_with_an_act_layer_in_its_model_kwargs(tmp_path):
    """train.py --model vit_tiny_patch16_224 --model-kwargs act_layer=quick_gelu ...: read from the args."""
    kwargs = {"depth": 2, "act_layer": "quick_gelu", "pre_norm": True}
    model = randomized(lambda: timm.create_model("vit_tiny_patch16_224", img_size=64, num_classes=5, **kwargs))
    args = argparse.Namespace(model="vit_tiny_patch16_224", model_kwargs=kwargs, img_size=64)
    torch.save({"state_dict": model.state_dict(), "args": args, "epoch": 1}, tmp_path / "last.pth.tar")
    result = convert(tmp_path / "last.pth.tar", tmp_path / "out", verify=True)
    assert result.model_args["act_layer"] == "quick_gelu" and result.heads_note is None
    assert max_diff(logits(load_converted(tmp_path / "out"), X), logits(model, X)) <= 1e-5
