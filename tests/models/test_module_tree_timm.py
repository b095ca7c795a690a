"""Inside as well as outside: every module of timm's ViT exists in ours and its hooks see timm's tensors.

Generic over the module tree: for each option family, timm's model and ours hold the same weights;
a forward hook and a full backward hook go on every named module of timm's model (the root
included) and on the module of that name in ours. After one forward and backward pass, each module
fired as often in both, with equal outputs and equal output gradients, and every parameter's
gradient is equal. In eval, and in training with every dropout rate at zero; through the fused
attention path and the eager one (timm's ``fused_attn`` off, where ``attn_drop`` sees the attention
matrix). Ours may hold modules of its own besides timm's.
"""

from collections import defaultdict

import pytest
import torch

from tests.support.timm_pairs import FAMILIES, SIZE, input_size, set_fused_attn, timm_pair

TOL = 1e-5


def _tokens(out):
    """A module's output tensor: the tokens of timm NaFlexVit's ``embeds``, which returns (tokens, grid)."""
    return out[0] if isinstance(out, tuple) else out


def hooked_pass(model, names, x, weights, forward_only=()):
    """Run forward and backward with hooks on ``names``; return per-module outputs and output gradients
    (one entry per call, in call order) and the gradient of every parameter and of the input. ``forward_only``:
    names that get the forward hook alone (timm adds in place to what they return, which a backward hook forbids)."""
    outputs, grads = defaultdict(list), defaultdict(list)
    modules = dict(model.named_modules())
    handles = []
    for name in names:
        module = modules[name]
        handles.append(
            module.register_forward_hook(
                lambda _m, _i, out, name=name: outputs[name].append(_tokens(out).detach().clone())
            )
        )
        if name in forward_only:
            continue
        handles.append(
            module.register_full_backward_hook(
                lambda _m, _gin, gout, name=name: grads[name].append(gout[0].detach().clone())
            )
        )
    model.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_()
    logits = model(x)
    (logits * weights).sum().backward()
    for handle in handles:
        handle.remove()
    params = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    params["<input image>"] = x.grad
    return outputs, grads, params


def max_diffs(expected, actual):
    """Per name: the largest |difference| over all calls, or None when call counts or shapes differ."""
    result = {}
    for name, theirs in expected.items():
        mine = actual.get(name, [])
        if len(mine) != len(theirs) or any(a.shape != b.shape for a, b in zip(mine, theirs, strict=False)):
            result[name] = None
        else:
            result[name] = max((a - b).abs().max().item() for a, b in zip(mine, theirs, strict=False))
    return result


def unequal(theirs, mine, tol, their_params=None):
    """What differs between two :func:`hooked_pass` results beyond ``tol``: per kind (outputs, output gradients,
    parameter gradients), the names whose values differ or whose calls do not match (None). ``their_params``:
    the reference's parameter gradients when they need renaming first (default: its own)."""
    params = theirs[2] if their_params is None else their_params
    return {
        what: {n: d for n, d in max_diffs(t, m).items() if d is None or d > tol}
        for what, t, m in (
            ("outputs", theirs[0], mine[0]),
            ("output gradients", theirs[1], mine[1]),
            ("parameter gradients", {k: [v] for k, v in params.items()}, {k: [v] for k, v in mine[2].items()}),
        )
    }


NOTHING_UNEQUAL = {"outputs": {}, "output gradients": {}, "parameter gradients": {}}


def compare_module_trees(family, mode, fused, **overrides):
    """The comparison for one family / mode / attention path (at ``SIZE`` unless ``overrides`` say):
    a dict of counts and what differed."""
    reference, ours = timm_pair(family, **overrides)
    for model in (reference, ours):
        model.train(mode == "train")
        set_fused_attn(model, fused)
    names = [name for name, _ in reference.named_modules()]
    our_names = {name for name, _ in ours.named_modules()}
    torch.manual_seed(1)
    size = overrides.get("img_size")
    x = torch.randn(2, 3, *((size, size) if size else input_size(family)))
    weights = torch.randn(2, overrides.get("num_classes", SIZE["num_classes"]))
    theirs = hooked_pass(reference, names, x, weights)
    mine = hooked_pass(ours, [n for n in names if n in our_names], x, weights)
    output_diffs = max_diffs(theirs[0], mine[0])
    grad_diffs = max_diffs(theirs[1], mine[1])
    param_diffs = max_diffs({k: [v] for k, v in theirs[2].items()}, {k: [v] for k, v in mine[2].items()})
    return dict(
        modules=len(names),
        missing=sorted(set(names) - our_names),
        fired=len(theirs[0]),
        silent=sorted(set(names) - set(theirs[0])),
        # fired in ours but not in timm's (a timm module whose hook timm never calls)
        extra_calls=sorted(n for n in mine[0] if n not in theirs[0]),
        bad_outputs={n: d for n, d in output_diffs.items() if d is None or d > TOL},
        backward=len(theirs[1]),
        bad_grads={n: d for n, d in grad_diffs.items() if d is None or d > TOL},
        params=len(theirs[2]),
        bad_params={n: d for n, d in param_diffs.items() if d is None or d > TOL},
    )


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "eager"])
@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_timm_module_fires_with_timms_tensors(family, mode, fused):
    report = compare_module_trees(family, mode, fused)
    assert report["missing"] == [], report["missing"]
    assert report["extra_calls"] == [], report["extra_calls"]
    assert report["bad_outputs"] == {}, report["bad_outputs"]
    assert report["bad_grads"] == {}, report["bad_grads"]
    assert report["bad_params"] == {}, report["bad_params"]
    # the hooks did fire: timm calls every module but attn_drop on the fused path (the attention
    # matrix is never formed) and fc_norm in DeiT's distilled head; all that fired had gradients
    never_called = [n for n in report["silent"] if not (n.endswith(".attn_drop") and fused)]
    assert never_called == (["fc_norm"] if family == "distilled" else []), never_called
    assert report["backward"] == report["fired"]
    print(
        f"{family} {mode} {'fused' if fused else 'eager'}: {report['fired']}/{report['fired']} timm modules "
        f"fire with equal outputs ({report['modules']} named), {report['backward']}/{report['backward']} "
        f"equal output gradients, {report['params']}/{report['params']} equal parameter gradients"
    )
