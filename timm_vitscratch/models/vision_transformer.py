"""The Vision Transformer: timm's ``VisionTransformer`` options and model hooks, plus DeiT distillation
and ImageNet-21k "has_logits"."""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from timm.layers import use_fused_attn
from torch import nn
from torch.jit import Final
from torch.utils.checkpoint import checkpoint

from ..errors import NaFlexBatchError
from ..gate.naflex_batch import check_patch_valid
from . import intermediates, pooling, storage
from .attention import Attention, AttentionPool, check_attn_impl
from .block import BLOCK_TYPES, TransformerBlock
from .block_layers import block_layers, build_blocks
from .checkpoint_filter import load_pretrained, remap_on_load
from .head import Head
from .init_order import InitOrder
from .layers import (
    DEFAULT_NORM_EPS,
    ActLayer,
    FactoryKwargs,
    PatchDropout,
    embed_norm,
    resolve_act_layer,
    resolve_norm_layer,
    to_2tuple,
)
from .naflex_forward import NaFlexForward
from .option_checks import check_options
from .packing import PackedSegments
from .rotary import rotary_position
from .stem import Stem
from .weight_init import check_weight_init

#: Tensors the model holds itself rather than through a submodule (initialised by the model, no weight decay).
OWN_TENSORS = ("pos_embed", "cls_token", "reg_token", "dist_token")
#: what a model built with ``naflex_embeds`` holds in its ``embeds`` module (timm NaFlexVit's names) rather than
#: itself: the model answers these names with the embedding's (``patch_embed`` is the embedding module itself)
EMBEDS_NAMES = ("patch_embed", "pos_embed", "cls_token", "reg_token", "pos_drop")

if TYPE_CHECKING:
    #: what forward, forward_features and forward_head return, by what they are given: a tensor for
    #: images, (head, head_dist) logits in distilled training, timm's NaFlex features dict for a NaFlex
    #: batch (which forward_head also takes); Any, since the caller's input decides which
    Output = Any
else:
    # TorchScript compiles those three with the tensor path alone (it leaves out the blocks that
    # return the others), so it reads the annotation as what its compiled code returns
    Output = torch.Tensor


def is_naflex_call(x: Any, patch_coord: torch.Tensor | None, patch_valid: torch.Tensor | None) -> bool:
    """True for a NaFlex batch: a dict, or patches given with their coordinates / validity (the one test of which
    path a call takes). Under FX tracing every argument is a placeholder: that traces the image path."""
    if isinstance(x, torch.fx.Proxy):
        return False
    return isinstance(x, Mapping) or patch_coord is not None or patch_valid is not None


def _is_fx_proxy(x: torch.Tensor) -> bool:
    """True while ``torch.fx.symbolic_trace`` (and timm's / torchvision's feature extractors) trace the model."""
    if torch.jit.is_scripting():
        return False
    return isinstance(x, torch.fx.Proxy)


class VisionTransformer(NaFlexForward, Stem, Head, InitOrder):
    """ViT of Dosovitskiy et al. 2020 with timm's options and DeiT's optional distillation token.

    The constructor takes timm's ``VisionTransformer`` arguments with timm's names, defaults and
    meaning, plus a few of its own (see ``__init__``). NaFlex batches (``model(batch_dict)``,
    docs/native_resolution.md) run packed (``naflex_packed``), through the same blocks, position
    encoding (``pos_encoding``, models/position.py) and pooling (models/pooling.py) as images.

    ``forward`` computes what timm's does, module by module, so forward and backward hooks see
    timm's tensors. ``pooled_forward=True`` (or ``set_pooled_forward()``) opts into a faster
    forward: when the head reads only the class (and distillation) token, the last block runs for
    those tokens alone. Logits and gradients stay the same; hooks on the last block and the final
    norm then see only those tokens, and hooks on ``blocks`` do not fire.
    """

    dynamic_img_size: Final[bool]
    #: the classes one block may be (``TransformerBlock``s): FSDP's ``ModuleWrapPolicy(VisionTransformer.block_types)``
    #: wraps each block, ``isinstance(module, TransformerBlock)`` finds them for checkpointing and hooks
    block_types: ClassVar[tuple[type[TransformerBlock], ...]] = BLOCK_TYPES
    #: for the weight-init schemes: the classifiers ('jax' zeroes them and sets the head bias)
    init_roles: ClassVar[dict[str, str]] = {"head": "head", "head_dist": "head"}

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
        embed_norm_layer: Any | None = None,
        act_layer: ActLayer | None = None,
        mlp_layer: str = "",
        qk_scale: float | None = None,
        representation_size: int | None = None,
        distilled: bool = False,
        distilled_training: bool = False,
        attn_impl: str | None = None,
        norm_eps: float = DEFAULT_NORM_EPS,
        pooled_forward: bool = False,
        patchify_channels_last: bool = True,
        naflex_packed: bool = True,
        pos_embed_interp_mode: str = "bicubic",
        naflex_init: bool = False,
        naflex_embeds: bool = False,
        eva_names: bool = False,
        swiglu_mlp: bool = False,
        swiglu_align_to: int = 0,
        rope_type: str = "",
        rope_temperature: float = 10000.0,
        rope_grid_offset: float = 0.0,
        rope_grid_indexing: str = "ij",
        ref_feat_shape: int | tuple[int, int] | None = None,
        qkv_fused: bool = True,
        attn_type: str = "eva",
        scale_mlp: bool = False,
        scale_attn_inner: bool = False,
        attn_pool_num_heads: int | None = None,
        attn_pool_mlp_ratio: float | None = None,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        """Build the model where ``device`` / ``dtype`` say, initialised by ``weight_init`` (on ``meta``: not at all).

        Args:
            img_size: Input image size, an int or (height, width).
            patch_size: Patch size, an int or (height, width).
            in_chans: Number of input image channels.
            num_classes: Classes of the classifier head; 0 gives no head (pooled features).
            global_pool: Pooling before the head: 'token', 'avg', 'avgmax', 'max', 'map' (attention pool) or ''.
            embed_dim: Token width.
            depth: Number of transformer blocks.
            num_heads: Attention heads per block.
            mlp_ratio: MLP hidden width as a multiple of embed_dim.
            qkv_bias: Bias on the qkv projection.
            qk_norm: LayerNorm on queries and keys, per head.
            proj_bias: Bias on the attention output projection and the MLP layers.
            init_values: LayerScale initial value; None leaves LayerScale out.
            class_token: Prepend a learned class token.
            pos_embed: Position embedding: 'learn', 'sincos' (a fixed table) or 'none' / ''.
            no_embed_class: Position embeddings for the patch tokens only, not the prefix tokens.
            reg_tokens: Number of register tokens.
            pre_norm: LayerNorm after the embedding, before the blocks (CLIP); also drops the patch bias.
            final_norm: LayerNorm after the blocks (or after pooling, with fc_norm).
            fc_norm: Final norm after pooling instead of before; None: on for 'avg', 'avgmax', 'max'.
            pool_include_prefix: Pooling includes the prefix tokens.
            dynamic_img_size: Accept any image size, resampling the position table to it.
            dynamic_img_pad: Pad images up to a multiple of the patch size.
            drop_rate: Dropout before the head.
            pos_drop_rate: Dropout after adding position embeddings.
            patch_drop_rate: Share of patch tokens dropped in training.
            proj_drop_rate: Dropout after the attention projection and in the MLP.
            attn_drop_rate: Dropout on the attention weights.
            drop_path_rate: Stochastic depth, rising linearly to this rate at the last block.
            weight_init: Init scheme: '' (timm's), 'jax', 'jax_nlhb', 'moco', 'reset' or 'skip' (models/weight_init.py).
            norm_layer: timm's norm layer argument, a LayerNorm or RmsNorm kind; sets the eps of every norm.
            embed_norm_layer: A norm of that kind ('layernorm', 'rmsnorm'; the eps of every norm) as ``patch_embed``'s
                ``norm``, over the patch tokens (AIMv2's); None: an Identity there.
            act_layer: MLP activation: a name timm knows or a module class; None is GELU.
            mlp_layer: The blocks' MLP named outright: 'swiglu' is timm's ``SwiGLU`` (``mlp_layer=SwiGLU``, AIMv2's);
                '' chooses by ``swiglu_mlp``.
            qk_scale: Attention scale; None is head_dim ** -0.5.
            representation_size: Width of the ImageNet-21k pre-logits layer (Linear + Tanh); None leaves it out.
            distilled: Add DeiT's distillation token and head_dist.
            distilled_training: In training, return (head, head_dist) logits instead of their mean.
            attn_impl: 'sdpa' or 'eager'; None follows timm's use_fused_attn().
            norm_eps: eps of every LayerNorm as a number (what a config.json records); see resolve_norm_eps.
            pooled_forward: Opt into the pooled-token forward (the last block for the pooled tokens only).
            patchify_channels_last: Flat NaFlex patches are (row, column, channel), as timm's loader makes them.
            naflex_packed: NaFlex batches run packed (padding costs nothing); False: timm's padded, masked
                layout, which export always takes.
            pos_embed_interp_mode: How the learned position table is resampled to another grid, antialiased:
                'bicubic' (timm's ``VisionTransformer``) or 'bilinear' (timm's ``NaFlexVit`` SigLIP 2 models).
            naflex_init: Initialised as timm's ``NaFlexVit`` (SigLIP 2 NaFlex): the class and register tokens
                N(0, 1e-6) and the learned position table N(0, .02), drawn when built, right after the patch
                projection (again by ``init_weights``, not by the constructor's pass); the patch projection by the
                scheme's Linear rule over NaFlexVit's (row, column, channel) input order, as the Linear it is there.
            naflex_embeds: Built as timm's ``NaFlexVit``: its ``embeds`` module (models/naflex_embeds.py) holds the
                tokens, the patch projection as the Linear on flattened patches it is there, its ``norm``, the (1, H, W,
                D) position table of the patch tokens only (no position for the prefix tokens) and ``pos_drop``, where
                the classic ViT has ``patch_embed``, ``pos_embed``, ``cls_token``, ``reg_token`` and ``pos_drop`` (the
                model answers those names with the embedding's); no ``patch_drop`` module when it would do nothing. timm's NaFlexVit state dicts load strict, and ours load strict into it.
            eva_names: Built as timm's ``Eva`` (DINOv3, PE, EVA02): its names for the same layers (LayerScale as
                the blocks' ``gamma_1`` / ``gamma_2``, the qkv bias as ``q_bias`` / ``v_bias``, no key bias; no
                ``patch_drop`` module when it would do nothing), and with ``weight_init=''``
                its init (tokens N(0, .02), the residual projections scaled down by depth, a head scaled by 1e-3).
            swiglu_mlp: The blocks' MLP is a SwiGLU instead of GELU: timm's ``SwiGLU`` (``fc1_g``, ``fc1_x``,
                ``fc2``) when aligned or with ``scale_mlp``, else its packed form (``fc1`` of twice the width).
            swiglu_align_to: Round the SwiGLU hidden width up to a multiple of this (0: as mlp_ratio gives it).
            rope_type: Rotary position in attention: 'dinov3' or 'cat' (axial; models/rotary.py), or '' for none.
            rope_temperature: The rotary periods' base.
            rope_grid_offset: Added to every patch coordinate before the rotary angles.
            rope_grid_indexing: Axial rotary channel order: 'ij' rows first, 'xy' columns first.
            ref_feat_shape: Axial rotary reference grid (rows, columns): coordinates are rescaled onto it.
            qkv_fused: One qkv projection; False: Eva's ``q_proj`` / ``k_proj`` / ``v_proj`` (needs eva_names).
            attn_type: With eva_names, the attention's layout as timm's ``Eva`` names it: 'eva' (``q_bias`` /
                ``v_bias``) or 'rope' (``AttentionRope``: the bias inside ``qkv``).
            scale_mlp: A LayerNorm inside each MLP, before fc2 (EVA02's).
            scale_attn_inner: A LayerNorm on the attention's merged heads, before proj (EVA02-CLIP's).
            attn_pool_num_heads: Heads of the attention pool; None: num_heads.
            attn_pool_mlp_ratio: MLP ratio of the attention pool; None: mlp_ratio.
            device: Where the tensors are made (timm's factory argument); 'meta' builds without storage.
            dtype: dtype of the tensors (timm's factory argument).
        """
        super().__init__()
        dd: FactoryKwargs = {"device": device, "dtype": dtype}
        check_options(
            num_classes=num_classes,
            depth=depth,
            embed_dim=embed_dim,
            num_heads=num_heads,
            pos_embed=pos_embed,
            global_pool=global_pool,
            class_token=class_token,
            distilled=distilled,
            representation_size=representation_size,
            weight_init=weight_init,
            reg_tokens=reg_tokens,
            rope_type=rope_type,
            eva_names=eva_names,
            qkv_fused=qkv_fused,
            attn_type=attn_type,
            naflex_init=naflex_init,
            naflex_embeds=naflex_embeds,
            mlp_layer=mlp_layer,
        )
        use_fc_norm = global_pool in ("avg", "avgmax", "max") if fc_norm is None else fc_norm
        norm = resolve_norm_layer(norm_layer, norm_eps)
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
        # NaFlexVit's embedding adds no position to the prefix tokens
        self.no_embed_class = no_embed_class or naflex_embeds
        self.pool_include_prefix = pool_include_prefix
        self.dynamic_img_size = dynamic_img_size
        self.pooled_forward = pooled_forward
        # NaFlex batches: the flat patch layout, and packed (True) or timm's padded layout (export takes that)
        self.patchify_channels_last = patchify_channels_last
        self.naflex_packed = naflex_packed
        # as timm: 'skip' builds without the init pass, and later inits are torch's layer defaults
        self.weight_init_mode = "reset" if weight_init == "skip" else weight_init
        self.grad_checkpointing = False
        self.eva_names = eva_names  # Eva's init, and group_matcher's groups as timm's Eva makes them
        self.naflex_init = naflex_init  # NaFlexVit's init
        self.naflex_embeds = naflex_embeds  # NaFlexVit's embedding module
        # where a model built on ``meta`` puts its tensors once loaded (timm's device= argument)
        self.load_device: torch.device | None = None
        self.attn_impl = check_attn_impl(attn_impl or ("sdpa" if use_fused_attn() else "eager"))

        # rotary position for attention (timm's ``rope`` module), then the stem in timm's order (models/stem.py)
        rope = rotary_position(
            rope_type,
            embed_dim // num_heads,
            temperature=rope_temperature,
            grid_offset=rope_grid_offset,
            grid_indexing=rope_grid_indexing,
            ref_feat_shape=None if ref_feat_shape is None else to_2tuple(ref_feat_shape, "ref_feat_shape"),
        )
        self._build_stem(
            img_size,
            patch_size,
            in_chans,
            embed_dim,
            pos_embed=pos_embed,
            pos_embed_interp_mode=pos_embed_interp_mode,
            pre_norm=pre_norm,
            class_token=class_token,
            distilled=distilled,
            reg_tokens=reg_tokens,
            dynamic_img_size=dynamic_img_size,
            dynamic_img_pad=dynamic_img_pad,
            pos_drop_rate=pos_drop_rate,
            patch_drop_rate=patch_drop_rate,
            patchify_channels_last=patchify_channels_last,
            naflex_init=naflex_init,
            naflex_embeds=naflex_embeds,
            bare=eva_names or naflex_embeds,
            rope=rope,
            norm=norm,
            dd=dd,
            embed_norm=embed_norm(embed_norm_layer, norm_layer, norm_eps),
        )

        # the block, attention and MLP classes, chosen once from the options (models/block_layers.py)
        layers = block_layers(
            eva_names=eva_names,
            qkv_fused=qkv_fused,
            attn_type=attn_type,
            qkv_bias=qkv_bias,
            init_values=init_values,
            swiglu_mlp=swiglu_mlp,
            swiglu_align_to=swiglu_align_to,
            scale_mlp=scale_mlp,
            mlp_layer=mlp_layer,
            act_layer=mlp_act,
            norm_layer=norm,
        )
        self.blocks = build_blocks(
            layers,
            depth,
            embed_dim,
            num_heads,
            drop_path_rate=drop_path_rate,
            dd=dd,
            mlp_ratio=mlp_ratio,
            qkv_bias=qkv_bias,
            qk_norm=qk_norm,
            proj_bias=proj_bias,
            attn_drop=attn_drop_rate,
            proj_drop=proj_drop_rate,
            init_values=init_values,
            norm_layer=norm,
            qk_scale=qk_scale,
            attn_impl=self.attn_impl,
            rope_interleaved=self.rope is not None and self.rope.interleaved,
            scale_attn_inner=scale_attn_inner,
        )
        self.norm = norm(embed_dim, **dd) if final_norm and not use_fc_norm else nn.Identity()
        # timm's feature-extraction wrappers read this: every block is a feature level
        self.feature_info = [
            dict(module=f"blocks.{i}", num_chs=embed_dim, reduction=max(self.patch_embed.patch_size))
            for i in range(depth)
        ]

        self._build_head(
            embed_dim,
            num_heads,
            mlp_ratio,
            use_fc_norm=use_fc_norm,
            final_norm=final_norm,
            representation_size=representation_size,
            drop_rate=drop_rate,
            attn_pool_num_heads=attn_pool_num_heads,
            attn_pool_mlp_ratio=attn_pool_mlp_ratio,
            norm=norm,
            act_layer=mlp_act,
            attn_impl=self.attn_impl,
            dd=dd,
        )
        # as timm: every layer was initialised by its own constructor; the scheme's pass redoes what it
        # has a rule for. On ``meta`` nothing holds data: materialize() initialises once there is storage
        if weight_init != "skip" and not self.has_meta_tensors():
            self.init_weights(needs_reset=False)
        # torchvision, transformers and JAX state dicts load too, remapped with the converter's key maps
        self.register_load_state_dict_pre_hook(remap_on_load)

    def __getattr__(self, name: str) -> Any:
        """``nn.Module``'s lookup; with ``naflex_embeds`` the classic names in ``EMBEDS_NAMES`` answer the
        embedding's (``patch_embed``: the module itself), which the module tree holds under ``embeds`` only.

        A submodule (what a forward reads most) is answered here, in one Python call as ``nn.Module``'s own
        lookup would be, not two. Parameters go through ``nn.Module``'s lookup, which FX's tracer intercepts."""
        modules = self.__dict__["_modules"]
        if name in modules:
            return modules[name]
        try:
            return super().__getattr__(name)
        except AttributeError:
            embeds = self.__dict__["_modules"].get("embeds") if name in EMBEDS_NAMES else None
            if embeds is None:
                raise
            return embeds if name == "patch_embed" else getattr(embeds, name)

    # --- initialisation ----------------------------------------------------------------------
    def init_weights(self, mode: str | None = None, needs_reset: bool = True) -> None:
        """(Re)initialise every tensor by weight-init scheme ``mode`` (timm's names; default: this model's).

        As timm: the model's own tensors first, then every layer by the scheme's per-module function
        (models/weight_init.py), in timm's order, so that with timm's options and seed the draws are
        timm's. ``needs_reset=False`` (the constructor's) leaves a layer the scheme has no rule for
        with the init its constructor gave it.
        """
        if mode is not None:
            self.weight_init_mode = "reset" if check_weight_init(mode) == "skip" else mode
        self._initialise(needs_reset)

    # --- construction without storage (fast cold start): models/storage.py ---------------------
    def has_meta_tensors(self) -> bool:
        """True while any parameter or buffer is still on the ``meta`` device (holds no data)."""
        return storage.has_meta_tensors(self)

    def materialize(self, device: str | torch.device | None = None) -> list[str]:
        """Give every tensor still on ``meta`` storage on ``device`` and initialise it; return their names.

        Tensors that already hold data are left untouched, so after a partial load (a new head,
        an adapted stem) only what the checkpoint did not provide is initialised, by the model's
        scheme (models/weight_init.py). The fixed sincos position table is recomputed.
        """
        device = torch.device(device) if device is not None else storage.default_device()
        names, fresh = storage.give_storage(self, device)
        if fresh:
            self._initialise(needs_reset=True, only=fresh)
        return names

    @torch.jit.ignore
    def load_pretrained(self, checkpoint_path: str, prefix: str = "") -> None:
        """timm's hook for files ``torch.load`` cannot read (``load_checkpoint`` of a JAX ``.npz``)."""
        load_pretrained(self, checkpoint_path, prefix)

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> tuple[list[str], list[str]]:
        """``nn.Module.load_state_dict``; a model built on ``meta`` takes the tensors instead of copying.

        Copying into ``meta`` would load nothing, so such a model loads by assignment (tensors in
        the checkpoint's dtype are cast to the model's), then initialises whatever the checkpoint
        did not hold (``materialize``). With safetensors' memory-mapped tensors this loads without
        a copy; pages are read when first used.
        """
        if not self.has_meta_tensors():
            return super().load_state_dict(state_dict, strict=strict, assign=assign)
        result = super().load_state_dict(storage.assignable(self, state_dict), strict=strict, assign=True)
        wanted = self.load_device
        self.materialize(wanted or storage.first_device(self))
        if wanted is not None and wanted.type != "meta":
            self.to(wanted)
        return result

    # --- timm hooks ---------------------------------------------------------------------------
    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        if self.embeds is not None:  # timm NaFlexVit's
            return {"embeds.pos_embed", "embeds.cls_token", "embeds.reg_token"}
        return set(OWN_TENSORS)

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        """Parameter groups for timm's layer-wise LR decay: stem, one group per block, then the rest.

        ``coarse`` leaves the final norm out of the blocks' groups, as timm's ViT does; timm's ``Eva`` (and so
        a model with ``eva_names``) keeps it in whatever ``coarse`` says.
        """
        fine = [(r"^blocks\.(\d+)", None), (r"^norm", (99999,))]
        if self.embeds is not None:  # timm NaFlexVit's groups, whatever ``coarse`` says
            return dict(stem=r"^embeds", blocks=fine)
        return dict(
            stem=r"^cls_token|^reg_token|^dist_token|^pos_embed|^patch_embed|^norm_pre",
            blocks=r"^blocks\.(\d+)" if coarse and not self.eva_names else fine,
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
            if isinstance(module, (Attention, AttentionPool)):
                module.fused_attn = attn_impl == "sdpa"

    @torch.jit.ignore
    def set_pooled_forward(self, enable: bool = True) -> None:
        """Opt into (or out of) the pooled-token forward; see docs/models.md, "The pooled-token forward"."""
        self.pooled_forward = enable

    @torch.jit.ignore
    def set_naflex_packed(self, enable: bool = True) -> None:
        """Run NaFlex batches packed (the default) or on timm's padded, masked layout (what export takes)."""
        self.naflex_packed = enable

    # --- forward ------------------------------------------------------------------------------
    def _prefix_tokens(self) -> torch.Tensor | None:
        """(1, k, D) class, distillation and register tokens, in timm's order; None without any."""
        cls_token, dist_token, reg_token = self.cls_token, self.dist_token, self.reg_token
        if dist_token is None and reg_token is None:  # the common case, without building a list
            return cls_token
        tokens: list[torch.Tensor] = []
        for token in (cls_token, dist_token, reg_token):
            if token is not None:
                tokens.append(token)
        return tokens[0] if len(tokens) == 1 else torch.cat(tokens, dim=1)

    def _pos_embed(self, x: torch.Tensor) -> torch.Tensor:
        """Patch tokens -> (B, prefix + N, D) tokens with positions, in timm's order.

        Takes what ``patch_embed`` returns: (B, N, D) tokens, or with ``dynamic_img_size`` the
        (B, H, W, D) patch grid, whose positions the position encoding gives.
        """
        pos_embed = self.pos_embed
        if self.dynamic_img_size:
            batch, height, width, dim = x.shape
            x = x.reshape(batch, height * width, dim)
            if pos_embed is not None:  # no table, nothing to resample (DINOv3: positions are rotary)
                pos_embed = self.pos_encoding.for_grid(pos_embed, height, width, self.patch_embed.grid_size, x)
        prefix = self.cls_token if self.class_token_only else self._prefix_tokens()
        if prefix is not None:
            prefix = prefix.expand(x.shape[0], -1, -1)
        if self.no_embed_class:  # DeiT-III / DINOv2: positions for the patches only
            if pos_embed is not None:
                x = x + pos_embed
            if prefix is not None:
                x = torch.cat([prefix, x], dim=1)
        else:
            if prefix is not None:
                x = torch.cat([prefix, x], dim=1)
            if pos_embed is not None:
                x = x + pos_embed
        return self.pos_drop(x)

    def _embed(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, C, H, W) image -> the blocks' input tokens, and the rotary terms of each token (None without RoPE)."""
        if self.embeds is not None:  # timm NaFlexVit's embedding: patches, positions, prefix tokens, dropout
            x, grid = self.embeds(x)
            assert grid is not None  # an image has a grid
            height, width = grid
        else:
            patch_embed = self.patch_embed
            x = patch_embed(x)
            if self.dynamic_img_size:
                height, width = x.shape[1], x.shape[2]
            else:
                height, width = patch_embed.grid_size
            x = self._pos_embed(x)
        rope: torch.Tensor | None = None
        if self.rope is not None:
            rope = self.rope.for_grid(height, width, x.device, self.num_prefix_tokens)
        patch_drop = self.patch_drop
        if patch_drop is not None:
            if rope is not None and self.training:
                if torch.jit.is_scripting():
                    raise RuntimeError("patch dropout with rotary position trains only unscripted, in eager mode")
                x, rope = self._drop_patches_and_rope(x, rope)
            else:
                x = patch_drop(x)
        return self.norm_pre(x), rope

    @torch.jit.unused
    def _drop_patches_and_rope(self, x: torch.Tensor, rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Patch dropout that keeps each kept patch's rotary terms: (2, B, 1, kept tokens, head_dim).

        Unused by TorchScript (it compiles no isinstance of a module class): scripted, ``_embed`` raises instead."""
        patch_drop = self.patch_drop
        assert patch_drop is not None
        if not isinstance(patch_drop, PatchDropout):  # no dropout (rate 0): the Identity
            return patch_drop(x), rope
        x, keep = patch_drop.forward_with_indices(x)
        if keep is None:
            return x, rope
        prefix = self.num_prefix_tokens
        index = torch.cat([torch.arange(prefix, device=keep.device).expand(keep.shape[0], -1), keep + prefix], dim=1)
        return x, rope[:, index][:, :, None]

    def _run_blocks(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        segments: PackedSegments | None = None,
        keep: list[int] | None = None,
        norm_kept: bool = False,
        depth: int = -1,
        last_tokens: int = 0,
        rope: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The blocks, for every forward: the output and the block outputs at indices ``keep`` (normed with
        ``norm_kept``).

        Called as timm calls them: ``blocks`` as one module (so hooks on ``blocks`` fire) unless a mask,
        a packed sequence's ``segments``, kept outputs, the pooled-token forward or gradient checkpointing
        take them one by one. ``depth``: only the first ``depth`` blocks run (-1: all);
        ``last_tokens``: the last of them computes only the first ``last_tokens`` tokens. ``rope``: rotary
        terms of every token, which each block takes (as in timm's ``Eva``, the blocks then run one by one).
        """
        kept: list[torch.Tensor] = []
        if attn_mask is None and segments is None and keep is None and last_tokens == 0 and rope is None:
            if not self.grad_checkpointing:
                return self.blocks(x), kept
        checkpointing = self.grad_checkpointing and torch.is_grad_enabled()
        depth = len(self.blocks) if depth < 0 else depth
        # TorchScript unrolls this loop and allows no break in it: blocks past ``depth`` are skipped instead
        for index, block in enumerate(self.blocks):
            if index < depth:
                if last_tokens > 0 and index == depth - 1:
                    # nn.Sequential types its items as Module; each is a TransformerBlock
                    if checkpointing and not torch.jit.is_scripting():
                        x = checkpoint(block.forward_prefix, x, last_tokens, rope, use_reentrant=False)  # type: ignore[arg-type]
                    else:
                        x = block.forward_prefix(x, last_tokens, rope)  # type: ignore[operator]
                elif not torch.jit.is_scripting() and segments is not None:
                    if checkpointing:
                        x = checkpoint(block, x, segments=segments, rope=rope, use_reentrant=False)
                    else:
                        x = block(x, segments=segments, rope=rope)
                elif checkpointing and not torch.jit.is_scripting():
                    x = checkpoint(block, x, attn_mask, rope=rope, use_reentrant=False)
                else:
                    x = block(x, attn_mask, rope=rope)
                if keep is not None and index in keep:
                    kept.append(self.norm(x) if norm_kept else x)
        return x, kept

    def forward_features(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        patch_valid: torch.Tensor | None = None,
        patch_coord: torch.Tensor | None = None,
    ) -> Output:
        """(B, C, H, W) image -> (B, prefix + N, D) tokens after the final norm.

        A NaFlex batch (a dict, or patches with ``patch_coord`` and ``patch_valid``) gives timm's
        ``{'patches': (B, prefix + N, D), 'patch_valid': (B, N)}``, computed packed (zeros at padding).
        """
        # an image tensor alone decides without a Python call; TorchScript leaves this block out
        if (patch_coord is not None or patch_valid is not None or not isinstance(x, torch.Tensor)) and not (
            torch.jit.is_scripting()
        ):
            if is_naflex_call(x, patch_coord, patch_valid):
                run = self._run_naflex(x, attn_mask, patch_valid, patch_coord)
                return {"patches": run.placement.unpack(self.norm(run.tokens)), "patch_valid": run.batch.patch_valid}
        x, rope = self._embed(x)
        if attn_mask is None and rope is None and not self.grad_checkpointing:
            x = self.blocks(x)  # _run_blocks' first case, without its Python call
        else:
            x, _ = self._run_blocks(x, attn_mask, rope=rope)
        return self.norm(x)

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
        x, rope = self._embed(x)
        x, _ = self._run_blocks(x, last_tokens=num_tokens, rope=rope)
        return self.norm(x)

    def pool(
        self, x: torch.Tensor, pool_type: str | None = None, patch_valid: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, prefix + N, D) tokens -> (B, D) by ``pool_type`` (default: ``global_pool``); ``''`` keeps the tokens.

        ``patch_valid`` (B, N): NaFlex features in the padded layout; only the valid tokens are pooled.
        """
        if self.attn_pool is not None:
            tokens, keep = pooling.tokens_to_pool(x, patch_valid, self.num_prefix_tokens, self.pool_include_prefix)
            if keep is None:
                return self.attn_pool(tokens)
            return self.attn_pool(tokens, keep[:, None, None, :])
        pool_type = self.global_pool if pool_type is None else pool_type
        if pool_type == "token":  # the class token, read here (no call into models/pooling.py on that path)
            return x[:, 0]
        return pooling.pool_tokens(x, pool_type, self.num_prefix_tokens, self.pool_include_prefix, patch_valid)

    def forward_head(
        self, x: torch.Tensor, pre_logits: bool = False, patch_valid: torch.Tensor | None = None
    ) -> Output:
        """Tokens from ``forward_features`` -> logits (or the pooled pre-logit features).

        NaFlex features (the dict ``forward_features`` returns, or padded tokens with ``patch_valid``)
        pool over each image's valid tokens only.
        """
        # tokens alone decide without a Python call; TorchScript leaves this block out
        if (patch_valid is not None or not isinstance(x, torch.Tensor)) and not torch.jit.is_scripting():
            if isinstance(x, dict):
                x, patch_valid = x["patches"], x.get("patch_valid", patch_valid)
            if patch_valid is not None:
                patch_valid = check_patch_valid(x, patch_valid, self.num_prefix_tokens)
        if self.head_dist is not None:
            x_cls, x_dist = self.head_drop(x[:, 0]), self.head_drop(x[:, 1])
            if pre_logits:
                return (x_cls + x_dist) / 2
            x_cls, x_dist = self.head(x_cls), self.head_dist(x_dist)
            if self.distilled_training and self.training and not torch.jit.is_scripting():
                return x_cls, x_dist
            return (x_cls + x_dist) / 2
        x = self.fc_norm(self.pool(x, patch_valid=patch_valid))
        pre_logits_layer = self.pre_logits
        if pre_logits_layer is not None:
            x = pre_logits_layer(x)
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        patch_valid: torch.Tensor | None = None,
        patch_coord: torch.Tensor | None = None,
    ) -> Output:
        """Logits: ``forward_head(forward_features(x))``, timm's computation.

        Opted into with ``pooled_forward`` (``set_pooled_forward()``), a head that reads only
        leading tokens gets them from ``forward_pooled_tokens`` (equal logits, less work). An
        attention mask or FX tracing takes the full path.

        NaFlex: ``x`` may be timm's NaFlex batch dict (``patches``, ``patch_coord``, ``patch_valid``,
        optional ``attn_mask``), or patches with ``patch_coord`` / ``patch_valid`` as keywords or in
        timm's ``NaFlexVit`` positional order ``(patches, patch_coord, patch_valid)``.
        """
        # an image tensor alone decides without a Python call; TorchScript leaves this block out
        if (patch_coord is not None or patch_valid is not None or not isinstance(x, torch.Tensor)) and not (
            torch.jit.is_scripting()
        ):
            if is_naflex_call(x, patch_coord, patch_valid):
                run = self._run_naflex(x, attn_mask, patch_valid, patch_coord)
                return self.forward_head(run.placement.unpack(self.norm(run.tokens)), patch_valid=run.batch.patch_valid)
        if self.pooled_forward and attn_mask is None and self.pooled_token_count() > 0 and not _is_fx_proxy(x):
            return self.forward_head(self.forward_pooled_tokens(x))
        return self.forward_head(self.forward_features(x, attn_mask))

    @torch.jit.ignore
    def forward_attention(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Forward through the eager path, returning features and every block's (B, heads, N, N) attention."""
        x, rope = self._embed(x)
        maps = []
        for block in self.blocks:
            x, attn = block.forward_with_attention(x, rope)  # type: ignore[operator]  # each item is a TransformerBlock
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
    ) -> list[torch.Tensor] | tuple[Any, list[torch.Tensor]] | dict[str, Any]:
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
        take_indices, max_index = intermediates.take_indices(len(self.blocks), indices)
        request = intermediates.Request(
            take_indices, max_index, return_prefix_tokens, norm, stop_early, output_fmt, intermediates_only, output_dict
        )
        prefix = self.num_prefix_tokens
        if is_naflex_call(x, patch_coord, patch_valid):
            if output_fmt != "NLC":
                raise NaFlexBatchError(
                    "patches",
                    "forward_intermediates of a NaFlex batch gives tokens only: pass "
                    "output_fmt='NLC' (each image has its own grid; patch_coord places them)",
                )
            run = self._run_naflex(x, attn_mask, patch_valid, patch_coord, take_indices, norm, request.depth)
            padded = [run.placement.unpack(y) for y in run.kept]
            return intermediates.assemble(
                request,
                [y[:, prefix:] for y in padded],
                [y[:, :prefix] for y in padded],
                lambda: run.placement.unpack(self.norm(run.tokens)),
                extra={"patch_valid": run.batch.patch_valid},
            )
        height, width = x.shape[-2:]
        x, rope = self._embed(x)
        x, kept = self._run_blocks(x, attn_mask, keep=take_indices, norm_kept=norm, depth=request.depth, rope=rope)
        patches = [y[:, prefix:] for y in kept]
        if output_fmt == "NCHW":
            grid = self.patch_embed.dynamic_feat_size((height, width))
            patches = [intermediates.to_nchw(y, grid) for y in patches]
        return intermediates.assemble(request, patches, [y[:, :prefix] for y in kept], lambda: self.norm(x))

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
        take_indices, max_index = intermediates.take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[: max_index + 1]
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.fc_norm = nn.Identity()
            self.reset_classifier(0, "token" if self.distilled else "")
        return take_indices
