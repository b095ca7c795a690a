"""The hostile inputs of ../shared/probes (f1-f5, f9, f10), each refused with a clear error and nothing
written or fetched; f2 and f3 refused in a child process capped at 200 MB more than it already uses."""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import re
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
import torchvision
from safetensors.torch import save_file

from tests.support import tiny
from tests.support.bounded_child import bounded
from tests.support.hub_fixtures import upload_raw
from timm_vitscratch.cli import main
from timm_vitscratch.errors import ConversionError, ModelArgsError, ModelDirectoryError
from timm_vitscratch.files import sha256_file
from timm_vitscratch.model_dir import check_model_directory, save_model_directory

pytestmark = pytest.mark.slow  # each probe in a memory-capped child process


def edit_config(directory: Path, **model_args) -> None:
    config = json.loads((directory / "config.json").read_text())
    config["model_args"].update(model_args)
    (directory / "config.json").write_text(json.dumps(config))


def cli_error(capsys, argv) -> str:
    """Run the CLI: exit 2 and one line on stderr, which is returned."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("vitscratch:")]  # besides progress bars
    assert len(lines) == 1 and lines[0].startswith("vitscratch: error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def evil_web(tmp_path):
    """A web server with a file a hostile config points at; records every request it gets."""
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "evil.sh").write_text("#!/bin/sh\necho attacker\n")
    seen = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            seen.append(self.path)

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(tmp_path / "www"))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/evil.sh", seen
    server.shutdown()


@pytest.mark.parametrize("key", ["pretrained", "cache_dir", "pretrained_cfg_overlay", "checkpoint_path"])
def test_f1_config_model_args_never_reach_create_model(key, tmp_path, hub_env, local_hub, evil_web, capsys, request):
    url, web_requests = evil_web
    target = tmp_path / "ANY_DIR_THE_REPO_CHOOSES"
    src = save_model_directory(tiny(), tmp_path / "src")
    evil = dict(
        pretrained=True,
        cache_dir=str(target),
        checkpoint_path=str(tmp_path / "secret.pth"),
        pretrained_cfg_overlay={"url": url, "hf_hub_id": None},
    )
    edit_config(src, **{key: evil[key]})
    repo = f"evil/{key}-{request.node.name[-8:].strip('[]')}"
    upload_raw(src, repo)
    before = len(local_hub.requests)
    line = cli_error(capsys, ["pull", repo, str(tmp_path / "out")])
    assert "is not a model option a file may set" in line and "config.json model_args" in line
    assert not target.exists() and not (tmp_path / "out").exists() and web_requests == []
    # the pull asked the Hub for the repo's own files only (its weights are served from the LFS store)
    paths = [path for _, _, path, _ in local_hub.requests[before:]]
    assert paths and all(repo in path or path.startswith("/lfs/") for path in paths), paths
    # push and export of such a directory, and timm's local-dir:, refuse it the same way
    assert "not a model option" in cli_error(capsys, ["push", str(src), "me/never"])
    assert "not a model option" in cli_error(capsys, ["export", str(src), "--to", "timm", str(tmp_path / "x.pth")])
    with pytest.raises((ModelArgsError, TypeError)):  # timm itself rejects some names before our code runs
        timm.create_model(f"local-dir:{src}", pretrained=True)
    assert not target.exists() and web_requests == [] and not (tmp_path / "x.pth").exists()


def test_f2_huge_depth_refused_at_once_in_bounded_memory(tmp_path):
    d = save_model_directory(tiny(), tmp_path / "dir")
    edit_config(d, depth=10_000)
    torch.save(
        {
            "state_dict": tiny().state_dict(),
            "args": argparse.Namespace(
                model="scratch_vit_ti16",
                model_kwargs={"depth": 10_000, "embed_dim": 64, "num_heads": 4, "patch_size": 8, "img_size": 32},
            ),
        },
        tmp_path / "c.pth",
    )
    setup = "import timm, timm_vitscratch\nfrom timm_vitscratch.convert import convert"
    for snippet in (
        f"timm.create_model('local-dir:{d}', pretrained=True)",
        f"convert('{d}', '{tmp_path / 'out'}')",
        f"convert('{tmp_path / 'c.pth'}', '{tmp_path / 'out2'}')",
    ):
        result = bounded(setup, snippet)
        assert result["type"] in ("ModelArgsError", "ConversionError"), result
        assert "depth is 10000; expected an integer in [1, 64]" in result["message"]
        print(f"f2 {snippet[:40]}: {result['seconds']:.3f} s, peak +{result['peak_growth_mb']:.0f} MB")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out2").exists()


def test_f3_npz_members_bounded_in_total(tmp_path):
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for i in range(24):
            with archive.open(f"junk_{i}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array_header_1_0(
                    member, {"descr": "<f4", "fortran_order": False, "shape": ((250 << 20) // 4,)}
                )
                for _ in range(25):
                    member.write(bytes(10 << 20))
    setup = (
        "import timm, timm_vitscratch\nfrom timm.models import load_checkpoint\n"
        "model = timm.create_model('scratch_vit_ti16', img_size=32, patch_size=8, embed_dim=64, depth=2, "
        "num_heads=4)"
    )
    result = bounded(setup, f"load_checkpoint(model, '{path}')")
    assert result["type"] == "ConversionError", result
    assert "would decompress from" in result["message"] and "in all" in result["message"]
    print(f"f3: {result['seconds']:.3f} s, peak +{result['peak_growth_mb']:.0f} MB")


def test_f4_a_checkpoint_missing_its_last_block(tmp_path, capsys):
    sd = {
        k: v
        for k, v in timm.create_model("vit_tiny_patch16_224", img_size=64, depth=4, num_classes=10).state_dict().items()
        if not k.startswith("blocks.3.")
    }
    torch.save(
        {
            "state_dict": sd,
            "args": argparse.Namespace(model="vit_tiny_patch16_224", model_kwargs={"depth": 4, "img_size": 64}),
        },
        tmp_path / "c.pth",
    )
    line = cli_error(capsys, ["convert", str(tmp_path / "c.pth"), str(tmp_path / "out"), "--verify"])
    assert "say depth 4, but its weights hold 3 blocks" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("checkpoint_has", [True, False])
def test_f5_representation_layer_mismatch_refused(checkpoint_has, tmp_path):
    tv = torchvision.models.VisionTransformer(
        image_size=64,
        patch_size=16,
        num_layers=2,
        num_heads=3,
        hidden_dim=192,
        mlp_dim=768,
        num_classes=10,
        representation_size=192 if checkpoint_has else None,
    ).eval()
    path = tmp_path / "tv.pth"
    torch.save(tv.state_dict(), path)
    from timm.models import load_checkpoint

    name = "scratch_vit_ti16" if checkpoint_has else "scratch_vit_b16_in21k"
    args = dict(img_size=64, depth=2, num_classes=10)
    if not checkpoint_has:
        args.update(embed_dim=192, num_heads=3, representation_size=192)
    model = timm.create_model(name, **args)
    with pytest.raises(ConversionError, match="representation layer"):
        load_checkpoint(model, str(path))
    # mapped exactly when the model has the same layer: logits equal torchvision's
    if checkpoint_has:
        model = timm.create_model(
            "scratch_vit_b16_in21k", embed_dim=192, num_heads=3, representation_size=192, **args
        ).eval()
        load_checkpoint(model, str(path))
        x = torch.randn(2, 3, 64, 64)
        with torch.no_grad():
            assert (model(x) - tv(x)).abs().max() < 1e-5
    # a new classifier (another num_classes) on the plain features is explicit, and loads
    fresh = timm.create_model(name, **{**args, "num_classes": 7})
    load_checkpoint(fresh, str(path), strict=False)


def test_f9_verify_fails_on_nan_and_names_it(tmp_path, capsys):
    sd = timm.create_model("vit_tiny_patch16_224", img_size=64, depth=2, num_classes=10).state_dict()
    sd["head.weight"][0, 0] = float("nan")
    save_file(sd, str(tmp_path / "w.safetensors"))
    line = cli_error(capsys, ["convert", str(tmp_path / "w.safetensors"), str(tmp_path / "out"), "--verify"])
    assert "our logits and the source's logits hold NaN or Inf" in line and "constant classifier" not in line
    assert not (tmp_path / "out").exists()
    sd["head.weight"][0, 0] = 0.0
    sd["blocks.0.mlp.fc1.weight"][0, 0] = float("inf")  # in the body: every output is non-finite
    save_file(sd, str(tmp_path / "w.safetensors"))
    line = cli_error(capsys, ["convert", str(tmp_path / "w.safetensors"), str(tmp_path / "out"), "--verify"])
    assert "NaN or Inf" in line and "constant classifier" not in line


def nonfloat_directory(tmp_path, dtype) -> Path:
    d = save_model_directory(tiny(), tmp_path / "m")
    save_file({k: v.to(dtype).contiguous() for k, v in tiny().state_dict().items()}, str(d / "model.safetensors"))
    config = json.loads((d / "config.json").read_text())
    config["vitscratch"]["sha256"] = sha256_file(d / "model.safetensors")
    (d / "config.json").write_text(json.dumps(config))
    return d


@pytest.mark.parametrize("dtype", [torch.complex64, torch.int8, torch.bool, torch.float8_e4m3fn])
def test_f10_weights_that_are_not_floating_point(dtype, tmp_path, capsys):
    d = nonfloat_directory(tmp_path, dtype)
    named = rf"\({str(dtype).removeprefix('torch.')}\).* would become model weights but (is|are) not float32"
    with pytest.raises(ModelDirectoryError, match=named):
        check_model_directory(d)
    with pytest.raises(ConversionError, match=named):
        timm.create_model(f"local-dir:{d}", pretrained=True)
    assert re.search(named, cli_error(capsys, ["convert", str(d / "model.safetensors"), str(tmp_path / "o")]))
    from timm.models import load_checkpoint

    with pytest.raises(ConversionError, match=named):
        load_checkpoint(tiny(), str(d / "model.safetensors"))
