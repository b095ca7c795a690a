"""torch.compile(fullgraph=True): no graph breaks, same results as eager, for a training step and for the
timm options that change the forward's shape logic (dynamic input size, register tokens + LayerScale, MAP pooling)."""

import copy

import pytest
import torch
import torch.nn.functional as F

from tests.support import TINY, tiny
from timm_vitscratch import VisionTransformer

pytestmark = pytest.mark.slow  # torch.compile


@pytest.mark.parametrize("attn_impl", ["sdpa", "eager"])
def test_compiled_training_step_fullgraph_matches_eager(attn_impl):
    torch._dynamo.reset()
    model = tiny(num_classes=5, attn_impl=attn_impl).train()
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, fullgraph=True)  # any graph break raises
    x = torch.randn(4, 3, 32, 32)
    y = torch.randint(0, 5, (4,))
    eager_loss = F.cross_entropy(model(x), y)
    eager_loss.backward()
    compiled_loss = F.cross_entropy(compiled(x), y)
    compiled_loss.backward()
    assert torch.allclose(compiled_loss, eager_loss, atol=1e-5)
    for (name, param), twin_param in zip(model.named_parameters(), twin.parameters(), strict=False):
        assert torch.allclose(twin_param.grad, param.grad, atol=1e-5, rtol=1e-4), name


#: option sets -> input sizes; the dynamic model runs at two sizes (the position table resampled in the graph)
COMPILED_OPTIONS = {
    "dinov2_dynamic": (
        dict(reg_tokens=2, init_values=0.1, no_embed_class=True, dynamic_img_size=True),
        [(32, 32), (48, 40)],
    ),
    "map_quick_gelu": (dict(global_pool="map", class_token=False, pre_norm=True, act_layer="quick_gelu"), [(32, 32)]),
}


@pytest.mark.parametrize("family", list(COMPILED_OPTIONS))
def test_compiled_options_fullgraph_match_eager(family):
    torch._dynamo.reset()
    options, sizes = COMPILED_OPTIONS[family]
    model = VisionTransformer(**{**TINY, "num_classes": 5, **options}).eval()
    with torch.no_grad():
        for param in model.parameters():  # no tensor at its init value (zero tokens, constant gammas)
            param.add_(torch.randn_like(param) * 0.05)
    # the dynamic model compiles once with symbolic sizes: both inputs run the same graph
    compiled = torch.compile(model, fullgraph=True, dynamic=options.get("dynamic_img_size", False))
    for height, width in sizes:
        x = torch.randn(2, 3, height, width)
        with torch.no_grad():
            assert torch.allclose(compiled(x), model(x), atol=1e-5), (family, height, width)
