"""timm's submodule contracts: what code outside timm reads or calls on a timm ViT behaves as timm's.

The patch embedding's layout and attributes, ``_pos_embed``, the model's token and module
attributes, the attention's ``fused_attn`` / ``q_norm`` / ``k_norm`` / ``attn_drop`` / ``scale``, and
timm's own ``AttentionExtract`` (module hooks and FX nodes, the last block included); each against
timm's model holding the same weights.
"""

import pytest
import torch
from timm.layers import set_fused_attn as set_timm_default_fused_attn
from timm.layers import use_fused_attn
from timm.utils import AttentionExtract
from torch import nn

from tests.support.timm_pairs import FAMILIES, SIZE, input_size, set_fused_attn, timm_pair

TOL = 1e-5
PATCH_EMBED_ATTRIBUTES = (
    "num_patches",
    "grid_size",
    "img_size",
    "patch_size",
    "dynamic_img_pad",
    "strict_img_size",
    "flatten",
    "output_fmt",
)
MODEL_ATTRIBUTES = (
    "num_prefix_tokens",
    "has_class_token",
    "no_embed_class",
    "cls_token",
    "reg_token",
    "pos_embed",
    "pos_drop",
    "patch_drop",
    "norm_pre",
    "blocks",
    "norm",
    "fc_norm",
    "head_drop",
    "head",
    "attn_pool",
    "num_features",
    "embed_dim",
    "global_pool",
    "dynamic_img_size",
    "pool_include_prefix",
)


def assert_same_behaviour(name, theirs, mine, probe):
    """``mine`` stands where ``theirs`` does: equal values, equal tensors, or modules of the same kind
    that compute the same output for ``probe`` (and drop at the same rate)."""
    if theirs is None or isinstance(theirs, (bool, int, float, str, tuple)):
        assert mine == theirs, (name, mine, theirs)
    elif isinstance(theirs, torch.Tensor):
        assert isinstance(mine, torch.Tensor) and isinstance(mine, nn.Parameter) == isinstance(theirs, nn.Parameter)
        assert mine.shape == theirs.shape and torch.equal(mine, theirs), name
    else:
        assert isinstance(mine, nn.Module) and isinstance(theirs, nn.Module), name
        assert isinstance(mine, nn.Sequential) == isinstance(theirs, nn.Sequential), name
        assert len(list(mine.children())) == len(list(theirs.children())), name
        assert getattr(mine, "p", None) == getattr(theirs, "p", None), name  # dropout rates
        assert mine.training == theirs.training, name
        with torch.no_grad():
            out, expected = mine(probe), theirs(probe)
        assert out.shape == expected.shape and (out - expected).abs().max() <= TOL, name


@pytest.mark.parametrize(
    "options", [dict(), dict(dynamic_img_size=True), dict(dynamic_img_size=True, dynamic_img_pad=True)]
)
def test_patch_embed_layout_and_attributes(options):
    reference, ours = timm_pair("plain", **options)
    for name in PATCH_EMBED_ATTRIBUTES:
        assert getattr(ours.patch_embed, name) == getattr(reference.patch_embed, name), name
    assert ours.patch_embed.feat_ratio() == reference.patch_embed.feat_ratio() == 8
    assert ours.patch_embed.feat_ratio(as_scalar=False) == reference.patch_embed.feat_ratio(as_scalar=False)
    sizes = [(32, 32)] + ([(40, 48)] if options else []) + ([(37, 45)] if options.get("dynamic_img_pad") else [])
    for size in sizes:
        assert ours.patch_embed.dynamic_feat_size(size) == reference.patch_embed.dynamic_feat_size(size)
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            mine, theirs = ours.patch_embed(x), reference.patch_embed(x)
        # (B, N, D) tokens; with dynamic_img_size the (B, H, W, D) grid
        assert mine.shape == theirs.shape == ((2, 16, 64) if not options else (2, *theirs.shape[1:3], 64))
        assert (mine - theirs).abs().max() <= TOL


@pytest.mark.parametrize("family", ["plain", "deit3", "dinov2_reg", "distilled", "avg_fc_norm"])
def test_pos_embed_takes_and_returns_what_timms_does(family):
    reference, ours = timm_pair(family)
    x = torch.randn(2, 3, *input_size(family))
    with torch.no_grad():
        patches = reference.patch_embed(x)
        mine, theirs = ours._pos_embed(patches), reference._pos_embed(patches)
    assert mine.shape == theirs.shape and (mine - theirs).abs().max() <= TOL
    height, width = input_size(family)
    assert mine.shape == (2, ours.num_prefix_tokens + (height // 8) * (width // 8), SIZE["embed_dim"])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_model_attributes_behave_as_timms(family):
    reference, ours = timm_pair(family)
    tokens = torch.randn(2, ours.num_prefix_tokens + ours.patch_embed.num_patches, SIZE["embed_dim"])
    for name in MODEL_ATTRIBUTES:
        if family == "distilled" and name == "patch_drop":
            continue
        probe = tokens[:, 0] if name in ("head", "fc_norm", "head_drop") else tokens
        if name == "attn_pool" and ours.attn_pool is not None:
            probe = tokens[:, ours.num_prefix_tokens :]
        if family == "has_logits" and name == "head_drop":  # timm's runs the representation put back
            assert ours.head_drop.p == reference.head_drop.p
            continue
        assert_same_behaviour(name, getattr(reference, name), getattr(ours, name), probe)
    assert isinstance(ours.blocks, nn.Sequential) and len(ours.blocks) == len(reference.blocks)


@pytest.mark.parametrize("family", ["plain", "qk_norm"])
def test_attention_attributes_behave_as_timms(family):
    reference, ours = timm_pair(family)
    queries = torch.randn(2, 4, 17, 16)
    for theirs, mine in ((b.attn, o.attn) for b, o in zip(reference.blocks, ours.blocks, strict=False)):
        assert mine.fused_attn is theirs.fused_attn is use_fused_attn()
        assert mine.scale == theirs.scale == 16**-0.5
        for name in ("q_norm", "k_norm", "attn_drop"):
            assert_same_behaviour(name, getattr(theirs, name), getattr(mine, name), queries)


def test_fused_attn_switch_per_module_as_in_timm():
    """Turning ``fused_attn`` off on one attention layer sends it through the eager path alone."""
    reference, ours = timm_pair("plain")
    seen = {}
    x = torch.randn(2, 3, 32, 32)
    for label, model in (("timm", reference), ("ours", ours)):
        model.blocks[1].attn.fused_attn = False
        seen[label] = [None, None]
        for index, block in enumerate(model.blocks):
            block.attn.attn_drop.register_forward_hook(
                lambda _m, _i, out, index=index, label=label: seen[label].__setitem__(index, out)
            )
        with torch.no_grad():
            model(x)
    assert seen["ours"][0] is None and seen["timm"][0] is None
    assert seen["ours"][1].shape == seen["timm"][1].shape == (2, 4, 17, 17)
    assert (seen["ours"][1] - seen["timm"][1]).abs().max() <= TOL


@pytest.fixture
def eager_attention_by_default():
    """What ``TIMM_FUSED_ATTN=0`` does: timm's default attention path (read at build time) is the eager one."""
    was = use_fused_attn()
    set_timm_default_fused_attn(False)
    yield
    set_timm_default_fused_attn(was)


@pytest.mark.slow  # timm's AttentionExtract, fx tracing included
@pytest.mark.parametrize("method", ["hook", "fx"])
@pytest.mark.parametrize("family", ["plain", "dinov2_reg", "distilled", "map"])
def test_attention_extract_gives_timms_maps(eager_attention_by_default, family, method):
    reference, ours = timm_pair(family)
    assert not ours.blocks[0].attn.fused_attn and ours.attn_impl == "eager"
    x = torch.randn(2, 3, *input_size(family))
    with torch.no_grad():
        theirs = AttentionExtract(reference, method=method)(x)
        mine = AttentionExtract(ours, method=method)(x)
    assert list(mine) == list(theirs) and len(theirs) == SIZE["depth"]  # one map per block, the last included
    tokens = ours.num_prefix_tokens + (24 if family == "dinov2_reg" else 16)
    for name in theirs:
        assert mine[name].shape == theirs[name].shape == (2, SIZE["num_heads"], tokens, tokens), name
        assert (mine[name] - theirs[name]).abs().max() <= TOL, name


@pytest.mark.slow  # timm's AttentionExtract, fx tracing included
def test_attention_extract_after_switching_fused_attn_off():
    """The other way users get there: ``fused_attn = False`` on each attention layer of a built model."""
    reference, ours = timm_pair("plain")
    for model in (reference, ours):
        set_fused_attn(model, False)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        theirs = AttentionExtract(reference, method="hook")(x)
        mine = AttentionExtract(ours, method="hook")(x)
    assert mine["blocks.1.attn.attn_drop"].shape == (1, 4, 17, 17)
    for name in theirs:
        assert (mine[name] - theirs[name]).abs().max() <= TOL
