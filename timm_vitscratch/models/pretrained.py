"""Pretrained tags: the public weights of every variant, as data, in one table.

A tag is ``variant.tag`` as timm names weights. Its ``pretrained_cfg`` points timm's own
``load_pretrained`` at the file where the weights live today (``hf_hub_id`` or ``url``, cached where
timm caches them); ``checkpoint_filter_fn`` remaps the source's key names on load. Facts are taken
from the source library's own registry where it has one, so they cannot drift:

- ``timm`` tags copy ``timm.models.get_pretrained_cfg(timm_name)`` (repo, preprocessing, license);
- ``torchvision`` tags read ``torchvision.models.ViT_*_Weights`` (URL, ``transforms()``, ``meta``);
- ``transformers`` repos (Google's ``vit-*-in21k``, a ``ViTModel`` whose pooler is our representation
  layer) are listed by hand in :data:`TRANSFORMERS_REPOS`; the repos were checked on the Hub.

The scheme: ``<source>_<data>``. timm's tags keep timm's own names (``augreg_in21k_ft_in1k``,
``orig_in21k``, ``fb_in1k``); torchvision's are ``tv_in1k``, ``tv_swag_e2e_in1k``, ``tv_swag_lin_in1k``;
Google's transformers repos are ``google_in21k``.
"""

from __future__ import annotations

import fnmatch
import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from huggingface_hub import constants as hf_constants
from huggingface_hub import get_session, try_to_load_from_cache
from huggingface_hub.utils import httpx
from timm.models import get_pretrained_cfg

#: Each variant's tags in the order timm lists its own (its first is the default), then torchvision's, then
#: Google's: ``create_model(variant, pretrained=True)`` loads the first, as timm does for an untagged name.
TIMM_TAGS: dict[str, str] = {  # our "variant.tag" -> timm's "model.tag" (weights in the repo timm/<that>)
    "scratch_vit_ti16.augreg_in21k_ft_in1k": "vit_tiny_patch16_224.augreg_in21k_ft_in1k",
    "scratch_vit_ti16.augreg_in21k": "vit_tiny_patch16_224.augreg_in21k",
    "scratch_vit_s16.augreg_in21k_ft_in1k": "vit_small_patch16_224.augreg_in21k_ft_in1k",
    "scratch_vit_s16.augreg_in1k": "vit_small_patch16_224.augreg_in1k",
    "scratch_vit_s16.augreg_in21k": "vit_small_patch16_224.augreg_in21k",
    "scratch_vit_b16.augreg2_in21k_ft_in1k": "vit_base_patch16_224.augreg2_in21k_ft_in1k",
    "scratch_vit_b16.augreg_in21k_ft_in1k": "vit_base_patch16_224.augreg_in21k_ft_in1k",
    "scratch_vit_b16.orig_in21k_ft_in1k": "vit_base_patch16_224.orig_in21k_ft_in1k",
    "scratch_vit_b16.augreg_in1k": "vit_base_patch16_224.augreg_in1k",
    "scratch_vit_b16.orig_in21k": "vit_base_patch16_224.orig_in21k",
    "scratch_vit_b16.augreg_in21k": "vit_base_patch16_224.augreg_in21k",
    "scratch_vit_b32.augreg_in21k_ft_in1k": "vit_base_patch32_224.augreg_in21k_ft_in1k",
    "scratch_vit_b32.augreg_in1k": "vit_base_patch32_224.augreg_in1k",
    "scratch_vit_b32.orig_in21k": "vit_base_patch32_224.orig_in21k",
    "scratch_vit_b32.augreg_in21k": "vit_base_patch32_224.augreg_in21k",
    "scratch_vit_l16.augreg_in21k_ft_in1k": "vit_large_patch16_224.augreg_in21k_ft_in1k",
    "scratch_vit_l16.orig_in21k": "vit_large_patch16_224.orig_in21k",
    "scratch_vit_l16.augreg_in21k": "vit_large_patch16_224.augreg_in21k",
    "scratch_vit_l32.orig_in21k": "vit_large_patch32_224.orig_in21k",
    "scratch_vit_h14.orig_in21k": "vit_huge_patch14_224.orig_in21k",
    "scratch_deit_ti16_distilled.fb_in1k": "deit_tiny_distilled_patch16_224.fb_in1k",
    "scratch_deit_s16_distilled.fb_in1k": "deit_small_distilled_patch16_224.fb_in1k",
    "scratch_deit_b16_distilled.fb_in1k": "deit_base_distilled_patch16_224.fb_in1k",
    # DINOv3 (Meta's weights, DINOv3 License), converted by timm to its Eva names
    "scratch_dinov3_s16.lvd1689m": "vit_small_patch16_dinov3.lvd1689m",
    "scratch_dinov3_s16_qkvb.lvd1689m": "vit_small_patch16_dinov3_qkvb.lvd1689m",
    "scratch_dinov3_s16_plus.lvd1689m": "vit_small_plus_patch16_dinov3.lvd1689m",
    "scratch_dinov3_s16_plus_qkvb.lvd1689m": "vit_small_plus_patch16_dinov3_qkvb.lvd1689m",
    "scratch_dinov3_b16.lvd1689m": "vit_base_patch16_dinov3.lvd1689m",
    "scratch_dinov3_b16_qkvb.lvd1689m": "vit_base_patch16_dinov3_qkvb.lvd1689m",
    "scratch_dinov3_l16.lvd1689m": "vit_large_patch16_dinov3.lvd1689m",
    "scratch_dinov3_l16.sat493m": "vit_large_patch16_dinov3.sat493m",
    "scratch_dinov3_l16_qkvb.lvd1689m": "vit_large_patch16_dinov3_qkvb.lvd1689m",
    "scratch_dinov3_l16_qkvb.sat493m": "vit_large_patch16_dinov3_qkvb.sat493m",
    "scratch_dinov3_h16_plus.lvd1689m": "vit_huge_plus_patch16_dinov3.lvd1689m",
    "scratch_dinov3_h16_plus_qkvb.lvd1689m": "vit_huge_plus_patch16_dinov3_qkvb.lvd1689m",
    "scratch_dinov3_7b16.lvd1689m": "vit_7b_patch16_dinov3.lvd1689m",
    "scratch_dinov3_7b16.sat493m": "vit_7b_patch16_dinov3.sat493m",
    # EUPE: DINOv3-shaped models distilled by Meta (FAIR Noncommercial Research License)
    "scratch_dinov3_t16_qkvb.eupe_lvd1689m": "vit_tiny_patch16_dinov3_qkvb.eupe_lvd1689m",
    "scratch_dinov3_s16_qkvb.eupe_lvd1689m": "vit_small_patch16_dinov3_qkvb.eupe_lvd1689m",
    "scratch_dinov3_b16_qkvb.eupe_lvd1689m": "vit_base_patch16_dinov3_qkvb.eupe_lvd1689m",
    # DINOv2, with and without registers (Meta's weights, Apache-2.0)
    "scratch_dinov2_s14.lvd142m": "vit_small_patch14_dinov2.lvd142m",
    "scratch_dinov2_s14_reg4.lvd142m": "vit_small_patch14_reg4_dinov2.lvd142m",
    "scratch_dinov2_b14.lvd142m": "vit_base_patch14_dinov2.lvd142m",
    "scratch_dinov2_b14_reg4.lvd142m": "vit_base_patch14_reg4_dinov2.lvd142m",
    "scratch_dinov2_l14.lvd142m": "vit_large_patch14_dinov2.lvd142m",
    "scratch_dinov2_l14_reg4.lvd142m": "vit_large_patch14_reg4_dinov2.lvd142m",
    "scratch_dinov2_g14.lvd142m": "vit_giant_patch14_dinov2.lvd142m",
    "scratch_dinov2_g14_reg4.lvd142m": "vit_giant_patch14_reg4_dinov2.lvd142m",
    # SigLIP (webli) and SigLIP 2 (v2_webli) image towers (Google's big_vision weights, Apache-2.0)
    "scratch_siglip_b16.v2_webli": "vit_base_patch16_siglip_224.v2_webli",
    "scratch_siglip_b16.webli": "vit_base_patch16_siglip_224.webli",
    "scratch_siglip_b16_256.v2_webli": "vit_base_patch16_siglip_256.v2_webli",
    "scratch_siglip_b16_256.webli": "vit_base_patch16_siglip_256.webli",
    "scratch_siglip_b16_256.webli_i18n": "vit_base_patch16_siglip_256.webli_i18n",
    "scratch_siglip_b16_384.v2_webli": "vit_base_patch16_siglip_384.v2_webli",
    "scratch_siglip_b16_384.webli": "vit_base_patch16_siglip_384.webli",
    "scratch_siglip_b16_512.v2_webli": "vit_base_patch16_siglip_512.v2_webli",
    "scratch_siglip_b16_512.webli": "vit_base_patch16_siglip_512.webli",
    "scratch_siglip_l16_256.v2_webli": "vit_large_patch16_siglip_256.v2_webli",
    "scratch_siglip_l16_256.webli": "vit_large_patch16_siglip_256.webli",
    "scratch_siglip_l16_384.v2_webli": "vit_large_patch16_siglip_384.v2_webli",
    "scratch_siglip_l16_384.webli": "vit_large_patch16_siglip_384.webli",
    "scratch_siglip_l16_512.v2_webli": "vit_large_patch16_siglip_512.v2_webli",
    "scratch_siglip_so400m14.v2_webli": "vit_so400m_patch14_siglip_224.v2_webli",
    "scratch_siglip_so400m14.webli": "vit_so400m_patch14_siglip_224.webli",
    "scratch_siglip_so400m14_378.v2_webli": "vit_so400m_patch14_siglip_378.v2_webli",
    "scratch_siglip_so400m14_378.webli": "vit_so400m_patch14_siglip_378.webli",
    "scratch_siglip_so400m14_378.webli_ft_in1k": "vit_so400m_patch14_siglip_378.webli_ft_in1k",
    "scratch_siglip_b16_gap.v2_webli": "vit_base_patch16_siglip_gap_224.v2_webli",
    "scratch_siglip_b16_gap.webli": "vit_base_patch16_siglip_gap_224.webli",
    "scratch_siglip_b16_gap_256.v2_webli": "vit_base_patch16_siglip_gap_256.v2_webli",
    "scratch_siglip_b16_gap_256.webli": "vit_base_patch16_siglip_gap_256.webli",
    "scratch_siglip_b16_gap_256.webli_i18n": "vit_base_patch16_siglip_gap_256.webli_i18n",
    "scratch_siglip_b16_gap_384.v2_webli": "vit_base_patch16_siglip_gap_384.v2_webli",
    "scratch_siglip_b16_gap_384.webli": "vit_base_patch16_siglip_gap_384.webli",
    "scratch_siglip_b16_gap_512.v2_webli": "vit_base_patch16_siglip_gap_512.v2_webli",
    "scratch_siglip_b16_gap_512.webli": "vit_base_patch16_siglip_gap_512.webli",
    "scratch_siglip_b32_256.v2_webli": "vit_base_patch32_siglip_256.v2_webli",
    "scratch_siglip_b32_gap_256.v2_webli": "vit_base_patch32_siglip_gap_256.v2_webli",
    "scratch_siglip_gopt16_256.v2_webli": "vit_giantopt_patch16_siglip_256.v2_webli",
    "scratch_siglip_gopt16_384.v2_webli": "vit_giantopt_patch16_siglip_384.v2_webli",
    "scratch_siglip_gopt16_gap_256.v2_webli": "vit_giantopt_patch16_siglip_gap_256.v2_webli",
    "scratch_siglip_gopt16_gap_384.v2_webli": "vit_giantopt_patch16_siglip_gap_384.v2_webli",
    "scratch_siglip_l16_gap_256.v2_webli": "vit_large_patch16_siglip_gap_256.v2_webli",
    "scratch_siglip_l16_gap_256.webli": "vit_large_patch16_siglip_gap_256.webli",
    "scratch_siglip_l16_gap_384.v2_webli": "vit_large_patch16_siglip_gap_384.v2_webli",
    "scratch_siglip_l16_gap_384.webli": "vit_large_patch16_siglip_gap_384.webli",
    "scratch_siglip_l16_gap_512.v2_webli": "vit_large_patch16_siglip_gap_512.v2_webli",
    "scratch_siglip_so400m14_gap.v2_webli": "vit_so400m_patch14_siglip_gap_224.v2_webli",
    "scratch_siglip_so400m14_gap.webli": "vit_so400m_patch14_siglip_gap_224.webli",
    "scratch_siglip_so400m14_gap.pali_mix": "vit_so400m_patch14_siglip_gap_224.pali_mix",
    "scratch_siglip_so400m14_gap.pali_pt": "vit_so400m_patch14_siglip_gap_224.pali_pt",
    "scratch_siglip_so400m14_gap.pali2_3b_pt": "vit_so400m_patch14_siglip_gap_224.pali2_3b_pt",
    "scratch_siglip_so400m14_gap.pali2_10b_pt": "vit_so400m_patch14_siglip_gap_224.pali2_10b_pt",
    "scratch_siglip_so400m14_gap_378.v2_webli": "vit_so400m_patch14_siglip_gap_378.v2_webli",
    "scratch_siglip_so400m14_gap_378.webli": "vit_so400m_patch14_siglip_gap_378.webli",
    "scratch_siglip_so400m14_gap_378.webli_ft_in1k": "vit_so400m_patch14_siglip_gap_378.webli_ft_in1k",
    "scratch_siglip_so400m14_gap_448.pali_mix": "vit_so400m_patch14_siglip_gap_448.pali_mix",
    "scratch_siglip_so400m14_gap_448.pali_pt": "vit_so400m_patch14_siglip_gap_448.pali_pt",
    "scratch_siglip_so400m14_gap_448.pali_refcoco_seg": "vit_so400m_patch14_siglip_gap_448.pali_refcoco_seg",
    "scratch_siglip_so400m14_gap_448.pali_ocrvqa": "vit_so400m_patch14_siglip_gap_448.pali_ocrvqa",
    "scratch_siglip_so400m14_gap_448.pali2_3b_pt": "vit_so400m_patch14_siglip_gap_448.pali2_3b_pt",
    "scratch_siglip_so400m14_gap_448.pali2_10b_pt": "vit_so400m_patch14_siglip_gap_448.pali2_10b_pt",
    "scratch_siglip_so400m14_gap_448.pali2_3b_docci": "vit_so400m_patch14_siglip_gap_448.pali2_3b_docci",
    "scratch_siglip_so400m14_gap_448.pali2_10b_docci": "vit_so400m_patch14_siglip_gap_448.pali2_10b_docci",
    "scratch_siglip_so400m14_gap_896.pali_pt": "vit_so400m_patch14_siglip_gap_896.pali_pt",
    "scratch_siglip_so400m14_gap_896.pali_refcoco_seg": "vit_so400m_patch14_siglip_gap_896.pali_refcoco_seg",
    "scratch_siglip_so400m14_gap_896.pali_ocrvqa": "vit_so400m_patch14_siglip_gap_896.pali_ocrvqa",
    "scratch_siglip_so400m14_gap_896.pali2_3b_pt": "vit_so400m_patch14_siglip_gap_896.pali2_3b_pt",
    "scratch_siglip_so400m14_gap_896.pali2_10b_pt": "vit_so400m_patch14_siglip_gap_896.pali2_10b_pt",
    "scratch_siglip_so400m16_256.v2_webli": "vit_so400m_patch16_siglip_256.v2_webli",
    "scratch_siglip_so400m16_256.webli_i18n": "vit_so400m_patch16_siglip_256.webli_i18n",
    "scratch_siglip_so400m16_384.v2_webli": "vit_so400m_patch16_siglip_384.v2_webli",
    "scratch_siglip_so400m16_512.v2_webli": "vit_so400m_patch16_siglip_512.v2_webli",
    "scratch_siglip_so400m16_gap_256.v2_webli": "vit_so400m_patch16_siglip_gap_256.v2_webli",
    "scratch_siglip_so400m16_gap_256.webli_i18n": "vit_so400m_patch16_siglip_gap_256.webli_i18n",
    "scratch_siglip_so400m16_gap_384.v2_webli": "vit_so400m_patch16_siglip_gap_384.v2_webli",
    "scratch_siglip_so400m16_gap_512.v2_webli": "vit_so400m_patch16_siglip_gap_512.v2_webli",
    # EVA02 (BAAI's weights, MIT), MIM-pretrained and fine-tuned, and the EVA02-CLIP image towers
    "scratch_eva02_t14.mim_in22k": "eva02_tiny_patch14_224.mim_in22k",
    "scratch_eva02_s14.mim_in22k": "eva02_small_patch14_224.mim_in22k",
    "scratch_eva02_b14.mim_in22k": "eva02_base_patch14_224.mim_in22k",
    "scratch_eva02_l14.mim_in22k": "eva02_large_patch14_224.mim_in22k",
    "scratch_eva02_l14.mim_m38m": "eva02_large_patch14_224.mim_m38m",
    "scratch_eva02_t14_336.mim_in22k_ft_in1k": "eva02_tiny_patch14_336.mim_in22k_ft_in1k",
    "scratch_eva02_s14_336.mim_in22k_ft_in1k": "eva02_small_patch14_336.mim_in22k_ft_in1k",
    "scratch_eva02_b14_448.mim_in22k_ft_in22k_in1k": "eva02_base_patch14_448.mim_in22k_ft_in22k_in1k",
    "scratch_eva02_b14_448.mim_in22k_ft_in1k": "eva02_base_patch14_448.mim_in22k_ft_in1k",
    "scratch_eva02_b14_448.mim_in22k_ft_in22k": "eva02_base_patch14_448.mim_in22k_ft_in22k",
    "scratch_eva02_l14_448.mim_in22k_ft_in22k_in1k": "eva02_large_patch14_448.mim_in22k_ft_in22k_in1k",
    "scratch_eva02_l14_448.mim_m38m_ft_in22k_in1k": "eva02_large_patch14_448.mim_m38m_ft_in22k_in1k",
    "scratch_eva02_l14_448.mim_in22k_ft_in1k": "eva02_large_patch14_448.mim_in22k_ft_in1k",
    "scratch_eva02_l14_448.mim_m38m_ft_in1k": "eva02_large_patch14_448.mim_m38m_ft_in1k",
    "scratch_eva02_l14_448.mim_in22k_ft_in22k": "eva02_large_patch14_448.mim_in22k_ft_in22k",
    "scratch_eva02_l14_448.mim_m38m_ft_in22k": "eva02_large_patch14_448.mim_m38m_ft_in22k",
    "scratch_eva02_b16_clip.merged2b": "eva02_base_patch16_clip_224.merged2b",
    "scratch_eva02_l14_clip.merged2b": "eva02_large_patch14_clip_224.merged2b",
    "scratch_eva02_l14_clip_336.merged2b": "eva02_large_patch14_clip_336.merged2b",
    # Perception Encoder (Meta's weights, Apache-2.0): core (CLIP towers, projected), spatial, lang
    "scratch_pe_core_t16.fb": "vit_pe_core_tiny_patch16_384.fb",
    "scratch_pe_core_s16.fb": "vit_pe_core_small_patch16_384.fb",
    "scratch_pe_core_b16.fb": "vit_pe_core_base_patch16_224.fb",
    "scratch_pe_core_l14.fb": "vit_pe_core_large_patch14_336.fb",
    "scratch_pe_core_g14.fb": "vit_pe_core_gigantic_patch14_448.fb",
    "scratch_pe_spatial_t16.fb": "vit_pe_spatial_tiny_patch16_512.fb",
    "scratch_pe_spatial_s16.fb": "vit_pe_spatial_small_patch16_512.fb",
    "scratch_pe_spatial_b16.fb": "vit_pe_spatial_base_patch16_512.fb",
    "scratch_pe_spatial_l14.fb": "vit_pe_spatial_large_patch14_448.fb",
    "scratch_pe_spatial_g14.fb": "vit_pe_spatial_gigantic_patch14_448.fb",
    "scratch_pe_lang_l14.fb": "vit_pe_lang_large_patch14_448.fb",
    "scratch_pe_lang_l14.fb_tiling": "vit_pe_lang_large_patch14_448.fb_tiling",
    "scratch_pe_lang_g14.fb": "vit_pe_lang_gigantic_patch14_448.fb",
    "scratch_pe_lang_g14.fb_tiling": "vit_pe_lang_gigantic_patch14_448.fb_tiling",
    # SigLIP 2 NaFlex image towers (Google's big_vision weights, Apache-2.0), in timm's NaFlexVit names
    "scratch_siglip2_b16_naflex.v2_webli": "naflexvit_base_patch16_siglip.v2_webli",
    "scratch_siglip2_so400m16_naflex.v2_webli": "naflexvit_so400m_patch16_siglip.v2_webli",
}

TORCHVISION_TAGS: dict[str, tuple[str, str]] = {  # "variant.tag" -> (torchvision Weights enum, member)
    "scratch_vit_b16.tv_in1k": ("ViT_B_16_Weights", "IMAGENET1K_V1"),
    "scratch_vit_b16.tv_swag_e2e_in1k": ("ViT_B_16_Weights", "IMAGENET1K_SWAG_E2E_V1"),
    "scratch_vit_b16.tv_swag_lin_in1k": ("ViT_B_16_Weights", "IMAGENET1K_SWAG_LINEAR_V1"),
    "scratch_vit_b32.tv_in1k": ("ViT_B_32_Weights", "IMAGENET1K_V1"),
    "scratch_vit_l16.tv_in1k": ("ViT_L_16_Weights", "IMAGENET1K_V1"),
    "scratch_vit_l16.tv_swag_e2e_in1k": ("ViT_L_16_Weights", "IMAGENET1K_SWAG_E2E_V1"),
    "scratch_vit_l16.tv_swag_lin_in1k": ("ViT_L_16_Weights", "IMAGENET1K_SWAG_LINEAR_V1"),
    "scratch_vit_l32.tv_in1k": ("ViT_L_32_Weights", "IMAGENET1K_V1"),
    "scratch_vit_h14.tv_swag_e2e_in1k": ("ViT_H_14_Weights", "IMAGENET1K_SWAG_E2E_V1"),
    "scratch_vit_h14.tv_swag_lin_in1k": ("ViT_H_14_Weights", "IMAGENET1K_SWAG_LINEAR_V1"),
}

#: Google's transformers-format ImageNet-21k repos (``ViTModel``: no classifier, the pooler kept), and the
#: weight file each holds on ``main`` (timm's loader takes ``model.safetensors`` first, else
#: ``pytorch_model.bin``). Preprocessing is their ``preprocessor_config.json``: resize straight to 224
#: (transformers' default bilinear), mean = std = 0.5. Checked on the Hub: repo trees of ``main``.
TRANSFORMERS_REPOS: dict[str, tuple[str, str]] = {  # "variant.tag" -> (repo id, weight file on main)
    "scratch_vit_b16_in21k.google_in21k": ("google/vit-base-patch16-224-in21k", "model.safetensors"),
    "scratch_vit_b32_in21k.google_in21k": ("google/vit-base-patch32-224-in21k", "model.safetensors"),
    "scratch_vit_l16_in21k.google_in21k": ("google/vit-large-patch16-224-in21k", "model.safetensors"),
    "scratch_vit_l32_in21k.google_in21k": ("google/vit-large-patch32-224-in21k", "pytorch_model.bin"),
    "scratch_vit_h14_in21k.google_in21k": ("google/vit-huge-patch14-224-in21k", "pytorch_model.bin"),
}

#: Model arguments a tag's weights need beyond the variant's (what ``_create`` applies for the tag):
#: transformers' ViT normalises with eps 1e-12 where timm and torchvision use 1e-6.
TAG_MODEL_ARGS: dict[str, dict[str, Any]] = {tag: {"norm_eps": 1e-12} for tag in TRANSFORMERS_REPOS}

_VIT_PAPER = ("arXiv:2010.11929", "An Image is Worth 16x16 Words: Transformers for Image Recognition at Scale")
_AUGREG_PAPER = (
    "arXiv:2106.10270",
    "How to train your ViT? Data, Augmentation, and Regularization in Vision Transformers",
)
_DEIT_PAPER = ("arXiv:2012.12877", "Training data-efficient image transformers & distillation through attention")
_DINOV3_PAPER = ("arXiv:2508.10104", "DINOv3")
_DINOV2_PAPER = ("arXiv:2304.07193", "DINOv2: Learning Robust Visual Features without Supervision")
_SIGLIP_PAPER = ("arXiv:2303.15343", "Sigmoid Loss for Language Image Pre-Training")
_SIGLIP2_PAPER = (
    "arXiv:2502.14786",
    "SigLIP 2: Multilingual Vision-Language Encoders with Improved Semantic Understanding, Localization, and "
    "Dense Features",
)
_EVA02_PAPER = ("arXiv:2303.11331", "EVA-02: A Visual Representation for Neon Genesis")
_EVA_CLIP_PAPER = ("arXiv:2303.15389", "EVA-CLIP: Improved Training Techniques for CLIP at Scale")
_PE_PAPER = (
    "arXiv:2504.13181",
    "Perception Encoder: The best visual embeddings are not at the output of the network",
)
_PALIGEMMA_PAPER = ("arXiv:2407.07726", "PaliGemma: A versatile 3B VLM for transfer")
_SWAG_PAPER = ("arXiv:2201.08371", "Revisiting Weakly Supervised Pre-Training of Visual Perception Models")
_TIMM_ORIGINS = {  # timm's tag prefix -> (paper, where the weights were first published)
    "augreg": (_AUGREG_PAPER, "https://github.com/google-research/vision_transformer"),
    "orig": (_VIT_PAPER, "https://github.com/google-research/vision_transformer"),
    "fb": (_DEIT_PAPER, "https://github.com/facebookresearch/deit"),
    "lvd1689m": (_DINOV3_PAPER, "https://github.com/facebookresearch/dinov3"),
    "sat493m": (_DINOV3_PAPER, "https://github.com/facebookresearch/dinov3"),
    "eupe": (_DINOV3_PAPER, "https://huggingface.co/timm"),
    "lvd142m": (_DINOV2_PAPER, "https://github.com/facebookresearch/dinov2"),
    "webli": (_SIGLIP_PAPER, "https://github.com/google-research/big_vision"),
    "v": (_SIGLIP2_PAPER, "https://github.com/google-research/big_vision"),  # "v2_webli": the prefix less its digits
    "pali": (_PALIGEMMA_PAPER, "https://github.com/google-research/big_vision"),  # PaliGemma's and PaliGemma 2's towers
}
#: timm's model-name pattern -> (paper, where the weights were first published), before the tag's prefix decides
#: (timm's ``fb`` tags are DeiT's and also the Perception Encoder's)
_FAMILY_ORIGINS = {
    "eva02_*_clip_*": (_EVA_CLIP_PAPER, "https://github.com/baaivision/EVA"),
    "eva02_*": (_EVA02_PAPER, "https://github.com/baaivision/EVA"),
    "vit_pe_*": (_PE_PAPER, "https://github.com/facebookresearch/perception_models"),
}
_PREPROCESSING = ("input_size", "interpolation", "crop_pct", "crop_mode", "mean", "std", "num_classes", "license")


def _paper(paper: tuple[str, str]) -> dict[str, str]:
    return {"paper_ids": paper[0], "paper_name": paper[1]}


def timm_cfg(timm_name: str) -> dict[str, Any]:
    """A timm-repo tag: timm's own cfg for the weights (its Hub repo and preprocessing)."""
    source = get_pretrained_cfg(timm_name)
    if source is None or not source.hf_hub_id or source.tag is None:
        raise KeyError(f"timm has no Hub weights {timm_name!r}")
    family = next((o for pattern, o in _FAMILY_ORIGINS.items() if fnmatch.fnmatchcase(timm_name, pattern)), None)
    paper, origin = family or _TIMM_ORIGINS[source.tag.split("_")[0].rstrip("0123456789")]
    return {
        "hf_hub_id": source.hf_hub_id,
        **{k: getattr(source, k) for k in _PREPROCESSING},
        "origin_url": f"https://huggingface.co/{source.hf_hub_id}",
        **_paper(paper),
        "description": f"timm's {timm_name} (weights first published at {origin})",
    }


#: licenses torchvision's weights declare in ``meta["license"]`` (a link), as Hub license identifiers; weights
#: that declare none are torchvision's own, under torchvision's BSD-3-Clause license
TORCHVISION_LICENSES = {"https://github.com/facebookresearch/SWAG/blob/main/LICENSE": "cc-by-nc-4.0"}


def torchvision_license(weights: Any) -> str:
    """The license of torchvision weights, as their ``meta`` records it (a new, unknown link is an error)."""
    link = weights.meta.get("license")
    if link is None:
        return "bsd-3-clause"
    if link not in TORCHVISION_LICENSES:
        raise KeyError(f"{weights} declares the license {link}, which TORCHVISION_LICENSES does not name")
    return TORCHVISION_LICENSES[link]


def torchvision_weights(enum_name: str, member: str) -> Any:
    import torchvision.models  # timm has imported it already; kept local so the table stays data

    return getattr(getattr(torchvision.models, enum_name), member)


def torchvision_cfg(enum_name: str, member: str) -> dict[str, Any]:
    """A torchvision tag: URL, preprocessing from ``weights.transforms()``, top-1 from ``weights.meta``."""
    weights = torchvision_weights(enum_name, member)
    transform = weights.transforms()
    crop, resize = transform.crop_size[0], transform.resize_size[0]
    swag = "SWAG" in member
    top1 = weights.meta["_metrics"]["ImageNet-1K"]["acc@1"]
    return {
        "url": weights.url,
        "num_classes": len(weights.meta["categories"]),
        "input_size": (3, crop, crop),
        "crop_pct": round(crop / resize, 4),
        "crop_mode": "center",
        "interpolation": transform.interpolation.value,
        "mean": tuple(transform.mean),
        "std": tuple(transform.std),
        "license": torchvision_license(weights),
        "origin_url": weights.meta.get("recipe"),
        **_paper(_SWAG_PAPER if swag else _VIT_PAPER),
        "description": f"torchvision.models.{enum_name}.{member}",
        "notes": (f"ImageNet-1k top-1 {top1} (torchvision)",),
    }


def transformers_cfg(repo_id: str) -> dict[str, Any]:
    """A Google transformers repo: no classifier; the pooler (Linear + Tanh) is the representation layer."""
    return {
        "hf_hub_id": repo_id,
        "num_classes": 0,
        "input_size": (3, 224, 224),
        "crop_pct": 1.0,
        "crop_mode": "center",
        "interpolation": "bilinear",
        "mean": (0.5, 0.5, 0.5),
        "std": (0.5, 0.5, 0.5),
        # the license each of these repos' model cards declares on the Hub
        "license": "apache-2.0",
        "origin_url": f"https://huggingface.co/{repo_id}",
        **_paper(_VIT_PAPER),
        "description": f"Google's ImageNet-21k ViT, transformers format ({repo_id}); pooler kept, head zeroed "
        "by Google and not published",
    }


@functools.cache
def pretrained_tags() -> dict[str, dict[str, Any]]:
    """Every tag: ``"variant.tag" -> pretrained-cfg fields`` (in table order)."""
    tags = {tag: timm_cfg(name) for tag, name in TIMM_TAGS.items()}
    tags.update({tag: torchvision_cfg(*ref) for tag, ref in TORCHVISION_TAGS.items()})
    tags.update({tag: transformers_cfg(repo) for tag, (repo, _) in TRANSFORMERS_REPOS.items()})
    return tags


def tag_model_args(model_tag: str) -> dict[str, Any]:
    """Model arguments the weights of ``model_tag`` need beyond the variant's architecture."""
    return dict(TAG_MODEL_ARGS.get(model_tag, {}))


@functools.cache
def imagenet_label_names(num_classes: int) -> tuple[str, ...] | None:
    """ImageNet synset names for a classifier of ``num_classes`` (as timm infers the subset), else None."""
    from timm.data import ImageNetInfo, infer_imagenet_subset

    subset = infer_imagenet_subset({"num_classes": num_classes})
    return tuple(ImageNetInfo(subset).label_names()) if subset else None


def source_of(model_tag: str) -> str:
    """``timm``, ``torchvision`` or ``transformers``: the library whose format the tag's file is in."""
    if model_tag in TIMM_TAGS:
        return "timm"
    if model_tag in TORCHVISION_TAGS:
        return "torchvision"
    if model_tag in TRANSFORMERS_REPOS:
        return "transformers"
    raise KeyError(f"{model_tag!r} is not a pretrained tag of the zoo")


def top1(cfg: Mapping[str, Any]) -> float | None:
    """The source's published ImageNet-1k top-1 recorded in a tag's notes, if any (a config's notes are
    anyone's text: a note that does not hold a number is not a top-1)."""
    notes = cfg.get("notes") or ()
    for note in [notes] if isinstance(notes, str) else notes if isinstance(notes, list | tuple) else ():
        if isinstance(note, str) and note.startswith("ImageNet-1k top-1 "):
            try:
                return float(note.split()[2])
            except (IndexError, ValueError):
                return None
    return None


# --- where a tag's weights are fetched from, and what to say when they cannot be -------------------------
@dataclass(frozen=True)
class WeightsSource:
    """Where timm's ``load_pretrained`` fetches a cfg's weights, and where it caches them."""

    kind: str  # "hf-hub" or "url"
    location: str  # the repo id (``ORG/NAME[@revision]``) or the URL
    filename: str  # the file the source holds (what to download by hand)
    cache_path: Path  # hf-hub: the repo's folder in the Hugging Face cache; url: the cached file itself
    tried: tuple[str, ...] = ()  # hf-hub: the files timm's loader asks for, in its order

    @property
    def repo_id(self) -> str:
        return self.location.split("@")[0]

    @property
    def revision(self) -> str | None:
        return self.location.partition("@")[2] or None


def weights_source(cfg: Mapping[str, Any]) -> WeightsSource | None:
    """The remote source of a resolved pretrained cfg, by timm's order (a file or state dict given in the cfg
    comes first, then the Hub, then the URL); None when nothing is fetched."""
    if cfg.get("state_dict") is not None or cfg.get("file") or cfg.get("source") == "local-dir":
        return None
    hub_id = cfg.get("hf_hub_id")
    if hub_id:
        repo = hub_id.split("@")[0]
        named = cfg.get("hf_hub_filename")
        filename = named or next(
            (file for repo_id, file in TRANSFORMERS_REPOS.values() if repo_id == repo), HUB_WEIGHTS_FILE
        )
        # timm's load_state_dict_from_hf: a .safetensors file as named; otherwise (pytorch_model.bin when the cfg
        # names none) its safetensors alternative first
        asked = named or "pytorch_model.bin"
        if asked == "pytorch_model.bin":
            tried: tuple[str, ...] = (HUB_WEIGHTS_FILE, asked)
        elif asked.endswith(".bin"):
            tried = (asked.removesuffix(".bin") + ".safetensors", asked)
        else:
            tried = (asked,)
        # the cache layout huggingface_hub documents: <HF_HUB_CACHE>/models--ORG--NAME/snapshots/<commit>/<file>
        folder = Path(hf_constants.HF_HUB_CACHE) / ("models--" + repo.replace("/", "--"))
        return WeightsSource("hf-hub", hub_id, filename, folder, tried)
    url = cfg.get("url")
    if url:
        import torch.hub

        filename = os.path.basename(urlparse(url).path)  # what torch.hub.load_state_dict_from_url caches it as
        return WeightsSource("url", url, filename, Path(torch.hub.get_dir()) / "checkpoints" / filename)
    return None


#: seconds the one request that tells whether a weights source answers may wait (``HF_HUB_ETAG_TIMEOUT``, when
#: set, instead: huggingface_hub's own wait for a file's metadata)
PROBE_S = 3.0


def probe_seconds() -> float:
    """How long :func:`unreachable` waits: ``PROBE_S``, or ``HF_HUB_ETAG_TIMEOUT`` where the user set it."""
    if hf_constants.HF_HUB_ETAG_TIMEOUT != hf_constants.DEFAULT_ETAG_TIMEOUT:
        return float(hf_constants.HF_HUB_ETAG_TIMEOUT)
    return PROBE_S


def server_of(source: WeightsSource) -> str:
    """The server a source's weights come from: the Hub's endpoint (``HF_ENDPOINT``), or the URL's host."""
    if source.kind == "hf-hub":
        return f"the Hub at {hf_constants.ENDPOINT}"
    parts = urlparse(source.location)
    return f"{parts.scheme}://{parts.netloc}"


def unreachable(source: WeightsSource) -> Exception | None:
    """Why the server of ``source`` cannot be reached, from one request with a short timeout; None when it
    answers (any HTTP status), or when it is not asked over HTTP.

    Without a network, huggingface_hub asks for each file six times with pauses between (about 25 s a file,
    two files for a tag), and a server that takes the connection but never answers holds every request for
    its whole timeout (torch.hub's downloads have none). One short request first says it in seconds.
    """
    # a bare request: huggingface_hub's build_hf_headers may itself ask the endpoint for its agent registry first
    url = hf_constants.ENDPOINT.rstrip("/") + "/" if source.kind == "hf-hub" else source.location
    if urlparse(url).scheme not in ("http", "https"):
        return None
    try:
        get_session().head(url, timeout=probe_seconds(), follow_redirects=False)
    except httpx.TransportError as error:
        return error
    return None


def cached_weights(source: WeightsSource) -> tuple[str, str] | None:
    """``(file, commit)``: the first of the files timm's loader takes that the Hugging Face cache holds at the
    source's revision (``main`` when it names none), or None."""
    for name in source.tried:
        found = try_to_load_from_cache(source.repo_id, name, revision=source.revision)
        if isinstance(found, str):
            return name, Path(found).parent.name
    return None


def first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _root_cause(error: BaseException) -> BaseException:
    """The error that says why: the Hub's own answer, else the innermost cause (the refused connection
    behind huggingface_hub's "cannot find the requested files" or urllib's URLError)."""
    from huggingface_hub.errors import HfHubHTTPError

    seen = {id(error)}
    while not isinstance(error, HfHubHTTPError):
        cause = error.__cause__ or error.__context__
        if cause is None or id(cause) in seen:
            break
        error = cause
        seen.add(id(error))
    return error


def download_failed(error: BaseException) -> str:
    """Why the weights were not fetched, when their download failed: the innermost cause, in one line."""
    return f"the download failed ({first_line(_root_cause(error))})"


def not_reached(source: WeightsSource, error: BaseException) -> str:
    """Why the weights were not fetched, when their server did not answer :func:`unreachable`."""
    if isinstance(error, httpx.TimeoutException):
        return f"{server_of(source)} did not answer within {probe_seconds():g} s ({first_line(error)})"
    return f"{server_of(source)} cannot be reached ({first_line(error)})"


OFFLINE = "HF_HUB_OFFLINE=1 is set, so nothing is downloaded"


def unavailable_weights_message(name: str, source: WeightsSource, why: str, cached: str | None = None) -> str:
    """One message for weights that could not be fetched: the tag, where they come from (the files tried),
    ``why`` not, the cache path where they would be found, and how to provide them. ``cached``: what the cache
    does hold, when it is not what the load can take without the network."""
    if source.kind == "hf-hub":
        files = ", else ".join(source.tried)
        origin = f"the Hugging Face Hub repo {source.location} (files: {files})"
        held = cached or f"the Hugging Face cache has no copy in {source.cache_path}"
        fill = (
            f"run `hf download {source.repo_id} {source.filename}` on a machine with network and copy "
            f"{source.cache_path} into this machine's cache (HF_HUB_CACHE)"
        )
    else:
        origin = source.location
        held = cached or f"torch's cache has no copy at {source.cache_path}"
        fill = f"download that URL on a machine with network and put the file at {source.cache_path}"
    offline = "" if why == OFFLINE else " With HF_HUB_OFFLINE=1 nothing is asked of the network."
    return (
        f"cannot load the pretrained weights of {name!r} from {origin}: {why}, and {held}. To provide them "
        f"offline, {fill}; or pass pretrained_cfg_overlay=dict(file='/path/to/{source.filename}') to "
        f"timm.create_model (train.py: --pretrained-path).{offline}"
    )


def weights_without_network(name: str, source: WeightsSource, error_type: Callable[[str], Exception]) -> str | None:
    """Before a load fetches anything: None when the weights' server answers (or the load needs no network);
    the commit to load from the cache when the Hub cannot be reached and the cache holds the weights.
    Raises ``error_type`` (the loader's :class:`~timm_vitscratch.errors.PretrainedWeightsUnavailable`) at once
    otherwise."""
    if source.kind == "url" and source.cache_path.is_file():
        return None  # torch.hub reads its cache without asking
    error = unreachable(source)
    if error is None:
        return None
    found = cached_weights(source) if source.kind == "hf-hub" else None
    if found is not None and found[0] == HUB_WEIGHTS_FILE:
        return found[1]  # pinned to the commit, huggingface_hub reads the file from the cache and asks nothing
    held = None
    if found is not None:  # timm would ask the Hub for model.safetensors first, retrying, before taking this
        held = (
            f"the Hugging Face cache holds only {found[0]} (commit {found[1]}); set HF_HUB_OFFLINE=1 to load it "
            "from there"
        )
    raise error_type(unavailable_weights_message(name, source, not_reached(source, error), held))


# --- Hub weights, fetched through the Hub client's checks before timm loads them ---------------------------
#: the file of a Hub repo our entry function fetches before timm's loader reads it (timm takes it first)
HUB_WEIGHTS_FILE = "model.safetensors"
#: ``(repo_id, revision or None, cache_dir or None) -> commit id``: puts the repo's weights at the revision into
#: the Hugging Face cache, checked, and says which commit they are at. Set by the package (its ``__init__``) to
#: :func:`timm_vitscratch.hub.timm_weights.fetch_weights`, a layer above this one.
HubWeightsFetcher = Callable[[str, "str | None", "str | os.PathLike[str] | None"], str]
_hub_weights_fetcher: list[HubWeightsFetcher] = []


def set_hub_weights_fetcher(fetch: HubWeightsFetcher) -> None:
    """Set the function that fetches a Hub repo's weights before timm loads them (see :data:`HubWeightsFetcher`)."""
    _hub_weights_fetcher[:] = [fetch]


def fetch_hub_weights(repo_id: str, revision: str | None, cache_dir: str | os.PathLike[str] | None) -> str:
    """The commit id at which the repo's weights now lie in the cache, fetched by the function set; its errors
    pass on. Without one set (the package's ``__init__`` always sets it), nothing is fetched unchecked."""
    if not _hub_weights_fetcher:
        raise RuntimeError(
            f"cannot fetch the weights of {repo_id}: no Hub weights fetcher is set (import timm_vitscratch)"
        )
    return _hub_weights_fetcher[0](repo_id, revision, cache_dir)
