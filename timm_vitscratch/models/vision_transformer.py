"""The Vision Transformer: timm's ``VisionTransformer`` options and model hooks, plus DeiT distillation
and ImageNet-21k "has_logits"."""

import itertools
import math
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import torch
from timm.layers import resample_abs_pos_embed, use_fused_attn
from torch import nn
from torch.jit import Final
from torch.utils.checkpoint import checkpoint

from ..private_api import record_input_size
from . import naflex
from .checkpoint_filter import load_pretrained, remap_on_load
from .layers import (
    WEIGHT_INITS,
    ActLayer,
    AttentionPool,
    Block,
    PatchDropout,
    PatchEmbed,
    check_attn_impl,
    init_layer_tensor,
    norm_layer_eps,
    normal_init_,
    resolve_act_layer,
    sincos_2d_pos_embed,
)

GLOBAL_POOLS = ("token", "avg", "avgmax", "max", "map", "")
POS_EMBEDS = ("learn", "sincos", "none", "")
#: Tensors the model holds itself rather than through a submodule (initialised by the model, no weight decay).
OWN_TENSORS = ("pos_embed", "cls_token", "reg_token", "dist_token")
#: Byte alignment of PyTorch's CPU allocator (c10's ``gAlignment``); loaded tensors are kept at it.
CPU_ALIGNMENT = 64


def _default_device() -> torch.device:
    """The device factory functions use now (honours ``with torch.device(...)``)."""
    return torch.empty(0).device


def _take_indices(num_blocks: int, indices: int | list[int] | None) -> tuple[list[int], int]:
    """timm's index convention: None = all blocks, int n = the last n, a list = those (negative ok)."""
    if indices is None:
        indices = num_blocks
    if isinstance(indices, int):
        if not 0 < indices <= num_blocks:
            raise ValueError(f"indices={indices} must be between 1 and the number of blocks ({num_blocks})")
        taken = list(range(num_blocks - indices, num_blocks))
    else:
        taken = []
        for index in indices:
            if not -num_blocks <= index < num_blocks:
                raise ValueError(f"block index {index} is out of range for {num_blocks} blocks")
            taken.append(index % num_blocks)
    return taken, max(taken)


def _is_fx_proxy(x: torch.Tensor) -> bool:
    """True while ``torch.fx.symbolic_trace`` (and timm's / torchvision's feature extractors) trace the model."""
    if torch.jit.is_scripting():
        return False
    return isinstance(x, torch.fx.Proxy)


@torch.fx.wrap
def _resampled_pos_embed(
    pos_embed: torch.Tensor, height: int, width: int, old_size: tuple[int, int], num_prefix_tokens: int
) -> torch.Tensor:
    """The learned table bicubically resampled to a (height, width) patch grid (timm's resampling)."""
    return resample_abs_pos_embed(
        pos_embed, new_size=[height, width], old_size=[old_size[0], old_size[1]], num_prefix_tokens=num_prefix_tokens
    )


@torch.fx.wrap
def _sincos_pos_embed(x: torch.Tensor, height: int, width: int, dim: int, num_prefix_tokens: int) -> torch.Tensor:
    """The fixed sincos table for a (height, width) patch grid, on ``x``'s device and dtype."""
    return sincos_2d_pos_embed((height, width), dim, num_prefix_tokens, device=x.device).to(x.dtype)


class VisionTransformer(nn.Module):
    """ViT of Dosovitskiy et al. 2020 with timm's options and DeiT's optional distillation token.

    The constructor takes timm's ``VisionTransformer`` arguments with timm's names, defaults and
    meaning (docs/models.md lists them), plus: ``representation_size`` (the ImageNet-21k
    "pre-logits" Linear + Tanh before the head), ``distilled`` (a distillation token and
    ``head_dist``; in training with ``distilled_training`` the forward returns
    ``(head, head_dist)``, otherwise their mean), ``pos_embed='sincos'`` (a fixed table),
    ``attn_impl`` (``'sdpa'`` or ``'eager'``; default: timm's ``use_fused_attn()``),
    ``norm_eps``, ``pooled_forward``, ``patchify_channels_last`` (the flat layout of NaFlex patches:
    row, column, channel as timm's loader makes them; False = channel, row, column) and timm's
    ``device`` / ``dtype`` factory arguments.

    NaFlex batches (``model(batch_dict)``, docs/native_resolution.md) run packed: models/naflex.py.

    ``forward`` computes what timm's does, module by module, so forward and backward hooks see
    timm's tensors. ``pooled_forward=True`` (or ``set_pooled_forward()``) opts into a faster
    forward: when the head reads only the class (and distillation) token, the last block runs for
    those tokens alone. Logits and gradients stay the same; hooks on the last block and the final
    norm then see only those tokens, and hooks on ``blocks`` do not fire.
    """

    dynamic_img_size: Final[bool]

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        patch_size: int | tuple[int, int] = 16,
        in_chans: int = 3,
        num_classes: int = 1000,
        global_pool: str = "token",
        embed_dim: int = 768,
        depth: int = 12,
        num_heads: int = 12,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        qk_norm: bool = False,
        proj_bias: bool = True,
        init_values: float | None = None,
        class_token: bool = True,
        pos_embed: str = "learn",
        no_embed_class: bool = False,
        reg_tokens: int = 0,
        pre_norm: bool = False,
        final_norm: bool = True,
        fc_norm: bool | None = None,
        pool_include_prefix: bool = False,
        dynamic_img_size: bool = False,
        dynamic_img_pad: bool = False,
        drop_rate: float = 0.0,
        pos_drop_rate: float = 0.0,
        patch_drop_rate: float = 0.0,
        proj_drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        weight_init: str = "",
        norm_layer: Any | None = None,
        act_layer: ActLayer | None = None,
        qk_scale: float | None = None,
        representation_size: int | None = None,
        distilled: bool = False,
        distilled_training: bool = False,
        attn_impl: str | None = None,
        norm_eps: float = 1e-6,
        pooled_forward: bool = False,
        patchify_channels_last: bool = True,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self._check_args(
            num_classes,
            depth,
            embed_dim,
            num_heads,
            pos_embed,
            global_pool,
            class_token,
            distilled,
            representation_size,
            weight_init,
            reg_tokens,
        )
        use_fc_norm = global_pool in ("avg", "avgmax", "max") if fc_norm is None else fc_norm
        # timm's norm_layer (a LayerNorm kind) sets the eps of every norm; norm_eps says the same thing
        if norm_layer is not None:
            layer_eps = norm_layer_eps(norm_layer)
            if norm_eps not in (1e-6, layer_eps):
                raise ValueError(f"norm_layer has eps {layer_eps:g} but norm_eps is {norm_eps:g}; pass one of them")
            norm_eps = layer_eps
        mlp_act = resolve_act_layer(act_layer)
        self.num_classes = num_classes
        self.global_pool = global_pool
        self.embed_dim = self.num_features = embed_dim
        self.head_hidden_size = representation_size or embed_dim
        self.distilled = distilled
        self.distilled_training = distilled and distilled_training
        self.in_chans = in_chans
        self.has_class_token = class_token
        self.num_reg_tokens = reg_tokens
        self.num_prefix_tokens = int(class_token) + int(distilled) + reg_tokens
        self.no_embed_class = no_embed_class
        self.pool_include_prefix = pool_include_prefix
        self.dynamic_img_size = dynamic_img_size
        self.pooled_forward = pooled_forward
        # NaFlex batches: the flat patch layout, and packed (True) or timm's padded layout (export takes that)
        self.patchify_channels_last = patchify_channels_last
        self.naflex_packed = True
        self.weight_init_mode = weight_init
        self.grad_checkpointing = False
        # where a model built on ``meta`` puts its tensors once loaded (timm's device= argument)
        self.load_device = None  # a torch.device or None
        self.attn_impl = check_attn_impl(attn_impl or ("sdpa" if use_fused_attn() else "eager"))

        # CLIP-style pre-norm models have no patch bias (timm's convention)
        # the patch grid stays NHWC with dynamic_img_size (positions are resampled to it), as in timm
        self.patch_embed = PatchEmbed(
            img_size,
            patch_size,
            in_chans,
            embed_dim,
            bias=not pre_norm,
            strict_img_size=not dynamic_img_size,
            dynamic_img_pad=dynamic_img_pad,
            output_fmt="NHWC" if dynamic_img_size else None,
        )
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if class_token else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if distilled else None
        self.reg_token = nn.Parameter(torch.zeros(1, reg_tokens, embed_dim)) if reg_tokens else None
        self.sincos_pos_embed = pos_embed == "sincos"
        if pos_embed == "learn":
            self.pos_embed = nn.Parameter(torch.zeros(1, self._pos_embed_len(), embed_dim))
        elif pos_embed == "sincos":
            self.register_buffer("pos_embed", self._sincos_table(), persistent=False)
        else:
            self.pos_embed = None
        self.pos_drop = nn.Dropout(pos_drop_rate)
        self.patch_drop = (
            PatchDropout(patch_drop_rate, self.num_prefix_tokens) if patch_drop_rate > 0 else nn.Identity()
        )
        self.norm_pre = nn.LayerNorm(embed_dim, eps=norm_eps) if pre_norm else nn.Identity()

        # stochastic depth rises linearly from 0 at the first block to drop_path_rate at the last
        rates = [drop_path_rate * i / max(depth - 1, 1) for i in range(depth)]
        self.blocks = nn.Sequential(
            *[
                Block(
                    embed_dim,
                    num_heads,
                    mlp_ratio,
                    qkv_bias,
                    qk_scale,
                    proj_drop_rate,
                    attn_drop_rate,
                    rate,
                    self.attn_impl,
                    norm_eps,
                    qk_norm,
                    proj_bias,
                    init_values,
                    mlp_act,
                )
                for rate in rates
            ]
        )
        self.norm = nn.LayerNorm(embed_dim, eps=norm_eps) if final_norm and not use_fc_norm else nn.Identity()
        # timm's feature-extraction wrappers read this: every block is a feature level
        self.feature_info = [
            dict(module=f"blocks.{i}", num_chs=embed_dim, reduction=max(self.patch_embed.patch_size))
            for i in range(depth)
        ]

        self.attn_pool = (
            AttentionPool(
                embed_dim, num_heads, mlp_ratio, norm_eps=norm_eps, attn_impl=self.attn_impl, act_layer=mlp_act
            )
            if global_pool == "map"
            else None
        )
        self.fc_norm = nn.LayerNorm(embed_dim, eps=norm_eps) if final_norm and use_fc_norm else nn.Identity()
        if representation_size:
            self.pre_logits = nn.Sequential(OrderedDict(fc=nn.Linear(embed_dim, representation_size), act=nn.Tanh()))
        else:
            self.pre_logits = nn.Identity()
        self.head_drop = nn.Dropout(drop_rate)
        self.head = self._make_head(num_classes)
        self.head_dist = self._make_head(num_classes) if distilled else None
        self.init_weights()
        # torchvision, transformers and JAX state dicts load too, remapped with the converter's key maps
        self.register_load_state_dict_pre_hook(remap_on_load)
        if device is not None or dtype is not None:
            # timm's factory arguments (its distillation teacher passes device=): built and
            # initialised in float32 on the default device, then moved; to build without
            # allocating, construct inside ``with torch.device("meta"):`` instead
            self.to(device=device, dtype=dtype)

    @staticmethod
    def _check_args(
        num_classes,
        depth,
        embed_dim,
        num_heads,
        pos_embed,
        global_pool,
        class_token,
        distilled,
        representation_size,
        weight_init,
        reg_tokens,
    ) -> None:
        if num_classes < 0:
            raise ValueError(f"num_classes must be >= 0 (0 = no classifier), got {num_classes}")
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        if num_heads < 1 or embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} must be divisible by num_heads {num_heads}")
        if pos_embed not in POS_EMBEDS:
            raise ValueError(f"pos_embed must be one of {POS_EMBEDS}, got {pos_embed!r}")
        if weight_init not in WEIGHT_INITS:
            raise ValueError(f"weight_init must be one of {WEIGHT_INITS}, got {weight_init!r}")
        if reg_tokens < 0:
            raise ValueError(f"reg_tokens must be >= 0, got {reg_tokens}")
        if distilled and representation_size:
            raise ValueError("representation_size (has_logits) cannot be combined with distilled=True")
        if distilled and not class_token:
            raise ValueError("distilled=True needs the class token (class_token=True)")
        _check_global_pool(global_pool, distilled, class_token)

    def _pos_embed_len(self) -> int:
        prefix = 0 if self.no_embed_class else self.num_prefix_tokens
        return self.patch_embed.num_patches + prefix

    def _sincos_table(self, device: torch.device | None = None) -> torch.Tensor:
        prefix = 0 if self.no_embed_class else self.num_prefix_tokens
        return sincos_2d_pos_embed(self.patch_embed.grid_size, self.embed_dim, prefix, device=device)

    def _make_head(self, num_classes: int) -> nn.Module:
        return nn.Linear(self.head_hidden_size, num_classes) if num_classes > 0 else nn.Identity()

    # --- initialisation ----------------------------------------------------------------------
    def init_weights(self, mode: str | None = None) -> None:
        """Initialise every tensor by the ``weight_init`` scheme (timm's names; default: this model's)."""
        if mode is not None:
            self.weight_init_mode = mode
        for module_name, module in self.named_modules():
            for name, tensor in itertools.chain(
                module.named_parameters(recurse=False), module.named_buffers(recurse=False)
            ):
                self._init_tensor(module_name, module, name, tensor)

    def _init_tensor(self, module_name: str, module: nn.Module, name: str, tensor: torch.Tensor) -> None:
        if tensor.is_meta:  # no data to fill: materialize() calls this again once it has storage
            return
        if module is not self:
            head_bias = -math.log(self.num_classes) if "nlhb" in self.weight_init_mode and self.num_classes else 0.0
            init_layer_tensor(module, name, tensor, self.weight_init_mode, module_name, head_bias)
            return
        with torch.no_grad():
            if name == "pos_embed" and not isinstance(tensor, nn.Parameter):
                tensor.copy_(self._sincos_table(torch.device("cpu")))  # tiny, computed in float64 on the CPU
            elif name in ("cls_token", "reg_token"):
                tensor.normal_(0.0, 1e-6)
            else:  # learned pos_embed, dist_token
                normal_init_(tensor, std=0.02)

    # --- construction without storage (fast cold start) --------------------------------------
    def has_meta_tensors(self) -> bool:
        """True while any parameter or buffer is still on the ``meta`` device (holds no data)."""
        return any(t.is_meta for t in itertools.chain(self.parameters(), self.buffers()))

    def materialize(self, device: str | torch.device | None = None) -> list[str]:
        """Give every tensor still on ``meta`` storage on ``device`` and initialise it; return their names.

        Tensors that already hold data are left untouched, so after a partial load (a new head,
        an adapted stem) only what the checkpoint did not provide is initialised. The fixed
        sincos position table is recomputed.
        """
        device = torch.device(device) if device is not None else _default_device()
        done = []
        for module_name, module in self.named_modules():
            for name, tensor in itertools.chain(
                module.named_parameters(recurse=False), module.named_buffers(recurse=False)
            ):
                if not tensor.is_meta:
                    continue
                fresh = torch.empty_like(tensor, device=device)
                if isinstance(tensor, nn.Parameter):
                    fresh = nn.Parameter(fresh, requires_grad=tensor.requires_grad)
                setattr(module, name, fresh)
                self._init_tensor(module_name, module, name, fresh)
                done.append(f"{module_name}.{name}" if module_name else name)
        return done

    @torch.jit.ignore
    def load_pretrained(self, checkpoint_path: str, prefix: str = "") -> None:
        """timm's hook for files ``torch.load`` cannot read (``load_checkpoint`` of a JAX ``.npz``)."""
        load_pretrained(self, checkpoint_path, prefix)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False):
        """``nn.Module.load_state_dict``; a model built on ``meta`` takes the tensors instead of copying.

        Copying into ``meta`` would load nothing, so such a model loads by assignment (tensors in
        the checkpoint's dtype are cast to the model's), then initialises whatever the checkpoint
        did not hold (``materialize``). With safetensors' memory-mapped tensors this loads without
        a copy; pages are read when first used.
        """
        if not self.has_meta_tensors():
            return super().load_state_dict(state_dict, strict=strict, assign=assign)
        own = dict(itertools.chain(self.named_parameters(), self.named_buffers()))
        cast = {}
        for key, value in state_dict.items():
            target = own.get(key)
            if target is not None and value.is_floating_point() and value.dtype != target.dtype:
                value = value.to(target.dtype)
            elif value.device.type == "cpu" and value.data_ptr() % CPU_ALIGNMENT:
                # a memory-mapped tensor at an odd file offset: CPU kernels take other code paths for
                # unaligned data and round differently in the last bit; an aligned copy keeps the
                # logits bit-identical to a model that copied the checkpoint into its own tensors
                value = value.clone()
            cast[key] = value
        result = super().load_state_dict(cast, strict=strict, assign=True)
        wanted = self.load_device
        loaded = next((t.device for t in itertools.chain(self.parameters(), self.buffers()) if not t.is_meta), None)
        self.materialize(wanted or loaded)
        if wanted is not None and wanted.type != "meta":
            self.to(wanted)
        return result

    # --- timm hooks ---------------------------------------------------------------------------
    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        return set(OWN_TENSORS)

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        """Parameter groups for timm's layer-wise LR decay: stem, one group per block, then the rest."""
        return dict(
            stem=r"^cls_token|^reg_token|^dist_token|^pos_embed|^patch_embed|^norm_pre",
            blocks=r"^blocks\.(\d+)" if coarse else [(r"^blocks\.(\d+)", None), (r"^norm", (99999,))],
        )

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    @torch.jit.ignore
    def get_patch_size(self) -> tuple[int, int]:
        """The (height, width) patch size; timm's train.py reads it to patchify NaFlex batches."""
        return self.patch_embed.patch_size

    @torch.jit.ignore
    def set_distilled_training(self, enable: bool = True) -> None:
        """Distilled models only: training forward returns ``(head, head_dist)`` when enabled."""
        if enable and not self.distilled:
            raise ValueError(
                "set_distilled_training(True) needs a model with a distillation token and "
                "head_dist (distilled=True, e.g. scratch_deit_ti16_distilled)"
            )
        self.distilled_training = enable

    @torch.jit.ignore
    def set_attn_impl(self, attn_impl: str) -> None:
        """Switch every attention layer between ``'sdpa'`` and ``'eager'`` (timm's ``fused_attn`` on or off)."""
        self.attn_impl = check_attn_impl(attn_impl)
        for module in self.modules():
            if hasattr(module, "fused_attn"):
                module.fused_attn = attn_impl == "sdpa"

    @torch.jit.ignore
    def set_pooled_forward(self, enable: bool = True) -> None:
        """Opt into (or out of) the pooled-token forward; see docs/models.md, "The pooled-token forward"."""
        self.pooled_forward = enable

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module | tuple[nn.Module, nn.Module]:
        return (self.head, self.head_dist) if self.head_dist is not None else self.head

    @torch.jit.ignore
    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """Replace the classifier(s) with fresh, trainable ones for ``num_classes`` (0 = features only).

        The new head sits on the model's device and dtype and in its train/eval mode. A new
        ``global_pool`` other than ``'map'`` drops the attention-pooling head; ``'map'`` needs one.
        """
        if num_classes < 0:
            raise ValueError(f"num_classes must be >= 0, got {num_classes}")
        if global_pool is not None:
            _check_global_pool(global_pool, self.distilled, self.has_class_token)
            if global_pool == "map" and self.attn_pool is None:
                raise ValueError("global_pool='map' needs the attention-pooling head: build the model with it")
            if global_pool != "map":
                self.attn_pool = None
            self.global_pool = global_pool
        self.num_classes = num_classes
        reference = self.patch_embed.proj.weight
        heads = ["head", "head_dist"] if self.distilled else ["head"]
        for name in heads:
            head = self._make_head(num_classes)
            head.to(device=reference.device, dtype=reference.dtype).train(self.training)
            for param_name, param in head.named_parameters():
                init_layer_tensor(head, param_name, param, self.weight_init_mode, name)
            setattr(self, name, head)

    @torch.jit.ignore
    def set_input_size(
        self, img_size: int | tuple[int, int] | None = None, patch_size: int | tuple[int, int] | None = None
    ) -> None:
        """New input resolution and/or patch size, as timm does it.

        The learned position table is resampled (bicubic) to the new patch grid, the sincos table
        recomputed, and a new patch size resamples the patch projection. Device, dtype,
        ``requires_grad`` and train/eval are kept.
        """
        old_grid = self.patch_embed.grid_size
        self.patch_embed.set_input_size(img_size, patch_size)
        new_grid = self.patch_embed.grid_size
        if isinstance(self.pos_embed, nn.Parameter) and new_grid != old_grid:
            prefix = 0 if self.no_embed_class else self.num_prefix_tokens
            table = resample_abs_pos_embed(
                self.pos_embed.detach(), new_size=list(new_grid), old_size=list(old_grid), num_prefix_tokens=prefix
            )
            self.pos_embed = nn.Parameter(table, requires_grad=self.pos_embed.requires_grad)
        elif self.pos_embed is not None and self.sincos_pos_embed:
            self.pos_embed = self._sincos_table(self.pos_embed.device).to(self.pos_embed.dtype)
        if patch_size is not None:
            for info in self.feature_info:
                info["reduction"] = max(self.patch_embed.patch_size)
        # timm's record of the size the model now takes (read by timm.models.get_model_input_config)
        record_input_size(
            self, self.patch_embed.img_size, patch_size=None if patch_size is None else self.patch_embed.patch_size
        )

    # --- forward ------------------------------------------------------------------------------
    def _pos_embed(self, x: torch.Tensor) -> torch.Tensor:
        """Patch tokens -> (B, prefix + N, D) tokens with positions, in timm's order.

        Takes what ``patch_embed`` returns: (B, N, D) tokens, or with ``dynamic_img_size`` the
        (B, H, W, D) patch grid, whose size the position table is resampled to.
        """
        if self.dynamic_img_size:
            batch, height, width, dim = x.shape
            x = x.reshape(batch, height * width, dim)
        else:
            batch, _, dim = x.shape
            height, width = self.patch_embed.grid_size
        prefix = 0 if self.no_embed_class else self.num_prefix_tokens
        pos_embed = self.pos_embed
        if pos_embed is not None and self.dynamic_img_size:
            if self.sincos_pos_embed:
                pos_embed = _sincos_pos_embed(x, height, width, dim, prefix)
            else:
                pos_embed = _resampled_pos_embed(pos_embed, height, width, self.patch_embed.grid_size, prefix)
        tokens: list[torch.Tensor] = []
        if self.cls_token is not None:
            tokens.append(self.cls_token.expand(batch, -1, -1))
        if self.dist_token is not None:
            tokens.append(self.dist_token.expand(batch, -1, -1))
        if self.reg_token is not None:
            tokens.append(self.reg_token.expand(batch, -1, -1))
        if self.no_embed_class:  # DeiT-III / DINOv2: positions for the patches only
            if pos_embed is not None:
                x = x + pos_embed
            if len(tokens) > 0:
                x = torch.cat(tokens + [x], dim=1)
        else:
            if len(tokens) > 0:
                x = torch.cat(tokens + [x], dim=1)
            if pos_embed is not None:
                x = x + pos_embed
        return self.pos_drop(x)

    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm_pre(self.patch_drop(self._pos_embed(self.patch_embed(x))))

    def _blocks(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Every block, called as timm calls them: ``blocks`` as one module unless a mask or
        gradient checkpointing takes them one by one (so hooks on ``blocks`` fire where timm's do)."""
        if attn_mask is None and not self.grad_checkpointing:
            return self.blocks(x)
        for block in self.blocks:
            if self.grad_checkpointing and torch.is_grad_enabled() and not torch.jit.is_scripting():
                x = checkpoint(block, x, attn_mask, use_reentrant=False)
            else:
                x = block(x, attn_mask)
        return x

    def forward_features(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        patch_valid: torch.Tensor | None = None,
        patch_coord: torch.Tensor | None = None,
    ):
        """(B, C, H, W) image -> (B, prefix + N, D) tokens after the final norm.

        A NaFlex batch (a dict, or patches with ``patch_coord`` and ``patch_valid``) gives timm's
        ``{'patches': (B, prefix + N, D), 'patch_valid': (B, N)}``, computed packed.
        """
        if not torch.jit.is_scripting():  # TorchScript leaves this block out
            if naflex.is_naflex_call(x, patch_coord, patch_valid):
                return naflex.forward_features(self, naflex.read_batch(self, x, attn_mask, patch_valid, patch_coord))
        return self.norm(self._blocks(self._embed(x), attn_mask))

    def pooled_token_count(self) -> int:
        """How many leading tokens the head reads: 2 (distilled), 1 (``'token'`` pooling), else 0 (all)."""
        if self.distilled:
            return 2
        if self.global_pool == "token":
            return 1
        return 0

    def forward_pooled_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) image -> (B, k, D): only the ``pooled_token_count()`` tokens the head reads.

        Equal to ``forward_features(x)[:, :k]``, but the last block computes its attention
        queries, projection and MLP for those tokens alone: the patch tokens' final outputs are
        never read by a ``'token'``-pooled head, and skipping them saves most of one block's work
        (about 1/depth of the model's FLOPs). With pooling that reads every token (k = 0) this is
        ``forward_features(x)``.
        """
        num_tokens = self.pooled_token_count()
        if num_tokens == 0:
            return self.forward_features(x)
        x = self._embed(x)
        checkpointing = self.grad_checkpointing and torch.is_grad_enabled()
        last = len(self.blocks) - 1
        for index, block in enumerate(self.blocks):
            if index == last:
                if checkpointing and not torch.jit.is_scripting():
                    x = checkpoint(block.forward_prefix, x, num_tokens, use_reentrant=False)
                else:
                    x = block.forward_prefix(x, num_tokens)
            elif checkpointing and not torch.jit.is_scripting():
                x = checkpoint(block, x, None, use_reentrant=False)
            else:
                x = block(x)
        return self.norm(x)

    def pool(self, x: torch.Tensor, pool_type: str | None = None) -> torch.Tensor:
        """(B, N, D) tokens -> (B, D) by ``pool_type`` (default: ``global_pool``); ``''`` keeps the tokens."""
        if self.attn_pool is not None:
            return self.attn_pool(x if self.pool_include_prefix else x[:, self.num_prefix_tokens :])
        pool_type = self.global_pool if pool_type is None else pool_type
        if pool_type == "token":
            return x[:, 0]
        if pool_type == "":
            return x
        if not self.pool_include_prefix:
            x = x[:, self.num_prefix_tokens :]
        if pool_type == "avg":
            return x.mean(dim=1)
        if pool_type == "max":
            return x.amax(dim=1)
        return 0.5 * (x.amax(dim=1) + x.mean(dim=1))  # avgmax

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False, patch_valid: torch.Tensor | None = None):
        """Tokens from ``forward_features`` -> logits (or the pooled pre-logit features).

        NaFlex features (the dict ``forward_features`` returns, or padded tokens with ``patch_valid``)
        pool over each image's valid tokens only.
        """
        if not torch.jit.is_scripting():  # TorchScript leaves this block out
            if isinstance(x, dict) or patch_valid is not None:
                if isinstance(x, dict):
                    x, patch_valid = x["patches"], x.get("patch_valid", patch_valid)
                return naflex.forward_head(self, x, patch_valid, pre_logits)
        if self.head_dist is not None:
            x_cls, x_dist = self.head_drop(x[:, 0]), self.head_drop(x[:, 1])
            if pre_logits:
                return (x_cls + x_dist) / 2
            x_cls, x_dist = self.head(x_cls), self.head_dist(x_dist)
            if self.distilled_training and self.training and not torch.jit.is_scripting():
                return x_cls, x_dist
            return (x_cls + x_dist) / 2
        x = self.head_drop(self.pre_logits(self.fc_norm(self.pool(x))))
        return x if pre_logits else self.head(x)

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        patch_valid: torch.Tensor | None = None,
        patch_coord: torch.Tensor | None = None,
    ):
        """Logits: ``forward_head(forward_features(x))``, timm's computation.

        Opted into with ``pooled_forward`` (``set_pooled_forward()``), a head that reads only
        leading tokens gets them from ``forward_pooled_tokens`` (equal logits, less work). An
        attention mask or FX tracing takes the full path.

        NaFlex: ``x`` may be timm's NaFlex batch dict (``patches``, ``patch_coord``, ``patch_valid``,
        optional ``attn_mask``), or patches with ``patch_coord`` / ``patch_valid`` as keywords or in
        timm's ``NaFlexVit`` positional order ``(patches, patch_coord, patch_valid)``.
        """
        if not torch.jit.is_scripting():  # TorchScript leaves this block out
            if naflex.is_naflex_call(x, patch_coord, patch_valid):
                return naflex.forward(self, naflex.read_batch(self, x, attn_mask, patch_valid, patch_coord))
        if self.pooled_forward and attn_mask is None and self.pooled_token_count() > 0 and not _is_fx_proxy(x):
            return self.forward_head(self.forward_pooled_tokens(x))
        return self.forward_head(self.forward_features(x, attn_mask))

    @torch.jit.ignore
    def forward_attention(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Forward through the eager path, returning features and every block's (B, heads, N, N) attention."""
        x = self._embed(x)
        maps = []
        for block in self.blocks:
            x, attn = block.forward_with_attention(x)
            maps.append(attn)
        return self.norm(x), maps

    @torch.jit.ignore
    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | list[int] | None = None,
        return_prefix_tokens: bool = False,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
        output_dict: bool = False,
        attn_mask: torch.Tensor | None = None,
        patch_coord: torch.Tensor | None = None,
        patch_valid: torch.Tensor | None = None,
    ):
        """timm's intermediate-feature API: block outputs at ``indices`` as NCHW maps or NLC tokens.

        A NaFlex batch gives NLC tokens in the batch's padded layout (with ``output_dict`` also its
        ``patch_valid``), computed packed, as timm's ``NaFlexVit`` does.

        Returns ``(final_features, intermediates)``, the intermediates alone
        (``intermediates_only``), or with ``output_dict`` a dict with ``'image_intermediates'``,
        ``'image_features'`` (unless ``intermediates_only``) and, with ``return_prefix_tokens``,
        ``'image_intermediates_prefix'``.
        """
        if output_fmt not in ("NCHW", "NLC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        take_indices, max_index = _take_indices(len(self.blocks), indices)
        if naflex.is_naflex_call(x, patch_coord, patch_valid):
            return naflex.forward_intermediates(
                self,
                naflex.read_batch(self, x, attn_mask, patch_valid, patch_coord),
                take_indices,
                max_index,
                return_prefix_tokens,
                norm,
                stop_early,
                output_fmt,
                intermediates_only,
                output_dict,
            )
        wanted = set(take_indices)
        batch, _, height, width = x.shape
        x = self._embed(x)
        blocks = self.blocks[: max_index + 1] if stop_early else self.blocks
        intermediates = []
        for index, block in enumerate(blocks):
            if self.grad_checkpointing and torch.is_grad_enabled():
                x = checkpoint(block, x, attn_mask, use_reentrant=False)
            else:
                x = block(x, attn_mask)
            if index in wanted:
                intermediates.append(self.norm(x) if norm else x)
        prefix = [y[:, : self.num_prefix_tokens] for y in intermediates]
        intermediates = [y[:, self.num_prefix_tokens :] for y in intermediates]
        if output_fmt == "NCHW":
            grid_h, grid_w = self.patch_embed.dynamic_feat_size((height, width))
            intermediates = [
                y.reshape(batch, grid_h, grid_w, -1).permute(0, 3, 1, 2).contiguous() for y in intermediates
            ]
        if output_dict:
            result: dict[str, Any] = {"image_intermediates": intermediates}
            if return_prefix_tokens and self.num_prefix_tokens:
                result["image_intermediates_prefix"] = prefix
            if not intermediates_only:
                result["image_features"] = self.norm(x)
            return result
        if return_prefix_tokens and self.num_prefix_tokens:
            intermediates = list(zip(intermediates, prefix, strict=False))
        if intermediates_only:
            return intermediates
        return self.norm(x), intermediates

    @torch.jit.ignore
    def get_intermediate_layers(
        self,
        x: torch.Tensor,
        n: int | list[int] | tuple[int, ...] = 1,
        reshape: bool = False,
        return_prefix_tokens: bool = False,
        norm: bool = False,
        attn_mask: torch.Tensor | None = None,
    ) -> list[Any]:
        """The DINO-style interface: outputs of the last ``n`` blocks (or those at indices ``n``)."""
        return self.forward_intermediates(
            x,
            n if isinstance(n, int) else list(n),
            return_prefix_tokens=return_prefix_tokens,
            norm=norm,
            output_fmt="NCHW" if reshape else "NLC",
            intermediates_only=True,
            attn_mask=attn_mask,
        )

    @torch.jit.ignore
    def prune_intermediate_layers(
        self, indices: int | list[int] = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """Drop blocks (and optionally norm/head) not needed for ``forward_intermediates(indices)``."""
        take_indices, max_index = _take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[: max_index + 1]
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.fc_norm = nn.Identity()
            self.reset_classifier(0, "token" if self.distilled else "")
        return take_indices


def _check_global_pool(global_pool: str, distilled: bool, class_token: bool) -> str:
    if global_pool not in GLOBAL_POOLS:
        raise ValueError(f"global_pool must be one of {GLOBAL_POOLS}, got {global_pool!r}")
    if distilled and global_pool != "token":
        raise ValueError(
            f"a distilled model pools its class and distillation tokens: global_pool must be "
            f"'token', got {global_pool!r}"
        )
    if global_pool == "token" and not class_token:
        raise ValueError("global_pool='token' needs the class token: pass class_token=True or another global_pool")
    return global_pool
