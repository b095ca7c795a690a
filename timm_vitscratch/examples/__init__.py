"""Runnable examples: ``python -m timm_vitscratch.examples.digits`` (also ``vitscratch demo``)."""
