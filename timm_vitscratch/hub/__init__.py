"""Model directories (timm's Hub layout) and push / pull through the Hugging Face Hub."""

from ..model_dir import check_model_directory
from .client import pull, push, register_tag_from_hub
from .failures import describe_hub_error, is_hub_failure

__all__ = ["check_model_directory", "describe_hub_error", "is_hub_failure", "pull", "push", "register_tag_from_hub"]
