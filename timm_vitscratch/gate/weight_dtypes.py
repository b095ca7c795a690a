"""The one rule on the dtypes of weights, which every route applies to the tensors that become model weights.

A Vision Transformer's weights are floating point: float32, float16, bfloat16 or float64 (cast to the
model's dtype on load, as any float is). Every other dtype (the float8 kinds, integers, bool, complex) is
refused by name: casting it would change the values silently (a complex number loses its imaginary part,
float8 or int8 weights are quantised and need their scales). No route casts them; a file that holds
them is re-saved by its owner in a float dtype.

Tensors a checkpoint carries that do not become weights (``num_batches_tracked``, Meta's ``bias_mask``,
transformers' ``position_ids``) are dropped by the layouts before this rule runs, so they are not refused.
Callers: ``convert`` (``convert/plan.py``), timm's loading of ``local-dir:``, ``hf-hub:`` and
``load_checkpoint`` (``models/checkpoint_filter.py``), the model-directory check of ``pull``, ``push``,
``export`` and ``summary`` (``model_dir.py``), and the safetensors reader for dtypes it cannot read.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .files import ErrorType

#: the dtypes a weight may have
WEIGHT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
#: their names in safetensors headers
WEIGHT_SAFETENSORS_NAMES = ("F32", "F16", "BF16", "F64")
#: safetensors' dtype names, as torch names them (for messages)
SAFETENSORS_TORCH_NAMES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "F8_E5M2": "float8_e5m2",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E8M0": "float8_e8m0fnu",
    "I16": "int16",
    "U16": "uint16",
    "F16": "float16",
    "BF16": "bfloat16",
    "I32": "int32",
    "U32": "uint32",
    "F32": "float32",
    "F64": "float64",
    "I64": "int64",
    "U64": "uint64",
    "C64": "complex64",
    "C128": "complex128",
}
EXPECTED = "float32, float16, bfloat16 or float64"


def dtype_name(dtype: torch.dtype | str) -> str:
    """``float8_e4m3fn`` for ``torch.float8_e4m3fn`` and for safetensors' ``F8_E4M3``."""
    if isinstance(dtype, torch.dtype):
        return str(dtype).removeprefix("torch.")
    return SAFETENSORS_TORCH_NAMES.get(dtype, str(dtype)[:20])


def is_weight_dtype(dtype: torch.dtype | str) -> bool:
    """A dtype (torch's, or a safetensors name) that weights may have."""
    if isinstance(dtype, torch.dtype):
        return dtype in WEIGHT_DTYPES
    return dtype in WEIGHT_SAFETENSORS_NAMES


def not_weight_message(named: list[tuple[str, str]]) -> str:
    """``tensor 'x' is int64 (and ...); ...``: the first few tensors by name and dtype, and what is expected."""
    shown = ", ".join(f"{name[:200]!r} ({dtype})" for name, dtype in named[:3])
    more = f" and {len(named) - 3} more" if len(named) > 3 else ""
    what = "tensor" if len(named) == 1 else "tensors"
    return (
        f"{what} {shown}{more} would become model weights but {'is' if len(named) == 1 else 'are'} not float32, "
        f"float16, bfloat16 or float64; weights of another dtype (float8, integer, bool, complex) are refused, "
        f"never cast: cast them to a float dtype and save the file again"
    )


def check_weight_dtypes(tensors: Iterable[tuple[str, torch.dtype | str]], where: str, error: ErrorType) -> None:
    """Refuse (``error("<where>: ...")``) the tensors, among those that become model weights, whose dtype is not
    one of :data:`WEIGHT_DTYPES`, naming them and their dtypes."""
    odd = [(name, dtype_name(dtype)) for name, dtype in tensors if not is_weight_dtype(dtype)]
    if odd:
        raise error(f"{where}: {not_weight_message(odd)}" if where else not_weight_message(odd))
