"""peft LoRA on a DINOv3 scratch model gives what it gives on timm's DINOv3 (``Eva``) with the same weights.

Without a qkv bias, timm's Eva and ours call the ``qkv`` module, so LoRA on ``qkv`` (and on the MLP's linears)
changes both alike: equal outputs, equal LoRA gradients. In the ``_qkvb`` variants timm's Eva computes
``F.linear(x, qkv.weight, cat(q_bias, k_bias, v_bias))`` and never calls the ``qkv`` module, so peft's LoRA
layer there is never run: the adapter neither changes the output nor gets a gradient, in timm's model and in
ours alike. LoRA on the MLP still works in those variants.
"""

import pytest
import timm
import torch
from peft import LoraConfig, get_peft_model
from torch import nn

import timm_vitscratch  # noqa: F401  (registers the zoo)

pytestmark = pytest.mark.slow  # peft wraps and trains two models

KWARGS = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=3)
X, LABELS = torch.randn(4, 3, 48, 32, generator=torch.Generator().manual_seed(2)), torch.tensor([0, 1, 2, 0])


def _pair(ours: str, reference: str) -> tuple[nn.Module, nn.Module]:
    """Ours and timm's model with the same weights; the weights drawn away from init so every path matters."""
    torch.manual_seed(0)
    theirs = timm.create_model(reference, **KWARGS)
    with torch.no_grad():
        for param in theirs.parameters():
            param.normal_(0, 0.2)
    model = timm.create_model(ours, **KWARGS)
    model.load_state_dict(theirs.state_dict())
    return model, theirs


def _lora(model: nn.Module, targets: list[str]) -> nn.Module:
    torch.manual_seed(1)  # the same LoRA init for both (peft draws lora_A in module order, the same in both)
    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0))


def _lora_grads(model: nn.Module) -> dict[str, torch.Tensor | None]:
    return {n: p.grad for n, p in model.named_parameters() if "lora_" in n}


def _step(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward, backward and SGD step over the trainable (LoRA) parameters; the logits before and after."""
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=20.0)
    logits = model(X)
    nn.functional.cross_entropy(logits, LABELS).backward()
    optimizer.step()
    with torch.no_grad():
        return logits.detach(), model(X)


def _wrapped_pair(ours: str, reference: str, targets: list[str]) -> tuple[nn.Module, nn.Module, torch.Tensor]:
    """Ours and timm's model, same weights, eval mode, each with peft's LoRA on ``targets`` (the same init);
    and timm's output before LoRA."""
    model, theirs = _pair(ours, reference)
    model, theirs = model.eval(), theirs.eval()
    with torch.no_grad():
        base = theirs(X)
    model, theirs = _lora(model, targets), _lora(theirs, targets)
    lora_state = {n: p for n, p in theirs.named_parameters() if "lora_" in n}
    assert lora_state and {n: p for n, p in model.named_parameters() if "lora_" in n}.keys() == lora_state.keys()
    for name, param in model.named_parameters():
        if "lora_" in name:
            assert torch.equal(param, lora_state[name]), name  # the same init
    return model, theirs, base


def _trained_pair(ours: str, reference: str, targets: list[str]) -> tuple[nn.Module, nn.Module, dict]:
    model, theirs, base = _wrapped_pair(ours, reference, targets)
    return model, theirs, dict(base=base, ours=_step(model), theirs=_step(theirs))


@pytest.mark.parametrize(
    "ours,reference,mlp",
    [
        ("scratch_dinov3_s16", "vit_small_patch16_dinov3", ["fc1", "fc2"]),
        ("scratch_dinov3_s16_plus", "vit_small_plus_patch16_dinov3", ["fc1_g", "fc1_x", "fc2"]),
    ],
)
def test_lora_on_qkv_and_mlp_trains_as_on_timm_eva(ours: str, reference: str, mlp: list[str]) -> None:
    model, theirs, r = _trained_pair(ours, reference, ["qkv", *mlp])
    (before, after), (their_before, their_after) = r["ours"], r["theirs"]
    assert torch.equal(before, r["base"]) and torch.equal(their_before, r["base"])  # lora_B starts at zero
    ours_grads, their_grads = _lora_grads(model), _lora_grads(theirs)
    assert any("attn.qkv.lora_B" in n for n in ours_grads)
    for name, grad in their_grads.items():
        assert grad is not None and ours_grads[name] is not None, name
        assert torch.allclose(ours_grads[name], grad, rtol=1e-5, atol=1e-7), name
        if "lora_B" in name:
            assert grad.abs().max() > 0, name  # every adapter took part, qkv's included
    # after one step LoRA moved both models the same way
    assert (after - r["base"]).abs().max() > 1e-3
    assert torch.allclose(after, their_after, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "ours,reference",
    [
        ("scratch_dinov3_s16_qkvb", "vit_small_patch16_dinov3_qkvb"),
        ("scratch_dinov3_s16_plus_qkvb", "vit_small_plus_patch16_dinov3_qkvb"),
    ],
)
def test_lora_on_qkv_does_nothing_with_eva_split_bias_in_timm_and_ours(ours: str, reference: str) -> None:
    model, theirs, r = _trained_pair(ours, reference, ["qkv", "fc2"])
    (_, after), (_, their_after) = r["ours"], r["theirs"]
    ours_grads, their_grads = _lora_grads(model), _lora_grads(theirs)
    assert ours_grads.keys() == their_grads.keys()
    for name, grad in their_grads.items():
        if ".attn.qkv." in name:  # the qkv module is bypassed: its adapter never runs, in either model
            assert grad is None and ours_grads[name] is None, name
        else:  # the MLP's adapter runs and trains alike
            assert grad is not None and ours_grads[name] is not None, name
            assert torch.allclose(ours_grads[name], grad, rtol=1e-5, atol=1e-7), name
    assert torch.allclose(after, their_after, rtol=1e-5, atol=1e-6)

    # LoRA on qkv alone: the output is the base model's whatever the adapter holds, and nothing takes a gradient
    model, theirs, base = _wrapped_pair(ours, reference, ["qkv"])
    for peft_model in (model, theirs):
        with torch.no_grad():
            for name, param in peft_model.named_parameters():
                if "lora_B" in name:
                    param.fill_(1.0)
            assert torch.equal(peft_model(X), base)
        with pytest.raises(RuntimeError, match="does not require grad"):
            nn.functional.cross_entropy(peft_model(X), LABELS).backward()


@pytest.mark.parametrize("weight_init", ["", "jax", "moco", "reset"])
def test_fresh_qkvb_model_has_zero_q_k_v_biases_as_timm(weight_init: str) -> None:
    # the comparisons above start from timm's biases: the key bias is a buffer no checkpoint holds, so a model
    # built on meta must give it zeros itself (it held whatever its new storage held before)
    model = timm.create_model("scratch_dinov3_s16_qkvb", **KWARGS, weight_init=weight_init)
    for block in model.blocks:
        for bias in (block.attn.q_bias, block.attn.k_bias, block.attn.v_bias):
            assert torch.equal(bias, torch.zeros_like(bias))
