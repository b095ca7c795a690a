"""A child process that runs NaFlex batches through a model, for the NaFlex fuzz test: ``python naflex_worker.py``.

Speaks ``loader_worker.py``'s protocol (driven by ``tests.support.fuzzing.LoaderProcess``): one JSON request per
line on stdin, one ``@@ {...}`` answer per line on stdout. Requests: ``limit_memory`` (caps the address space),
and ``naflex``, whose ``batch`` describes a NaFlex batch (see :func:`build`); the batch is built here, so a
case is plain JSON. Its answer:

- ``ok``: logits of shape (B, classes), each image's equal to that image alone (its valid patches only, a
  batch of one), and finite for every image whose valid patches are;
- ``error``: the forward raised; ``ours`` says whether it was a ``NaFlexBatchError``;
- ``inconsistent``: logits that break the above; ``unbuildable``: the description makes no batch (a test bug).
"""

from __future__ import annotations

import json
import sys
import traceback
from functools import cache
from typing import Any, cast

import timm
import torch

from timm_vitscratch import VisionTransformer  # importing the package registers the scratch_* models
from timm_vitscratch.errors import NaFlexBatchError

TINY: dict[str, Any] = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=3)
#: the models a case may run through (one per kind of position embedding and prefix)
MODELS: dict[str, dict[str, Any]] = {
    "learned": {},
    "sincos": {"pos_embed": "sincos"},
    "registers-avg": {"reg_tokens": 1, "class_token": False, "global_pool": "avg", "no_embed_class": True},
}


@cache
def model(name: str) -> VisionTransformer:
    torch.manual_seed(0)
    return cast(VisionTransformer, timm.create_model("scratch_vit_ti16", **TINY, **MODELS[name]).eval())


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def build(spec: dict[str, Any]) -> dict[str, Any]:
    """The batch a description holds.

    ``patches``: shape and dtype (values: seeded normal, NaN at ``nan_at`` slots); ``coord``: (B, N, 2)
    int64 values as nested lists, then its ``coord_dtype`` (values wrap as ``.to`` wraps them) and an
    optional ``coord_shape`` it is cut or padded to; ``valid``: (B, N) bools, its ``valid_dtype`` and
    ``valid_shape``; ``mask``: None, ``"bool"`` / ``"float32"`` / ``"float64"`` (keys of valid tokens
    attend) or ``"wrong-shape"``; ``drop``: keys left out; ``as_list``: a key given as a list.
    """
    generator = torch.Generator().manual_seed(spec["seed"])
    shape = spec["patches_shape"]
    patches = torch.randn(shape, generator=generator)
    for b, n in spec.get("nan_at", []):
        if len(shape) >= 2 and b < shape[0] and n < shape[1]:
            patches[b, n] = float("nan")
    patches = patches.to(_dtype(spec["patches_dtype"]))
    coord = torch.tensor(spec["coord"], dtype=torch.int64).reshape(spec["batch"], spec["seq"], 2)
    coord = coord.to(_dtype(spec["coord_dtype"]))
    if spec.get("coord_shape"):
        coord = torch.zeros(spec["coord_shape"], dtype=coord.dtype)
    valid = torch.tensor(spec["valid"], dtype=torch.bool).reshape(spec["batch"], spec["seq"])
    batch: dict[str, Any] = {"patches": patches, "patch_coord": coord, "patch_valid": valid}
    mask_kind = spec.get("mask")
    if mask_kind is not None:
        prefix = model(spec["model"]).num_prefix_tokens
        keys = torch.cat([torch.ones(valid.shape[0], prefix, dtype=torch.bool), valid], dim=1)
        mask = keys[:, None, None, :].expand(-1, 1, keys.shape[1], -1)
        if mask_kind == "wrong-shape":
            mask = mask[..., 1:]
        elif mask_kind != "bool":
            mask = torch.zeros(mask.shape).masked_fill(~mask, float("-inf")).to(_dtype(mask_kind))
        batch["attn_mask"] = mask
    if spec.get("valid_shape"):
        valid = torch.ones(spec["valid_shape"], dtype=torch.bool)
    batch["patch_valid"] = valid.to(_dtype(spec["valid_dtype"]))
    for key in spec.get("drop", []):
        batch.pop(key, None)
    if spec.get("as_list") in batch:
        batch[spec["as_list"]] = batch[spec["as_list"]].tolist()
    return batch


def alone(batch: dict[str, Any], image: int, prefix: int) -> dict[str, torch.Tensor]:
    """One image as a batch of its own: its valid patches only (no padding), its part of the mask."""
    keep = batch["patch_valid"][image].bool()
    one = {key: batch[key][image][keep][None] for key in ("patches", "patch_coord")}
    one["patch_valid"] = torch.ones(1, int(keep.sum()), dtype=torch.bool)
    if batch.get("attn_mask") is not None:
        tokens = torch.cat([torch.ones(prefix, dtype=torch.bool), keep])
        one["attn_mask"] = batch["attn_mask"][image : image + 1][:, :, tokens][:, :, :, tokens]
    return one


def run_naflex(request: dict[str, Any]) -> dict[str, Any]:
    spec = request["batch"]
    net = model(spec["model"])
    try:
        batch = build(spec)
    except Exception as error:  # the description, not the model: the test's own mistake
        return {"outcome": "unbuildable", "message": repr(error)}
    with torch.no_grad():
        logits = net(batch)
        classes = TINY["num_classes"]
        images = batch["patches"].shape[0]
        if tuple(logits.shape) != (images, classes):
            return {"outcome": "inconsistent", "message": f"logits {tuple(logits.shape)} for {images} images"}
        for image in range(images):
            own = net(alone(batch, image, net.num_prefix_tokens))[0]
            if not torch.allclose(logits[image], own, atol=1e-4, rtol=1e-4, equal_nan=True):
                return {
                    "outcome": "inconsistent",
                    "message": f"image {image}: {logits[image].tolist()} in the batch, {own.tolist()} alone",
                }
            keep = batch["patch_valid"][image].bool()
            if bool(batch["patches"][image][keep].isfinite().all()) and not bool(logits[image].isfinite().all()):
                return {"outcome": "inconsistent", "message": f"image {image}: finite patches, logits {logits[image]}"}
    return {"outcome": "ok", "images": images}


def limit_memory(request: dict[str, Any]) -> dict[str, Any]:
    """Cap this process's address space at what it uses now plus ``headroom`` bytes (RLIMIT_AS)."""
    import resource

    for name in MODELS:  # built before the cap: the cap bounds the forwards
        model(name)
    with open("/proc/self/statm") as statm:
        in_use = int(statm.read().split()[0]) * resource.getpagesize()
    limit = in_use + int(request["headroom"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    return {"outcome": "ok", "limit": limit}


def answer(request: dict[str, Any]) -> dict[str, Any]:
    run = {"naflex": run_naflex, "limit_memory": limit_memory}[request["loader"]]
    try:
        return run(request)
    except Exception as error:
        return {
            "outcome": "error",
            "type": f"{type(error).__module__}.{type(error).__qualname__}",
            "ours": isinstance(error, NaFlexBatchError),
            "message": str(error),
            "traceback": "".join(traceback.format_exception(error))[-3000:],
        }


def main() -> None:
    torch.set_num_threads(1)
    print("@@ " + json.dumps({"outcome": "ready"}), flush=True)
    for line in sys.stdin:
        print("@@ " + json.dumps(answer(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
