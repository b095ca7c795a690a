"""Native resolution: timm's NaFlex batches through the Vision Transformer, packed so that padding costs nothing.

A NaFlex batch (checked and bounded by gate/naflex_batch.py) holds each image at its own size as a
sequence of flattened patches, padded to one length. timm's ``NaFlexVit`` computes every padded
position and masks it out.

Here the valid patches of all images are packed into one sequence (models/packing.py): the patch
projection, norms and MLPs run on real tokens only, attention runs per image, and each image's
output equals that image alone through the model with ``dynamic_img_size=True``. The projection is
the model's conv patch embedding read as a linear map of flattened patches (no second weight
format); position embeddings follow timm's ``NaFlexVit`` from classic weights: the learned table is
resampled to each image's grid (bicubic, antialiased, as ``resample_abs_pos_embed``), the sincos
table is computed for it.

``forward_padded`` keeps timm's padded, masked layout with shapes that do not depend on the data:
the path ``torch.export`` and ONNX take (chosen automatically while exporting).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
import torch.nn.functional as F
from timm.layers import resample_abs_pos_embed, resample_patch_embed
from torch.utils.checkpoint import checkpoint

from ..errors import NaFlexBatchError
from .intermediates import Request, assemble
from .layers import PatchDropout, sincos_2d_pos_embed
from .naflex_batch import NaFlexBatch, exporting, shape_text
from .packing import PackedSegments

if TYPE_CHECKING:  # type-only: vision_transformer imports this module
    from .vision_transformer import VisionTransformer


#: the entries of timm's NaFlex batch the model reads (the collator's ``seq_len`` is ignored)
# --- embedding: patch projection and position embeddings -----------------------------------------
@functools.lru_cache(maxsize=32)
def _resize_pinv(old: tuple[int, int], new: tuple[int, int]) -> torch.Tensor:
    """(old_h*old_w, new_h*new_w) matrix that resamples a kernel as timm's ``resample_patch_embed`` does.

    ``resample_patch_embed`` of the identity kernels is its pseudo-inverse resize matrix; kept so
    that a training step does not recompute it.
    """
    basis = torch.eye(old[0] * old[1]).reshape(-1, 1, old[0], old[1])
    return resample_patch_embed(basis, list(new)).reshape(old[0] * old[1], new[0] * new[1])


def projection_weight(model: VisionTransformer, patch_size: tuple[int, int]) -> torch.Tensor:
    """The conv patch embedding's kernel as a (D, P*P*C) linear map of flattened patches.

    Channels last (timm's default flat layout: row, column, channel) or first, as the model's
    ``patchify_channels_last`` says. Another patch size resamples the kernel (FlexiViT's
    pseudo-inverse resize, timm's ``resample_patch_embed``).
    """
    weight = model.patch_embed.proj.weight  # (D, C, ph, pw)
    if tuple(weight.shape[2:]) != tuple(patch_size):
        dim, chans = weight.shape[:2]
        pinv = _resize_pinv(tuple(weight.shape[2:]), tuple(patch_size)).to(weight.device)
        weight = (weight.reshape(dim, chans, -1).float() @ pinv).reshape(dim, chans, *patch_size).to(weight.dtype)
    if model.patchify_channels_last:
        weight = weight.permute(0, 2, 3, 1)
    return weight.reshape(weight.shape[0], -1)


def project(model: VisionTransformer, patches: torch.Tensor, patch_size: tuple[int, int]) -> torch.Tensor:
    """(..., P*P*C) flattened patches -> (..., D) patch tokens."""
    return F.linear(patches, projection_weight(model, patch_size), model.patch_embed.proj.bias)


def _patch_pos_table(model: VisionTransformer) -> torch.Tensor | None:
    """The learned table's patch part, (1, H0*W0, D); None without a learned table."""
    if model.pos_embed is None or model.sincos_pos_embed:
        return None
    return model.pos_embed[:, model.pos_prefix_tokens :]


def _prefix_tokens(model: VisionTransformer) -> torch.Tensor | None:
    """(k, D) class, distillation and register tokens, with their positions unless ``no_embed_class``."""
    parts = [t[0] for t in (model.cls_token, model.dist_token, model.reg_token) if t is not None]
    if not parts:
        return None
    prefix = torch.cat(parts)
    if model.pos_embed is not None and not model.no_embed_class:
        prefix = prefix + model.pos_embed[0, : model.num_prefix_tokens]
    return prefix


def _sincos_at(model: VisionTransformer, coord: torch.Tensor, longest: int) -> torch.Tensor:
    """Sincos positions of (..., 2) coordinates: the table's row half depends on the row only, the column
    half on the column only, so two one-axis tables of ``longest`` entries give any grid's values."""
    dim = model.embed_dim
    rows = sincos_2d_pos_embed((longest, 1), dim, device=coord.device)[0, :, : dim // 2]
    cols = sincos_2d_pos_embed((1, longest), dim, device=coord.device)[0, :, dim // 2 :]
    return torch.cat([rows[coord[..., 0]], cols[coord[..., 1]]], dim=-1)


# --- the packed path ---------------------------------------------------------------------------
class Packed(NamedTuple):
    """A NaFlex batch packed into one sequence (1, L, D): per image its prefix tokens, then its valid patches.

    Images lie longest first (``image_order``), so that images of equal length are neighbours and
    attend in one batched call.
    """

    tokens: torch.Tensor
    segments: PackedSegments
    padded_index: torch.Tensor  # (L,) position of each packed token in the padded (B * (prefix + N)) layout
    image_order: torch.Tensor  # (B,) the batch index of the packed sequence's first, second, ... image
    batch: int
    seq: int


def _layout(model: VisionTransformer, batch: NaFlexBatch) -> dict[str, Any]:
    """Index tensors and the per-image sizes the packed path needs (read from the data, so not compiled)."""
    valid, coord = batch.patch_valid, batch.patch_coord
    num_images, seq = valid.shape
    prefix = model.num_prefix_tokens
    valid_index = valid.reshape(-1).nonzero().flatten()  # (T,) into B*N, image-major
    image = torch.div(valid_index, seq, rounding_mode="floor")
    token_coord = coord.reshape(-1, 2).index_select(0, valid_index)
    grid = torch.zeros(num_images, 2, dtype=torch.long, device=valid.device)
    grid = grid.scatter_reduce(0, image[:, None].expand(-1, 2), token_coord, "amax", include_self=False) + 1
    counts = valid.sum(dim=1)
    # the packed sequence: the padded layout (prefix + N per image) without the padding, longest image first
    image_order = torch.sort(counts, descending=True, stable=True).indices
    keep = torch.cat([valid.new_ones(num_images, prefix), valid], dim=1)
    rows, columns = keep.index_select(0, image_order).nonzero(as_tuple=True)
    padded_index = image_order[rows] * (prefix + seq) + columns
    # where each packed token comes from: rows [0, B*prefix) are prefix tokens, then the T patch tokens
    source = torch.empty(num_images, prefix + seq, dtype=torch.long, device=valid.device)
    source[:, :prefix] = torch.arange(num_images * prefix, device=valid.device).view(num_images, prefix)
    patch_source = torch.zeros(num_images * seq, dtype=torch.long, device=valid.device)
    patch_source[valid_index] = num_images * prefix + torch.arange(valid_index.numel(), device=valid.device)
    source[:, prefix:] = patch_source.view(num_images, seq)
    return dict(
        valid_index=valid_index,
        image=image,
        token_coord=token_coord,
        grid=grid.tolist(),
        grid_tensor=grid,
        lengths=(counts + prefix).index_select(0, image_order).tolist(),
        padded_index=padded_index,
        image_order=image_order,
        order=source.reshape(-1).index_select(0, padded_index),
    )


def _learned_positions(
    model: VisionTransformer, table: torch.Tensor, layout: dict[str, Any], dtype: torch.dtype
) -> torch.Tensor:
    """(T, D) learned positions: the table resampled once per distinct grid in the batch, then gathered."""
    old = model.patch_embed.grid_size
    grids = sorted(set(map(tuple, layout["grid"])))
    tables, offsets, start = [], {}, 0
    for height, width in grids:
        tables.append(
            resample_abs_pos_embed(table, new_size=[height, width], old_size=list(old), num_prefix_tokens=0)[0]
        )
        offsets[(height, width)] = start
        start += height * width
    grid = layout["grid_tensor"]
    image_offset = torch.tensor([offsets[tuple(g)] for g in layout["grid"]], device=grid.device)
    image, coord = layout["image"], layout["token_coord"]
    index = image_offset[image] + coord[:, 0] * grid[image, 1] + coord[:, 1]
    return torch.cat(tables).index_select(0, index).to(dtype)


def _drop_patches(model: VisionTransformer, prob: float, layout: dict[str, Any], packed: torch.Tensor, seq: int):
    """Patch dropout in training: prefix tokens stay; each image keeps a random ``1 - prob`` share of its
    patches (at least one), as ``PatchDropout`` does for one image."""
    prefix, padded_index = model.num_prefix_tokens, layout["padded_index"]
    image = layout["image"]
    counts = torch.bincount(image, minlength=len(layout["lengths"]))
    keep_count = (counts.double() * (1.0 - prob)).floor().long().clamp(min=1)
    shuffled = torch.argsort(image.double() + 0.5 * torch.rand(image.shape, dtype=torch.float64, device=image.device))
    rank = torch.empty_like(shuffled)
    rank[shuffled] = (
        torch.arange(shuffled.numel(), device=image.device) - (torch.cumsum(counts, 0) - counts)[image[shuffled]]
    )
    is_prefix = padded_index % (prefix + seq) < prefix
    keep = is_prefix.clone()
    patch_rows = layout["order"][~is_prefix] - len(layout["lengths"]) * prefix  # packed patch slots -> token rows
    keep[~is_prefix] = (rank < keep_count[image])[patch_rows]
    owner = torch.div(padded_index, prefix + seq, rounding_mode="floor")
    lengths = torch.bincount(owner[keep], minlength=len(layout["lengths"]))
    return packed[:, keep], lengths.index_select(0, layout["image_order"]).tolist(), padded_index[keep]


@torch.compiler.disable  # per-image grids and lengths are data; the blocks after it compile shape-generically
def pack(model: VisionTransformer, batch: NaFlexBatch) -> Packed:
    """Embed the valid patches and pack them, with each image's prefix tokens, into one sequence."""
    layout = _layout(model, batch)
    patches = batch.patches.reshape(-1, batch.patches.shape[-1]).index_select(0, layout["valid_index"])
    tokens = project(model, patches, batch.patch_size)
    table = _patch_pos_table(model)
    if table is not None:
        tokens = tokens + _learned_positions(model, table, layout, tokens.dtype)
    elif model.pos_embed is not None:  # sincos
        longest = max(max(g) for g in layout["grid"])
        tokens = tokens + _sincos_at(model, layout["token_coord"], longest).to(tokens.dtype)
    num_images, seq = batch.patch_valid.shape
    prefix = _prefix_tokens(model)
    rows = tokens if prefix is None else torch.cat([prefix.to(tokens.dtype).repeat(num_images, 1), tokens])
    packed = rows.index_select(0, layout["order"])[None]
    lengths, padded_index = layout["lengths"], layout["padded_index"]
    if model.training and isinstance(model.patch_drop, PatchDropout):
        packed, lengths, padded_index = _drop_patches(model, model.patch_drop.prob, layout, packed, seq)
    packed = model.norm_pre(model.pos_drop(packed))
    masks = (
        None
        if batch.attn_mask is None
        else _image_masks(batch.attn_mask, padded_index, lengths, model.num_prefix_tokens + seq)
    )
    return Packed(packed, PackedSegments(lengths, masks), padded_index, layout["image_order"], num_images, seq)


def _image_masks(
    attn_mask: torch.Tensor, padded_index: torch.Tensor, lengths: list[int], tokens: int
) -> list[torch.Tensor]:
    """Each image's part of a (B, 1 | heads, prefix + N, prefix + N) mask, rows and columns of its kept tokens."""
    masks = []
    for positions in padded_index.split(lengths):
        image = int(positions[0]) // tokens
        local = positions - image * tokens
        masks.append(attn_mask[image : image + 1][:, :, local][:, :, :, local])
    return masks


def run_blocks(
    model: VisionTransformer, packed: Packed, blocks=None, take: set | None = None, norm: bool = False
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The blocks on the packed sequence (each image attends to itself); optionally the outputs at ``take``."""
    x, segments = packed.tokens, packed.segments
    kept = []
    for index, block in enumerate(model.blocks if blocks is None else blocks):
        if model.grad_checkpointing and torch.is_grad_enabled():
            x = checkpoint(block, x, segments, use_reentrant=False)
        else:
            x = block(x, segments)
        if take is not None and index in take:
            kept.append(model.norm(x) if norm else x)
    return x, kept


def unpack(packed: Packed, x: torch.Tensor, prefix: int) -> torch.Tensor:
    """(1, L, D) packed tokens -> (B, prefix + N, D) in the batch's padded layout, zeros at padding."""
    rows = packed.batch * (prefix + packed.seq)
    out = x.new_zeros(rows, x.shape[-1]).index_copy(0, packed.padded_index, x[0])
    return out.view(packed.batch, prefix + packed.seq, -1)


def _cat_outputs(outputs: list[Any]) -> Any:
    if isinstance(outputs[0], tuple):  # a distilled model's (head, head_dist) in training
        return tuple(torch.cat(parts) for parts in zip(*outputs, strict=False))
    return torch.cat(outputs)


@torch.compiler.disable  # one call per image
def head_per_image(
    model: VisionTransformer,
    x: torch.Tensor,
    lengths: list[int],
    pre_logits: bool = False,
    image_order: torch.Tensor | None = None,
):
    """The model's own ``forward_head`` on each image's tokens (1, prefix + n_i, D): pooling sees valid tokens only.

    ``image_order``: the batch index of each run, when the runs are not in batch order.
    """
    outputs = [model.forward_head(tokens, pre_logits=pre_logits) for tokens in x.split(lengths, dim=1)]
    if image_order is not None:
        placed: list[Any] = [None] * len(outputs)
        for output, image in zip(outputs, image_order.tolist(), strict=False):
            placed[image] = output
        outputs = placed
    return _cat_outputs(outputs)


def forward(model: VisionTransformer, batch: NaFlexBatch) -> Any:
    """Logits (B, classes) of a NaFlex batch, packed."""
    if exporting() or not model.naflex_packed:
        return forward_padded(model, batch)
    packed = pack(model, batch)
    x, _ = run_blocks(model, packed)
    x = model.norm(x)
    if model.global_pool == "" and model.attn_pool is None:  # per-token outputs: in the batch's layout
        return model.forward_head(unpack(packed, x, model.num_prefix_tokens))
    return head_per_image(model, x, packed.segments.lengths, image_order=packed.image_order)


def forward_features(model: VisionTransformer, batch: NaFlexBatch) -> dict[str, torch.Tensor]:
    """timm's NaFlex ``forward_features``: ``{'patches': (B, prefix + N, D), 'patch_valid': (B, N)}`` (zeros at padding)."""
    if exporting() or not model.naflex_packed:
        keep = torch.cat(
            [batch.patch_valid.new_ones(batch.patch_valid.shape[0], model.num_prefix_tokens), batch.patch_valid], dim=1
        )
        tokens = features_padded(model, batch).masked_fill(~keep[..., None], 0.0)
        return {"patches": tokens, "patch_valid": batch.patch_valid}
    packed = pack(model, batch)
    x, _ = run_blocks(model, packed)
    return {"patches": unpack(packed, model.norm(x), model.num_prefix_tokens), "patch_valid": batch.patch_valid}


def forward_head(model: VisionTransformer, x: torch.Tensor, patch_valid: torch.Tensor, pre_logits: bool = False):
    """Head on padded features (B, prefix + N, D) with their ``patch_valid``: each image's valid tokens only."""
    if tuple(patch_valid.shape) != (x.shape[0], x.shape[1] - model.num_prefix_tokens):
        raise NaFlexBatchError(
            "patch_valid",
            f"expected (batch, N) = ({x.shape[0]}, {x.shape[1] - model.num_prefix_tokens}) "
            f"for features {shape_text(x)}, got {shape_text(patch_valid)}",
        )
    if exporting() or (model.global_pool == "" and model.attn_pool is None):
        return _head_padded(model, x, patch_valid.bool(), pre_logits)
    prefix = model.num_prefix_tokens
    keep = torch.cat([patch_valid.new_ones(x.shape[0], prefix, dtype=torch.bool), patch_valid.bool()], dim=1)
    lengths = keep.sum(dim=1).tolist()
    return head_per_image(model, x[keep][None], lengths, pre_logits)


def forward_intermediates(model: VisionTransformer, batch: NaFlexBatch, request: Request):
    """timm's NaFlex ``forward_intermediates``: NLC block outputs in the batch's padded layout (grids vary per image)."""
    if request.output_fmt != "NLC":
        raise NaFlexBatchError(
            "patches",
            "forward_intermediates of a NaFlex batch gives tokens only: pass "
            "output_fmt='NLC' (each image has its own grid; patch_coord places them)",
        )
    prefix = model.num_prefix_tokens
    packed = pack(model, batch)
    blocks = model.blocks[: request.max_index + 1] if request.stop_early else model.blocks
    x, kept = run_blocks(model, packed, blocks, set(request.indices), request.norm)
    padded = [unpack(packed, y, prefix) for y in kept]
    return assemble(
        request,
        [y[:, prefix:] for y in padded],
        [y[:, :prefix] for y in padded],
        lambda: unpack(packed, model.norm(x), prefix),
        extra={"patch_valid": batch.patch_valid},
    )


# --- the padded path (torch.export, ONNX) ----------------------------------------------------------
def _cubic_aa(x: torch.Tensor) -> torch.Tensor:
    """The antialiasing bicubic filter of torch's ``interpolate(..., antialias=True)`` (Keys, a = -0.5)."""
    x = x.abs()
    a = -0.5
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return torch.where(x < 1, near, torch.where(x < 2, far, torch.zeros_like(x)))


def resize_weights(position: torch.Tensor, out_size: torch.Tensor, in_size: int) -> torch.Tensor:
    """(..., in_size) weights with which antialiased bicubic resizing from ``in_size`` to ``out_size``
    samples output ``position`` (tensors of equal shape): ``resample_abs_pos_embed``'s kernel, computed
    from the data so that shapes stay fixed for export."""
    scale = in_size / out_size.double()
    stretch = scale.clamp(min=1.0)
    center = (position.double() + 0.5) * scale
    taps = torch.arange(in_size, dtype=torch.float64, device=position.device)
    weights = _cubic_aa((taps + 0.5 - center[..., None]) / stretch[..., None])
    return (weights / weights.sum(dim=-1, keepdim=True)).float()


def _padded_positions(model: VisionTransformer, batch: NaFlexBatch, dtype: torch.dtype) -> torch.Tensor | None:
    """(B, N, D) positions of every patch slot, from shapes fixed by the batch (no per-grid resampling calls)."""
    coord = batch.patch_coord * batch.patch_valid[..., None]
    table = _patch_pos_table(model)
    if table is None and model.pos_embed is None:
        return None
    if table is None:
        return _sincos_at(model, coord, batch.patches.shape[1]).to(dtype)
    grid = coord.amax(dim=1, keepdim=True).expand_as(coord) + 1  # (B, N, 2) each slot's image grid
    height, width = model.patch_embed.grid_size
    rows = resize_weights(coord[..., 0], grid[..., 0], height)  # (B, N, H0)
    cols = resize_weights(coord[..., 1], grid[..., 1], width)  # (B, N, W0)
    weights = (rows[..., :, None] * cols[..., None, :]).flatten(2)  # (B, N, H0*W0)
    return (weights @ table[0].float()).to(dtype)


def features_padded(model: VisionTransformer, batch: NaFlexBatch) -> torch.Tensor:
    """(B, prefix + N, D) final tokens on timm's padded layout; padding is masked out of attention as keys."""
    tokens = project(model, batch.patches, batch.patch_size)
    positions = _padded_positions(model, batch, tokens.dtype)
    if positions is not None:
        tokens = tokens + positions
    num_images = tokens.shape[0]
    prefix = _prefix_tokens(model)
    if prefix is not None:
        tokens = torch.cat([prefix.to(tokens.dtype).expand(num_images, -1, -1), tokens], dim=1)
    x = model.norm_pre(model.pos_drop(tokens))
    attn_mask = batch.attn_mask
    if attn_mask is None:  # keys only: padded queries see real keys, so no row is all -inf (no NaN)
        keep = torch.cat([batch.patch_valid.new_ones(num_images, model.num_prefix_tokens), batch.patch_valid], dim=1)
        attn_mask = keep[:, None, None, :]
    for block in model.blocks:
        x = block(x, attn_mask)
    return model.norm(x)


def _head_padded(model: VisionTransformer, x: torch.Tensor, valid: torch.Tensor, pre_logits: bool = False):
    """The model's head with pooling over valid tokens, on the padded layout (shapes fixed for export)."""
    prefix = model.num_prefix_tokens
    if model.distilled or (model.global_pool in ("token", "") and model.attn_pool is None):
        return model.forward_head(x, pre_logits=pre_logits)  # reads the prefix tokens (or every token)
    keep = torch.cat([valid.new_ones(x.shape[0], prefix), valid], dim=1) if model.pool_include_prefix else valid
    tokens = x if model.pool_include_prefix else x[:, prefix:]
    if model.attn_pool is not None:
        pooled = model.attn_pool(tokens, keep[:, None, None, :])
    else:
        weight = keep[..., None].to(tokens.dtype)
        mean = (tokens * weight).sum(dim=1) / weight.sum(dim=1)
        peak = tokens.masked_fill(~keep[..., None], torch.finfo(tokens.dtype).min).amax(dim=1)
        pooled = {"avg": mean, "max": peak, "avgmax": 0.5 * (peak + mean)}[model.global_pool]
    pooled = model.head_drop(model.pre_logits(model.fc_norm(pooled)))
    return pooled if pre_logits else model.head(pooled)


def forward_padded(model: VisionTransformer, batch: NaFlexBatch):
    """Logits on timm's padded, masked layout: the same outputs as the packed path, with data-independent shapes."""
    return _head_padded(model, features_padded(model, batch), batch.patch_valid)
