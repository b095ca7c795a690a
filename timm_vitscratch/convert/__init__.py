"""Weight conversion: timm, torchvision, Hugging Face transformers and JAX checkpoints -> scratch models, and back.

``convert(src, out_dir, ...)`` writes a model directory (``model.safetensors`` + timm's ``config.json``)
that ``timm.create_model("local-dir:OUT_DIR", pretrained=True)`` loads; ``export(model_dir, to, out)``
writes the weights back out as a timm or torchvision state dict or a JAX ``.npz``.
"""

from ..errors import ConversionError, VerificationError
from ..layouts.reader import open_checkpoint
from .converter import ConversionResult, convert
from .export import ExportResult, export
from .formats import detect_format
from .verify import DEFAULT_TOLERANCE

__all__ = [
    "DEFAULT_TOLERANCE",
    "ConversionError",
    "ConversionResult",
    "ExportResult",
    "VerificationError",
    "convert",
    "detect_format",
    "export",
    "open_checkpoint",
]
