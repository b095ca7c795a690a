"""torch.compile(fullgraph=True) of a training step: no graph breaks, same loss and gradients as eager."""
import copy

import pytest
import torch
import torch.nn.functional as F

from tests.support import tiny


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
    for (name, param), twin_param in zip(model.named_parameters(), twin.parameters()):
        assert torch.allclose(twin_param.grad, param.grad, atol=1e-5, rtol=1e-4), name
