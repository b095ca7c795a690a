"""Bad input: a clear ConversionError naming the file and the problem, and nothing written."""

import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import save_file

from tests.support.sources import randomized, timm_vit
from timm_vitscratch.convert import ConversionError, VerificationError, convert, formats, timm_format
from timm_vitscratch.errors import ConversionError as ProjectConversionError


@pytest.fixture(scope="module")
def vit_state_dict():
    return timm_vit().state_dict()


@pytest.fixture
def vit_file(tmp_path, vit_state_dict):
    path = tmp_path / "vit.safetensors"
    save_file(vit_state_dict, str(path))
    return path


def refused(src, out, match, **kwargs):
    """Conversion fails with a ConversionError matching ``match`` that names ``src``; ``out`` is not created."""
    with pytest.raises(ConversionError, match=match) as err:
        convert(src, out, **kwargs)
    assert str(src.name) in str(err.value) or str(src) in str(err.value)
    assert not out.exists()
    return err.value


def test_one_exception_type():
    assert ConversionError is ProjectConversionError and issubclass(ConversionError, ValueError)
    assert issubclass(VerificationError, ConversionError)


def test_truncated_safetensors(tmp_path, vit_file):
    data = vit_file.read_bytes()
    bad = tmp_path / "truncated.safetensors"
    bad.write_bytes(data[: len(data) // 2])
    refused(bad, tmp_path / "out", "not a valid safetensors file")


def test_corrupt_safetensors_header(tmp_path, vit_file):
    data = bytearray(vit_file.read_bytes())
    data[8:40] = b"{" + b"x" * 31  # the JSON header no longer parses
    bad = tmp_path / "corrupt.safetensors"
    bad.write_bytes(bytes(data))
    refused(bad, tmp_path / "out", "not a valid safetensors file")


def test_truncated_pth(tmp_path, vit_state_dict):
    torch.save(vit_state_dict, tmp_path / "full.pth")
    data = (tmp_path / "full.pth").read_bytes()
    (tmp_path / "cut.pth").write_bytes(data[: len(data) // 3])
    refused(tmp_path / "cut.pth", tmp_path / "out", "truncated|damaged|not a readable")


@pytest.mark.parametrize(
    "payload, match",
    [
        ([1, 2, 3], "holds a list, not a state dict"),
        (torch.zeros(3), "holds a Tensor, not a state dict"),
        ({"epoch": 3, "arch": "vit"}, "entry 'epoch' is an int, not a tensor"),
        ({"state_dict": {"a": 1}}, "entry 'a' under 'state_dict' is an int"),
    ],
)
def test_pth_that_is_not_a_state_dict(tmp_path, payload, match):
    torch.save(payload, tmp_path / "thing.pth")
    refused(tmp_path / "thing.pth", tmp_path / "out", match)


class RunsCode:
    """Unpickling this runs a shell command: the classic malicious checkpoint."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.slow  # loads in processes
@pytest.mark.parametrize("container", ["torch.save", "raw pickle"])
def test_pickle_that_would_run_code_is_refused_and_never_runs(tmp_path, container):
    marker = tmp_path / "code-ran"
    payload = {"state_dict": {}, "hook": RunsCode(marker)}
    path = tmp_path / "evil.pth"
    if container == "torch.save":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload, protocol=2))
    # the payload is live: an unsafe load (in a throwaway process) runs it and the marker appears
    subprocess.run(
        [sys.executable, "-c", f"import torch; torch.load({str(path)!r}, weights_only=False)"],
        check=False,
        capture_output=True,
    )
    assert marker.exists()
    marker.unlink()
    err = refused(path, tmp_path / "out", "refused to unpickle")
    assert "system" in str(err) and "weights_only=True" in str(err)  # names the global it refused
    assert not marker.exists()  # ... and our loader never ran it


def test_missing_keys(tmp_path, vit_state_dict):
    state_dict = dict(vit_state_dict)
    del state_dict["blocks.3.mlp.fc1.weight"], state_dict["norm.bias"]
    save_file(state_dict, str(tmp_path / "missing.safetensors"))
    err = refused(tmp_path / "missing.safetensors", tmp_path / "out", "missing keys")
    assert "'blocks.3.mlp.fc1.weight'" in str(err) and "'norm.bias'" in str(err)


def test_missing_keys_named_in_the_source_layout(tmp_path):
    tv = randomized(
        lambda: __import__("torchvision").models.VisionTransformer(
            image_size=224, patch_size=16, num_layers=12, num_heads=3, hidden_dim=192, mlp_dim=768, num_classes=10
        )
    )
    state_dict = tv.state_dict()
    del state_dict["encoder.layers.encoder_layer_5.ln_2.weight"]
    torch.save(state_dict, tmp_path / "tv.pth")
    refused(
        tmp_path / "tv.pth",
        tmp_path / "out",
        r"missing keys .*torchvision layout: "
        r"'encoder\.layers\.encoder_layer_5\.ln_2\.weight'",
    )


def test_unexpected_keys(tmp_path, vit_state_dict):
    state_dict = {**vit_state_dict, "extra.weight": torch.zeros(3), "blocks.0.attn.bonus": torch.zeros(1)}
    save_file(state_dict, str(tmp_path / "extra.safetensors"))
    err = refused(tmp_path / "extra.safetensors", tmp_path / "out", "unexpected keys")
    assert "'extra.weight'" in str(err) and "'blocks.0.attn.bonus'" in str(err)


def test_shape_the_model_cannot_express(tmp_path):
    odd = randomized(
        lambda: timm.models.vision_transformer.VisionTransformer(
            img_size=64, patch_size=8, embed_dim=96, depth=3, num_heads=2, num_classes=4
        )
    )
    state_dict = odd.state_dict()
    state_dict["pos_embed"] = state_dict["pos_embed"][:, :-3]  # 62 positions: no grid
    save_file(state_dict, str(tmp_path / "odd.safetensors"))
    err = refused(tmp_path / "odd.safetensors", tmp_path / "out", "match no ViT the scratch model can express")
    assert "62 positions" in str(err)


def test_inconsistent_shapes(tmp_path, vit_state_dict):
    state_dict = dict(vit_state_dict)
    state_dict["blocks.4.attn.proj.weight"] = torch.zeros(192, 100)
    save_file(state_dict, str(tmp_path / "bent.safetensors"))
    refused(tmp_path / "bent.safetensors", tmp_path / "out", r"'blocks\.4\.attn\.proj\.weight' has shape \(192, 100\)")


def test_model_contradicting_the_shapes(tmp_path, vit_file):
    err = refused(vit_file, tmp_path / "out", "--model scratch_vit_b16 does not match", model="scratch_vit_b16")
    assert "embed_dim 768" in str(err) and "embed_dim 192" in str(err) and "scratch_vit_ti16" in str(err)
    refused(vit_file, tmp_path / "out", "does not match", model="scratch_deit_ti16_distilled")


@pytest.mark.slow  # a conversion per format
def test_unknown_source_format(tmp_path, vit_file):
    refused(vit_file, tmp_path / "out", "unknown source format 'keras'", source="keras")
    refused(vit_file, tmp_path / "out", "--from torchvision: the keys are not torchvision's", source="torchvision")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "timm_vitscratch.cli",
            "convert",
            str(vit_file),
            str(tmp_path / "out"),
            "--from",
            "keras",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "invalid choice: 'keras'" in result.stderr
    assert not (tmp_path / "out").exists()


def test_unrecognised_keys_with_auto(tmp_path):
    save_file({"encoder.weight": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    refused(tmp_path / "other.safetensors", tmp_path / "out", "cannot tell the checkpoint format")


def test_not_a_checkpoint_at_all(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    refused(tmp_path / "notes.txt", tmp_path / "out", "not a checkpoint format")
    (tmp_path / "empty.pth").write_bytes(b"")
    refused(tmp_path / "empty.pth", tmp_path / "out", "is empty")
    refused(tmp_path / "nope.pth", tmp_path / "out", "does not exist")


@pytest.mark.parametrize(
    "kwargs, recorded",
    [
        (dict(init_values=1e-5), dict(init_values=1e-5)),  # DeiT-III LayerScale
        (dict(reg_tokens=4, no_embed_class=True, init_values=1e-5), dict(reg_tokens=4, no_embed_class=True)),  # DINOv2
        (dict(global_pool="avg", fc_norm=True), dict(global_pool="avg")),  # MAE / BEiT
        (dict(pre_norm=True, final_norm=False), dict(pre_norm=True, final_norm=False)),  # CLIP
        (dict(global_pool="map"), dict(global_pool="map")),
        (dict(qk_norm=True), dict(qk_norm=True)),
    ],
)
def test_timm_options_convert_and_are_recorded(tmp_path, kwargs, recorded):
    model = randomized(
        lambda: timm.create_model("vit_tiny_patch16_224", num_classes=10, depth=2, img_size=64, **kwargs)
    )
    save_file(model.state_dict(), str(tmp_path / "newer.safetensors"))
    result = convert(tmp_path / "newer.safetensors", tmp_path / "out", verify=True)
    assert result.verification.passed
    assert recorded.items() <= result.model_args.items()


def test_timm_feature_the_model_cannot_hold(tmp_path):
    model = randomized(
        lambda: timm.create_model("vit_tiny_patch16_224", num_classes=10, depth=2, img_size=64, scale_attn_norm=True)
    )
    save_file(model.state_dict(), str(tmp_path / "newer.safetensors"))
    refused(tmp_path / "newer.safetensors", tmp_path / "out", "scale norms")


@pytest.mark.slow  # a verified conversion
def test_identity_layer_scale_is_accepted(tmp_path):
    model = randomized(lambda: timm.create_model("vit_tiny_patch16_224", num_classes=10, init_values=1.0))
    state_dict = {k: (torch.ones_like(v) if ".ls" in k else v) for k, v in model.state_dict().items()}
    model.load_state_dict(state_dict)
    save_file(state_dict, str(tmp_path / "ls1.safetensors"))
    result = convert(tmp_path / "ls1.safetensors", tmp_path / "out", verify=True)
    assert result.verification.passed


def test_output_path_is_a_file(tmp_path, vit_file):
    (tmp_path / "taken").write_text("x")
    with pytest.raises(ConversionError, match="not a directory"):
        convert(vit_file, tmp_path / "taken")
    assert (tmp_path / "taken").read_text() == "x"


def test_output_dir_not_writable(vit_file):
    base = Path(tempfile.mkdtemp())  # world-readable, so an unprivileged user can read the source
    try:
        base.chmod(0o755)
        src = base / "vit.safetensors"
        shutil.copy(vit_file, src)
        src.chmod(0o644)
        out = base / "locked"
        out.mkdir()
        out.chmod(0o555)
        assert formats.FORMATS  # every format module is imported before forking
        pid = os.fork()
        if pid == 0:  # child: a user who cannot write to `out` (root writes anywhere, so become nobody)
            code = 9
            try:
                if os.geteuid() == 0:
                    os.setgid(65534)
                    os.setuid(65534)
                try:
                    (out / "probe").write_text("x")
                    code = 8  # the directory was writable after all: the test would prove nothing
                except PermissionError:
                    try:
                        convert(src, out)
                        code = 7
                    except ConversionError as err:
                        code = 0 if "output directory is not writable" in str(err) and str(out) in str(err) else 6
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert list(out.iterdir()) == []
    finally:
        (base / "locked").chmod(0o755)
        shutil.rmtree(base)


@pytest.mark.slow  # a verification at ViT-Ti size
def test_failed_verification_writes_nothing(tmp_path, vit_file, monkeypatch):
    convert(vit_file, tmp_path / "out")
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    reference = timm_format.TimmFormat.reference

    def off_by_a_bit(self, checkpoint, spec):
        source = reference(self, checkpoint, spec)
        model = source.logits
        with torch.no_grad():
            model.head.bias.add_(1e-3)
        return source

    monkeypatch.setattr(timm_format.TimmFormat, "reference", off_by_a_bit)
    with pytest.raises(VerificationError, match=r"max-abs-diff 0\.001 .* exceeds the tolerance 0\.0001"):
        convert(vit_file, tmp_path / "out", verify=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before


KILLABLE = textwrap.dedent("""
    import faulthandler, signal, sys, time
    faulthandler.register(signal.SIGUSR1)  # the test asks for every thread's stack if the process hangs
    # Ctrl-C as in a terminal: a job started in the background of a non-interactive shell (as CI may start the
    # suite) inherits SIGINT ignored, and Python then leaves it ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from timm_vitscratch import tensor_writer as writer
    from timm_vitscratch.convert import convert
    raw_bytes, count = writer._raw_bytes, [0]
    def slow_raw_bytes(tensor):  # slow the write down so the signal lands mid-file
        count[0] += 1
        if count[0] == 20:
            print("mid-write", flush=True)
        if count[0] >= 20:
            time.sleep(0.5)
        return raw_bytes(tensor)
    writer._raw_bytes = slow_raw_bytes
    convert(sys.argv[1], sys.argv[2])
""")


@pytest.mark.slow  # conversions killed in processes
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_conversion_killed_mid_write_keeps_previous_files(tmp_path, vit_file, sig):
    out = tmp_path / "out"
    convert(vit_file, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    other = randomized(lambda: timm.create_model("vit_tiny_patch16_224", num_classes=10), seed=5)
    save_file(other.state_dict(), str(tmp_path / "other.safetensors"))
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLABLE, str(tmp_path / "other.safetensors"), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "mid-write"
        staging = [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # staged beside OUT_DIR
        assert staging and any(staging[0].iterdir())  # a half-written file exists right now
        proc.send_signal(sig)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:  # say where it hangs, then fail
            proc.send_signal(signal.SIGUSR1)
            time.sleep(2)
            proc.kill()
            pytest.fail(f"the converter did not end within 60 s of the signal; its threads:\n{proc.communicate()[1]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    if sig == signal.SIGINT:  # an interrupt cleans up after itself
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]
    convert(tmp_path / "other.safetensors", out)  # the next conversion succeeds and removes leftovers
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]
    assert (out / "model.safetensors").read_bytes() != before["model.safetensors"]


def test_transformers_config_that_does_not_fit(tmp_path):
    import json

    from transformers import ViTForImageClassification

    from tests.support.sources import hf_config

    randomized(lambda: ViTForImageClassification(hf_config())).save_pretrained(tmp_path / "hub")
    config_path = tmp_path / "hub" / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "hidden_act": "relu"}))
    refused(tmp_path / "hub", tmp_path / "out", "hidden_act is 'relu'; expected 'gelu'")
    config_path.write_text(json.dumps({**config, "image_size": "huge"}))
    refused(tmp_path / "hub", tmp_path / "out", "image_size is 'huge'; expected an integer")
    config_path.write_text(json.dumps({**config, "image_size": 160}))  # 100 patches, but the table holds 196
    refused(tmp_path / "hub", tmp_path / "out", "image size 160x160 at patch 16 needs 100")


def test_activation_a_config_names_that_the_model_cannot_build(tmp_path):
    """A config whose act_layer timm does not know, or an architecture whose activation has no name we take."""
    import json

    from timm_vitscratch.convert.timm_format import architecture_facts

    model = randomized(lambda: timm.create_model("vit_tiny_patch16_224", num_classes=10, depth=2, img_size=64))
    (tmp_path / "src").mkdir()
    save_file(model.state_dict(), str(tmp_path / "src" / "model.safetensors"))
    config = {
        "architecture": "vit_tiny_patch16_224",
        "num_classes": 10,
        "model_args": {"depth": 2, "img_size": 64, "act_layer": "no_such_act"},
    }
    (tmp_path / "src" / "config.json").write_text(json.dumps(config))
    refused(tmp_path / "src", tmp_path / "out", "act_layer is 'no_such_act'; expected one of")
    # a file's args hold data, never a class: an activation module is refused by the allow-list
    with pytest.raises(ConversionError, match=re.escape("act_layer is <class 'torch.nn.modules.activation.Softsign'>")):
        architecture_facts("vit_tiny_patch16_224", {"depth": 1, "act_layer": torch.nn.Softsign}, "args")


def test_args_timm_cannot_build_are_refused_not_dropped(tmp_path):
    """A config's architecture that timm cannot build with its args leaves the heads, activation and eps unknown:
    refused by name, where they used to be dropped silently (and then assumed to be GELU and 1e-6)."""
    import json

    from timm_vitscratch.convert.timm_format import architecture_facts

    # quick_gelu is what this CLIP architecture stands for; 5 heads do not divide its 768 channels
    with pytest.raises(ConversionError, match="timm cannot build 'vit_base_patch32_clip_quickgelu_224'"):
        architecture_facts("vit_base_patch32_clip_quickgelu_224", {"num_heads": 5}, "config.json model_args")
    assert architecture_facts("vit_base_patch32_clip_quickgelu_224", {}, "config.json")["act_layer"] == "quick_gelu"
    with pytest.raises(ConversionError, match="names 'resnet18', which is not a Vision Transformer"):
        architecture_facts("resnet18", {}, "config.json")
    model = randomized(lambda: timm.create_model("vit_tiny_patch16_224", num_classes=10, depth=2, img_size=64))
    (tmp_path / "src").mkdir()
    save_file(model.state_dict(), str(tmp_path / "src" / "model.safetensors"))
    config = {"architecture": "vit_tiny_patch16_224", "num_classes": 10, "model_args": {"depth": 2, "num_heads": 5}}
    (tmp_path / "src" / "config.json").write_text(json.dumps(config))
    refused(tmp_path / "src", tmp_path / "out", "timm cannot build 'vit_tiny_patch16_224'")
