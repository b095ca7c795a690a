"""Big models without big memory, in small: the 7B's architecture at a few hundred MB, loaded and converted
in a child process whose peak resident memory is read from ``/proc/self/status`` (``VmHWM``, reset between
steps). The 13.4 GB run is benchmarks/stream_7b.py; these bounds are what it shows, at a size a test affords.

- An unaligned bfloat16 file (laid out as ``safetensors.torch.save_file`` lays it out) loads through timm's
  ``pretrained=True`` with every tensor copied once to align it, each tensor's file pages given back as it is
  copied: the load grows by the checkpoint plus a few tensors, never twice the checkpoint.
- The same tensors as our writer lays them out (64-byte aligned) load memory-mapped: no copy, the load
  grows by a few MB, and reading every weight brings in the checkpoint once.
- ``convert`` streams: it grows by a few tensors, far less than the checkpoint.
"""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import timm
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from tests.support import time_limits
from timm_vitscratch.tensor_writer import TensorSpec, write_safetensors

pytestmark = pytest.mark.slow  # child processes reading a few hundred MB

ROOT = Path(__file__).resolve().parents[2]
#: the 7B's architecture (SwiGLU, 4 registers, head_dim 128) at a width and depth a test affords: 168 MB
SMALL_7B = {"embed_dim": 1024, "num_heads": 8, "depth": 8}
SLACK = 48 << 20  # what a load or a conversion allocates besides tensors (Python objects, a thread's buffers)

CHILD = r"""
import json, re, sys
import torch, timm, timm_vitscratch
from safetensors.torch import load_file
from timm_vitscratch.convert import convert

def status():
    text = open("/proc/self/status").read()
    return {k: int(re.search(k + r":\s+(\d+)", text).group(1)) << 10 for k in ("VmRSS", "VmHWM")}

def growth(step):
    open("/proc/self/clear_refs", "w").write("5")  # the peak starts again from what is resident now
    before = status()["VmRSS"]
    kept = step()
    return kept, status()["VmHWM"] - before

def mapped_bytes(model):
    ranges = []
    for line in open("/proc/self/maps"):
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].strip().endswith(".safetensors"):
            ranges.append([int(v, 16) for v in parts[0].split("-")])
    return sum(t.numel() * t.element_size() for t in model.parameters()
               if any(lo <= t.data_ptr() < hi for lo, hi in ranges))

def touch(model):  # read every weight once (a reduction, no copy)
    with torch.no_grad():
        return sum(float(hi) - float(lo) for lo, hi in (torch.aminmax(p) for p in model.parameters()))

args = json.loads(sys.argv[1])
out = {}
for name, path in args.get("load", {}).items():
    load = lambda: timm.create_model("scratch_dinov3_7b16", pretrained=True, dtype=torch.bfloat16,
                                     pretrained_cfg_overlay=dict(file=path), **args["model"])
    model, grown = growth(load)
    _, read = growth(lambda: touch(model))
    out[name] = {"load": grown, "after_reading": grown + read, "mapped": mapped_bytes(model),
                 "bytes": sum(p.numel() * p.element_size() for p in model.parameters())}
    own = model.state_dict()  # measured: now compare with the file
    out[name]["equal"] = all(torch.equal(v, own[k]) for k, v in load_file(path).items())
    del model, own
if "convert" in args:
    _, out["convert"] = growth(lambda: convert(args["convert"], args["out"]))
print(json.dumps(out))
"""


def run_child(**args) -> dict:
    result = time_limits.run(
        [sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True, quiet_seconds=120, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def synthetic(path: Path, **size) -> dict:
    """benchmarks/make_synthetic_7b.py's checkpoint (timm's names, bfloat16, data start off 64 bytes)."""
    spec = importlib.util.spec_from_file_location("make_synthetic_7b", ROOT / "benchmarks" / "make_synthetic_7b.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_synthetic(path, **size)


def aligned_copy(source: Path, path: Path) -> Path:
    """The same tensors through our streaming writer (the one ``convert`` uses): 64-byte aligned."""
    with safe_open(str(source), "pt") as handle:
        specs = [TensorSpec(k, tuple(handle.get_slice(k).get_shape()), torch.bfloat16) for k in handle.keys()]
        write_safetensors(path, specs, lambda spec: handle.get_tensor(spec.name))
    return path


def test_the_7b_builds_on_meta_with_timms_parameters():
    ours = timm.create_model("scratch_dinov3_7b16", device="meta")
    with torch.device("meta"):
        theirs = timm.create_model("vit_7b_patch16_dinov3")
    assert all(t.is_meta for t in [*ours.parameters(), *ours.buffers()])
    count = sum(p.numel() for p in ours.parameters())
    assert count == sum(p.numel() for p in theirs.parameters()) == 6_716_030_976
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}


def test_a_7b_shaped_checkpoint_loads_once_and_memory_mapped_when_aligned(tmp_path):
    made = synthetic(tmp_path / "unaligned.safetensors", **SMALL_7B)
    size, largest = made["bytes"], made["largest_tensor"]["bytes"]
    assert made["data_start_mod_64"] != 0 and size > 150 << 20 and largest < size // 20
    aligned = aligned_copy(tmp_path / "unaligned.safetensors", tmp_path / "aligned.safetensors")
    loads = {"unaligned": str(tmp_path / "unaligned.safetensors"), "aligned": str(aligned)}
    result = run_child(load=loads, model=SMALL_7B)
    copied, mapped = result["unaligned"], result["aligned"]
    mb = {
        k: {m: round(v / 2**20, 1) for m, v in r.items() if m in ("load", "after_reading")} for k, r in result.items()
    }
    print(f"checkpoint {size / 2**20:.0f} MB, largest tensor {largest / 2**20:.1f} MB; RSS growth (MB): {mb}")
    assert copied["equal"] and mapped["equal"]  # the model holds the file's tensors, bit for bit
    # unaligned: every tensor copied once, its file pages given back: the checkpoint plus a few tensors
    assert copied["mapped"] == 0
    assert copied["load"] < size + 4 * largest + SLACK, (copied, size)
    # aligned: the model's tensors are views of the file's mapping, read when first used
    assert mapped["mapped"] == mapped["bytes"] > size - (1 << 20)
    assert mapped["load"] < SLACK, mapped
    assert mapped["after_reading"] < size + SLACK, (mapped, size)


def test_convert_streams_tensor_by_tensor(tmp_path):
    """A classic ViT in timm's names, bfloat16, 200 MB: convert grows by a few tensors, not by the file."""
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in timm.create_model("vit_large_patch16_224", depth=8).state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    tensors = {k: (0.02 * torch.randn(shape, generator=generator)).bfloat16() for k, shape in shapes.items()}
    save_file(tensors, str(tmp_path / "vit.safetensors"))
    size, largest = (tmp_path / "vit.safetensors").stat().st_size, max(t.nbytes for t in tensors.values())
    del tensors
    assert size > 150 << 20 and largest < size // 20
    result = run_child(convert=str(tmp_path / "vit.safetensors"), out=str(tmp_path / "out"))
    print(
        f"checkpoint {size / 2**20:.0f} MB, largest tensor {largest / 2**20:.1f} MB; convert: +{result['convert'] / 2**20:.0f} MB"
    )
    assert result["convert"] < 4 * largest + SLACK < size // 2, (result, size, largest)
    assert (tmp_path / "out" / "model.safetensors").stat().st_size > size - (1 << 20)
