"""The Vision Transformer (ViT, DeiT distilled, ImageNet-21k "has_logits") with timm's model hooks."""
from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple, Union

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .layers import (
    Block, PatchEmbed, check_attn_impl, init_layer_tensor, normal_init_, sincos_2d_pos_embed, trunc_normal_init,
)

GLOBAL_POOLS = ("token", "avg", "")
POS_EMBEDS = ("learn", "sincos")
#: Tensors the model holds itself rather than through a submodule (initialised by the model).
OWN_TENSORS = ("pos_embed", "cls_token", "dist_token")
#: Byte alignment of PyTorch's CPU allocator (c10's ``gAlignment``); loaded tensors are kept at it.
CPU_ALIGNMENT = 64


def _default_device() -> torch.device:
    """The device factory functions use now (honours ``with torch.device(...)``)."""
    return torch.empty(0).device


def _take_indices(num_blocks: int, indices: Optional[Union[int, List[int]]]) -> Tuple[List[int], int]:
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


def _check_global_pool(global_pool: str, distilled: bool) -> str:
    if global_pool not in GLOBAL_POOLS:
        raise ValueError(f"global_pool must be one of {GLOBAL_POOLS}, got {global_pool!r}")
    if distilled and global_pool != "token":
        raise ValueError(f"a distilled model pools its class and distillation tokens: global_pool must be "
                         f"'token', got {global_pool!r}")
    return global_pool


class VisionTransformer(nn.Module):
    """ViT of Dosovitskiy et al. 2020 with DeiT's optional distillation token (Touvron et al. 2020).

    ``representation_size`` adds the ImageNet-21k "pre-logits" layer (Linear + Tanh) before the head.
    ``distilled`` adds a distillation token and ``head_dist``: the training forward returns
    ``(head, head_dist)`` and eval returns their mean. ``distilled_training=False`` (or
    ``set_distilled_training(False)``) makes training return the mean too, as timm's DeiT does by
    default; timm's ``TokenDistillationTask`` switches the pair on itself. ``attn_impl`` picks SDPA
    or the eager attention matrix; ``pos_embed='sincos'`` swaps the learned table for a fixed buffer.
    ``device`` / ``dtype`` are timm's factory arguments: where the parameters end up.
    """

    def __init__(
        self,
        img_size: Union[int, Tuple[int, int]] = 224,
        patch_size: Union[int, Tuple[int, int]] = 16,
        in_chans: int = 3,
        num_classes: int = 1000,
        global_pool: str = "token",
        embed_dim: int = 768,
        depth: int = 12,
        num_heads: int = 12,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        qk_scale: Optional[float] = None,
        representation_size: Optional[int] = None,
        distilled: bool = False,
        distilled_training: bool = True,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        pos_embed: str = "learn",
        attn_impl: str = "sdpa",
        norm_eps: float = 1e-6,
        device: Optional[Union[str, torch.device]] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> None:
        super().__init__()
        if num_classes < 0:
            raise ValueError(f"num_classes must be >= 0 (0 = no classifier), got {num_classes}")
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        if num_heads < 1 or embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} must be divisible by num_heads {num_heads}")
        if pos_embed not in POS_EMBEDS:
            raise ValueError(f"pos_embed must be one of {POS_EMBEDS}, got {pos_embed!r}")
        if distilled and representation_size:
            raise ValueError("representation_size (has_logits) cannot be combined with distilled=True")
        self.num_classes = num_classes
        self.global_pool = _check_global_pool(global_pool, distilled)
        self.embed_dim = self.num_features = embed_dim
        self.head_hidden_size = representation_size or embed_dim
        self.distilled = distilled
        # the DESIGN's DeiT contract: training returns both heads' logits for a distillation loss;
        # plain classification training (train.py without a teacher) passes distilled_training=False
        self.distilled_training = distilled and distilled_training
        self.in_chans = in_chans
        self.num_prefix_tokens = 2 if distilled else 1
        self.grad_checkpointing = False
        # where a model built on ``meta`` puts its tensors once loaded (timm's device= argument)
        self.load_device: Optional[torch.device] = None
        self.attn_impl = check_attn_impl(attn_impl)

        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.dist_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if distilled else None
        num_tokens = self.patch_embed.num_patches + self.num_prefix_tokens
        if pos_embed == "learn":
            self.pos_embed = nn.Parameter(torch.zeros(1, num_tokens, embed_dim))
        else:
            table = sincos_2d_pos_embed(self.patch_embed.grid_size, embed_dim, self.num_prefix_tokens)
            self.register_buffer("pos_embed", table, persistent=False)
        self.pos_drop = nn.Dropout(drop_rate)

        # stochastic depth rises linearly from 0 at the first block to drop_path_rate at the last
        rates = [drop_path_rate * i / max(depth - 1, 1) for i in range(depth)]
        self.blocks = nn.Sequential(*[
            Block(embed_dim, num_heads, mlp_ratio, qkv_bias, qk_scale, drop_rate, attn_drop_rate, rate,
                  attn_impl, norm_eps)
            for rate in rates
        ])
        self.norm = nn.LayerNorm(embed_dim, eps=norm_eps)
        reduction = max(self.patch_embed.patch_size)
        # timm's feature-extraction wrappers read this: every block is a feature level
        self.feature_info = [dict(module=f"blocks.{i}", num_chs=embed_dim, reduction=reduction)
                             for i in range(depth)]

        if representation_size:
            self.pre_logits = nn.Sequential(OrderedDict(
                fc=nn.Linear(embed_dim, representation_size), act=nn.Tanh()))
        else:
            self.pre_logits = nn.Identity()
        self.head = self._make_head(num_classes)
        self.head_dist = self._make_head(num_classes) if distilled else None
        self.init_weights()
        if device is not None or dtype is not None:
            # timm's factory arguments (its distillation teacher passes device=): built and
            # initialised in float32 on the default device, then moved; to build without
            # allocating, construct inside ``with torch.device("meta"):`` instead
            self.to(device=device, dtype=dtype)

    def _make_head(self, num_classes: int) -> nn.Module:
        return nn.Linear(self.head_hidden_size, num_classes) if num_classes > 0 else nn.Identity()

    def init_weights(self) -> None:
        """Truncated-normal init of tokens and linear layers, as timm's ViT does."""
        for name in OWN_TENSORS:
            if getattr(self, name) is not None:
                self._init_own_tensor(name)
        self.apply(trunc_normal_init)

    def _init_own_tensor(self, name: str) -> None:
        """Init (or, for the fixed sincos table, recompute) one tensor the model holds itself."""
        tensor = getattr(self, name)
        if tensor.is_meta:  # no data to fill: materialize() calls this again once it has storage
            return
        with torch.no_grad():
            if name == "pos_embed" and not isinstance(tensor, nn.Parameter):
                # computed on the CPU in float64 (tiny), then copied to wherever the buffer lives
                table = sincos_2d_pos_embed(self.patch_embed.grid_size, self.embed_dim, self.num_prefix_tokens,
                                            device=torch.device("cpu"))
                tensor.copy_(table)
            elif name == "cls_token":
                tensor.normal_(0.0, 1e-6)
            else:  # learned pos_embed, dist_token
                normal_init_(tensor, std=0.02)

    # --- construction without storage (fast cold start) --------------------------------------
    def has_meta_tensors(self) -> bool:
        """True while any parameter or buffer is still on the ``meta`` device (holds no data)."""
        return any(t.is_meta for t in itertools.chain(self.parameters(), self.buffers()))

    def materialize(self, device: Union[str, torch.device, None] = None) -> List[str]:
        """Give every tensor still on ``meta`` storage on ``device`` and initialise it; return their names.

        Tensors that already hold data are left untouched, so after a partial load (a new head,
        an adapted stem) only what the checkpoint did not provide is initialised. The fixed
        sincos position table is recomputed.
        """
        device = torch.device(device) if device is not None else _default_device()
        done = []
        for module_name, module in self.named_modules():
            for name, tensor in itertools.chain(module.named_parameters(recurse=False),
                                                module.named_buffers(recurse=False)):
                if not tensor.is_meta:
                    continue
                fresh = torch.empty_like(tensor, device=device)
                if isinstance(tensor, nn.Parameter):
                    fresh = nn.Parameter(fresh, requires_grad=tensor.requires_grad)
                setattr(module, name, fresh)
                if module is self:
                    self._init_own_tensor(name)
                else:
                    init_layer_tensor(module, name, fresh)
                done.append(f"{module_name}.{name}" if module_name else name)
        return done

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
    def no_weight_decay(self) -> Set[str]:
        return {"pos_embed", "cls_token", "dist_token"}

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> Dict[str, Any]:
        """Parameter groups for timm's layer-wise LR decay: stem, one group per block, then the rest."""
        return dict(
            stem=r"^cls_token|^pos_embed|^patch_embed|^dist_token",
            blocks=r"^blocks\.(\d+)" if coarse else [(r"^blocks\.(\d+)", None), (r"^norm", (99999,))],
        )

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    @torch.jit.ignore
    def set_distilled_training(self, enable: bool = True) -> None:
        """Distilled models only: training forward returns ``(head, head_dist)`` when enabled."""
        if enable and not self.distilled:
            raise ValueError("set_distilled_training(True) needs a model with a distillation token and "
                             "head_dist (distilled=True, e.g. scratch_deit_ti16_distilled)")
        self.distilled_training = enable

    def set_attn_impl(self, attn_impl: str) -> None:
        """Switch every block between ``'sdpa'`` and ``'eager'`` attention."""
        self.attn_impl = check_attn_impl(attn_impl)
        for block in self.blocks:
            block.attn.attn_impl = attn_impl

    @torch.jit.ignore
    def get_classifier(self) -> Union[nn.Module, Tuple[nn.Module, nn.Module]]:
        return (self.head, self.head_dist) if self.distilled else self.head

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        """Replace the classifier(s) with fresh ones for ``num_classes`` (0 = features only)."""
        if num_classes < 0:
            raise ValueError(f"num_classes must be >= 0, got {num_classes}")
        if global_pool is not None:
            self.global_pool = _check_global_pool(global_pool, self.distilled)
        self.num_classes = num_classes
        place = dict(device=self.cls_token.device, dtype=self.cls_token.dtype)
        self.head = self._make_head(num_classes).to(**place)
        trunc_normal_init(self.head)
        if self.distilled:
            self.head_dist = self._make_head(num_classes).to(**place)
            trunc_normal_init(self.head_dist)

    # --- forward ------------------------------------------------------------------------------
    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)
        prefix = [self.cls_token.expand(x.shape[0], -1, -1)]
        if self.dist_token is not None:
            prefix.append(self.dist_token.expand(x.shape[0], -1, -1))
        x = torch.cat(prefix + [x], dim=1) + self.pos_embed
        return self.pos_drop(x)

    def _run_block(self, block: Callable[..., torch.Tensor], *args: Any) -> torch.Tensor:
        """``block(*args)``, through activation checkpointing when it is on and gradients are needed."""
        if self.grad_checkpointing and torch.is_grad_enabled():
            return checkpoint(block, *args, use_reentrant=False)
        return block(*args)

    def _run_blocks(self, x: torch.Tensor, blocks: nn.Sequential,
                    keep: Optional[List[int]] = None) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """Run ``blocks``; return the last output and the outputs of the blocks at ``keep``, in order.

        Only the kept outputs stay referenced, so (without autograd) the others are freed as soon
        as the next block has consumed them.
        """
        wanted = set(keep or ())
        kept = {}
        for index, block in enumerate(blocks):
            x = self._run_block(block, x)
            if index in wanted:
                kept[index] = x
        return x, [kept[i] for i in (keep or ())]

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) image -> (B, prefix + N, D) normalised tokens."""
        x = self._embed(x)
        if self.grad_checkpointing and torch.is_grad_enabled():
            x, _ = self._run_blocks(x, self.blocks)
        else:
            x = self.blocks(x)
        return self.norm(x)

    def forward_pooled_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) image -> (B, prefix, D): the normalised class (and distillation) tokens only.

        Equal to ``forward_features(x)[:, :num_prefix_tokens]``, but the last block computes its
        attention queries, projection and MLP for those tokens alone: the patch tokens' final
        outputs are never read by a ``'token'``-pooled head, and skipping them saves most of one
        block's work (about 1/depth of the model's FLOPs) in inference and training alike.
        """
        x, _ = self._run_blocks(self._embed(x), self.blocks[:-1])
        x = self._run_block(self.blocks[-1].forward_prefix, x, self.num_prefix_tokens)
        return self.norm(x)

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        if self.global_pool == "token":
            return x[:, 0]
        if self.global_pool == "avg":
            return x[:, self.num_prefix_tokens:].mean(dim=1)
        return x

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False):
        """Tokens from ``forward_features`` -> logits (or the pooled pre-logit features)."""
        if self.head_dist is not None:
            x_cls, x_dist = x[:, 0], x[:, 1]
            if pre_logits:
                return (x_cls + x_dist) / 2
            x_cls, x_dist = self.head(x_cls), self.head_dist(x_dist)
            if self.distilled_training and self.training:
                return x_cls, x_dist
            return (x_cls + x_dist) / 2
        x = self.pre_logits(self.pool(x))
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor):
        """Logits; same as ``forward_head(forward_features(x))``, computed more cheaply for ``'token'`` pooling."""
        if self.global_pool == "token" and not self._last_block_observed():
            return self.forward_head(self.forward_pooled_tokens(x))
        return self.forward_head(self.forward_features(x))

    def _last_block_observed(self) -> bool:
        """True when something outside reads every token of the last block or the final norm.

        FX tracing (timm's and torchvision's feature extractors name ``blocks.N`` / ``norm``
        nodes) and forward hooks on those modules or their children must see full-length outputs,
        so ``forward`` then takes the full path. Under ``torch.compile`` hooks are not looked at.
        """
        if torch.compiler.is_compiling() or torch.jit.is_scripting():  # torch.export included
            return False
        if torch.fx._symbolic_trace.is_fx_symbolic_tracing():
            return True
        watched = itertools.chain(self.blocks[len(self.blocks) - 1].modules(), self.norm.modules())
        return any(m._forward_hooks or m._forward_pre_hooks for m in watched)

    def forward_attention(self, x: torch.Tensor) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """Forward through the eager path, returning features and every block's (B, heads, N, N) attention."""
        x = self._embed(x)
        maps = []
        for block in self.blocks:
            x, attn = block.forward_with_attention(x)
            maps.append(attn)
        return self.norm(x), maps

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: Optional[Union[int, List[int]]] = None,
        return_prefix_tokens: bool = False,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
    ):
        """timm's intermediate-feature API: block outputs at ``indices`` as NCHW maps or NLC tokens."""
        if output_fmt not in ("NCHW", "NLC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        take_indices, max_index = _take_indices(len(self.blocks), indices)
        batch = x.shape[0]
        blocks = self.blocks[:max_index + 1] if stop_early else self.blocks
        last, outputs = self._run_blocks(self._embed(x), blocks, keep=take_indices)
        intermediates = [self.norm(y) if norm else y for y in outputs]
        prefix = [y[:, :self.num_prefix_tokens] for y in intermediates]
        intermediates = [y[:, self.num_prefix_tokens:] for y in intermediates]
        if output_fmt == "NCHW":
            height, width = self.patch_embed.grid_size
            intermediates = [y.reshape(batch, height, width, -1).permute(0, 3, 1, 2).contiguous()
                             for y in intermediates]
        if return_prefix_tokens:
            intermediates = list(zip(intermediates, prefix))
        if intermediates_only:
            return intermediates
        return self.norm(last), intermediates

    def prune_intermediate_layers(
        self, indices: Union[int, List[int]] = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> List[int]:
        """Drop blocks (and optionally norm/head) not needed for ``forward_intermediates(indices)``."""
        take_indices, max_index = _take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[:max_index + 1]
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.reset_classifier(0, "" if not self.distilled else None)
        return take_indices
