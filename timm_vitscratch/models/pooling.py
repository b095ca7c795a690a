"""Pooling of tokens before the head, over every token or over the valid ones of padded NaFlex features.

One function serves images and NaFlex batches: ``valid`` (B, N) marks the real patch tokens of padded
features (timm's ``patch_valid``); without it every token counts. The attention-pooling head ('map')
is a module of the model and takes the same keep mask (``tokens_to_pool``) as a key mask.
"""

# no ``from __future__ import annotations``: TorchScript compiles these functions from the model's forward
import torch


def tokens_to_pool(
    x: torch.Tensor, valid: torch.Tensor | None, num_prefix_tokens: int, include_prefix: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The tokens pooling reads (prefix tokens dropped unless ``include_prefix``) and which of them are real,
    (B, n) bool; None when all are."""
    if not include_prefix:
        x = x[:, num_prefix_tokens:]
    if valid is None:
        return x, None
    valid = valid.to(torch.bool)
    if include_prefix:
        valid = torch.cat([valid.new_ones(valid.shape[0], num_prefix_tokens), valid], dim=1)
    return x, valid


def pool_tokens(
    x: torch.Tensor,
    pool_type: str,
    num_prefix_tokens: int,
    include_prefix: bool = False,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, prefix + N, D) tokens -> (B, D) by ``pool_type`` ('token', 'avg', 'max', 'avgmax'); '' keeps them.

    ``valid`` (B, N): only the patch tokens it marks count (padding of NaFlex features is left out).
    """
    if pool_type == "token":
        return x[:, 0]
    if pool_type == "":
        return x
    x, keep = tokens_to_pool(x, valid, num_prefix_tokens, include_prefix)
    if pool_type == "avg":
        return _mean(x, keep)
    if pool_type == "max":
        return _max(x, keep)
    return 0.5 * (_max(x, keep) + _mean(x, keep))  # avgmax


def _mean(x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    if keep is None:
        return x.mean(dim=1)
    # masked_fill, not a product with the mask: padding that holds inf or NaN stays out of the sum
    return x.masked_fill(~keep.unsqueeze(-1), 0.0).sum(dim=1) / keep.sum(dim=1, keepdim=True).to(x.dtype)


def _max(x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    if keep is None:
        return x.amax(dim=1)
    return x.masked_fill(~keep.unsqueeze(-1), float("-inf")).amax(dim=1)
