"""What libraries and recipes do with a timm ViT, done to ours and to timm's with the same weights.

Each drives the model's parts the way the code in the wild does, not through ``model(x)`` alone:
an MAE-style masked encoder, a Grad-CAM recipe hooking ``blocks[-1].norm1``, LoRA adapters from the
``peft`` library, and a CLIP-style image tower built on ``reset_classifier(0, global_pool='')``.
"""

import copy

import peft
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.support.timm_pairs import SIZE, timm_pair

TOL = 1e-5


def max_diff(a, b):
    return (a - b).abs().max().item()


def assert_equal_gradients(reference, ours, tol=TOL):
    theirs = dict(reference.named_parameters())
    compared = 0
    for name, param in ours.named_parameters():
        if param.grad is None:
            continue
        assert max_diff(param.grad, theirs[name].grad) <= tol, name
        compared += 1
    assert compared > 0


def keep_subset(tokens, keep):
    return tokens.gather(1, keep.unsqueeze(-1).expand(-1, -1, tokens.shape[-1]))


def mae_encode_with_pos_embed_method(model, images, keep):
    """A masked encoder on timm's methods: embed patches, ``_pos_embed`` (prefix tokens in front), keep
    a subset of the patch tokens, then the blocks and the final norm."""
    x = model._pos_embed(model.patch_embed(images))
    prefix, patches = x[:, : model.num_prefix_tokens], x[:, model.num_prefix_tokens :]
    x = model.norm_pre(torch.cat([prefix, keep_subset(patches, keep)], dim=1))
    return model.norm(model.blocks(x))


def mae_encode_with_pos_embed_table(model, images, keep):
    """MAE's own encoder: (B, N, D) patch tokens plus the table's patch rows, keep a subset, prepend the
    class token with its row, then the blocks and the final norm."""
    table_prefix = 0 if model.no_embed_class else 1
    x = keep_subset(model.patch_embed(images) + model.pos_embed[:, table_prefix:], keep)
    cls = model.cls_token + (model.pos_embed[:, :1] if table_prefix else 0)
    x = torch.cat([cls.expand(x.shape[0], -1, -1), x], dim=1)
    return model.norm(model.blocks(model.norm_pre(x)))


@pytest.mark.parametrize(
    "family, encode",
    [(family, mae_encode_with_pos_embed_method) for family in ("plain", "deit3", "clip_pre_norm", "distilled")]
    + [(family, mae_encode_with_pos_embed_table) for family in ("plain", "deit3", "clip_pre_norm")],
)
def test_mae_style_masked_encoder(family, encode):
    reference, ours = timm_pair(family)
    images = torch.randn(2, 3, 32, 32)
    keep = torch.rand(2, 16).argsort(dim=1)[:, :4]  # 75% masked, as MAE does
    for model in (reference, ours):
        model.train()
        model.zero_grad()
    theirs, mine = encode(reference, images, keep), encode(ours, images, keep)
    prefix = 1 if encode is mae_encode_with_pos_embed_table else ours.num_prefix_tokens
    assert mine.shape == theirs.shape == (2, prefix + 4, SIZE["embed_dim"])
    assert max_diff(mine, theirs) <= TOL
    target = torch.randn_like(theirs)
    F.mse_loss(theirs, target).backward()
    F.mse_loss(mine, target).backward()
    assert_equal_gradients(reference, ours)


def grad_cam(model, images, target_class):
    """Grad-CAM on a ViT as the pytorch-grad-cam recipe does it: hook ``blocks[-1].norm1``, reshape its
    patch tokens to a (B, D, H, W) map, weight the channels by their mean gradient for the target."""
    captured = {}

    def keep(_module, _inputs, output):
        captured["activations"] = output
        output.register_hook(lambda grad: captured.__setitem__("gradients", grad))

    handle = model.blocks[-1].norm1.register_forward_hook(keep)
    model.zero_grad()
    model(images)[:, target_class].sum().backward()
    handle.remove()
    grid_h, grid_w = model.patch_embed.grid_size

    def to_map(tokens):
        tokens = tokens[:, model.num_prefix_tokens :]
        return tokens.reshape(tokens.shape[0], grid_h, grid_w, -1).permute(0, 3, 1, 2)

    activations, gradients = to_map(captured["activations"]), to_map(captured["gradients"])
    weights = gradients.mean(dim=(2, 3), keepdim=True)
    return torch.relu((weights * activations).sum(dim=1)).detach()


@pytest.mark.parametrize("family", ["plain", "dinov2_reg", "distilled", "has_logits"])
def test_grad_cam_on_the_last_blocks_norm1(family):
    reference, ours = timm_pair(family)
    images = torch.randn(2, 3, 32, 32)
    theirs, mine = grad_cam(reference, images, 3), grad_cam(ours, images, 3)
    assert mine.shape == theirs.shape == (2, 4, 4)
    assert theirs.abs().sum() > 0 and max_diff(mine, theirs) <= TOL


@pytest.mark.slow  # peft's LoRA adapters
@pytest.mark.parametrize("family", ["plain", "map", "qk_norm"])
def test_peft_lora_adapters(family):
    reference, ours = timm_pair(family)
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        plain_logits = reference(images)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["qkv", "proj", "fc1", "fc2"], init_lora_weights=False)
    theirs = peft.get_peft_model(reference, copy.deepcopy(config))
    mine = peft.get_peft_model(ours, copy.deepcopy(config))
    adapter = peft.get_peft_model_state_dict(theirs)
    assert set(peft.get_peft_model_state_dict(mine)) == set(adapter) and len(adapter) > 0
    assert any(".attn.qkv." in key for key in adapter) and any(".mlp.fc2." in key for key in adapter)
    peft.set_peft_model_state_dict(mine, adapter)  # the same adapter on both
    trainable = {n for n, p in mine.named_parameters() if p.requires_grad}
    assert trainable == {n for n, p in theirs.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    for model in (theirs, mine):
        model.train()
        model(images).logsumexp(dim=1).sum().backward()
    assert_equal_gradients(theirs, mine)
    theirs.eval(), mine.eval()
    with torch.no_grad():
        adapted = theirs(images)
        assert max_diff(mine(images), adapted) <= TOL
    assert max_diff(adapted, plain_logits) > 1e-3  # the adapters do change the model
    merged_theirs, merged_mine = theirs.merge_and_unload(), mine.merge_and_unload()
    assert type(merged_mine) is type(ours) and not any("lora_" in n for n, _ in merged_mine.named_modules())
    state_theirs, state_mine = merged_theirs.state_dict(), merged_mine.state_dict()
    assert set(state_mine) == set(state_theirs)
    assert all(max_diff(state_mine[k], state_theirs[k]) <= TOL for k in state_theirs)
    with torch.no_grad():
        assert max_diff(merged_mine(images), merged_theirs(images)) <= TOL
        assert max_diff(merged_theirs(images), adapted) <= TOL


class ImageTower(nn.Module):
    """A CLIP-style image tower: the trunk without its classifier or pooling, the class token projected
    into the joint embedding space and normalised."""

    def __init__(self, trunk, embed_dim):
        super().__init__()
        trunk.reset_classifier(0, global_pool="")
        self.trunk = trunk
        self.proj = nn.Linear(trunk.num_features, embed_dim, bias=False)

    def forward(self, images):
        tokens = self.trunk(images)
        return F.normalize(self.proj(tokens[:, 0]), dim=-1)


@pytest.mark.parametrize("family", ["clip_pre_norm", "map", "plain"])
def test_clip_style_tower(family):
    reference, ours = timm_pair(family)
    torch.manual_seed(2)
    theirs = ImageTower(reference, 32).train()
    mine = ImageTower(ours, 32).train()
    mine.proj.load_state_dict(theirs.proj.state_dict())
    for trunk in (reference, ours):
        assert trunk.num_classes == 0 and trunk.global_pool == "" and trunk.attn_pool is None
        assert isinstance(trunk.head, nn.Identity)
    assert set(mine.state_dict()) == set(theirs.state_dict())
    images, texts = torch.randn(3, 3, 32, 32), F.normalize(torch.randn(3, 32), dim=-1)
    with torch.no_grad():
        tokens = ours(images)
        assert tokens.shape == (3, ours.num_prefix_tokens + 16, SIZE["embed_dim"])
        assert max_diff(tokens, reference(images)) <= TOL
    losses = []
    for tower in (theirs, mine):  # a contrastive step: image-text similarities against the diagonal
        logits = tower(images) @ texts.T * 10.0
        loss = F.cross_entropy(logits, torch.arange(3))
        loss.backward()
        losses.append(loss.item())
    assert abs(losses[0] - losses[1]) <= TOL
    assert_equal_gradients(theirs, mine)
