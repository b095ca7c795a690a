"""The suite's two sizes: a representative subset of the heavy parametrisations by default, and every case with
``VITSCRATCH_FULL_SWEEP=1`` (``make test FULL=1``; CI sets it, docs/testing.md lists what moves).

A sweep over the zoo's 92 rows proves the same code 92 times: the rows of one layout share every line of it,
and differ only in numbers the tests also pin elsewhere (counts, configs). By default each sweep runs the rows in
:data:`REPRESENTATIVE_ROWS`, one or more per layout of every family; the full sweep runs them all.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")

#: set to 1 to run every case of every sweep
FULL_SWEEP_ENV = "VITSCRATCH_FULL_SWEEP"
FULL_SWEEP = os.environ.get(FULL_SWEEP_ENV, "") == "1"

#: the rows a sweep over the zoo runs by default: each family's layouts (classic at the headline size and the
#: smallest and largest, DeiT's two heads, DINOv3's GELU / SwiGLU / qkv-bias / 7B forms, DINOv2's registers and
#: packed SwiGLU giant, SigLIP's MAP and GAP heads at patch 14 and 16 and its NaFlex row, EVA02's fused and
#: separate projections and CLIP towers, PE's core / spatial / lang towers, AIMv2's)
REPRESENTATIVE_ROWS = (
    "scratch_vit_ti16",
    "scratch_vit_b16",
    "scratch_vit_h14_in21k",
    "scratch_deit_ti16_distilled",
    "scratch_dinov3_s16",
    "scratch_dinov3_s16_plus_qkvb",
    "scratch_dinov3_7b16",
    "scratch_dinov2_s14_reg4",
    "scratch_dinov2_g14",
    "scratch_siglip_b16",
    "scratch_siglip_so400m14_gap",
    "scratch_siglip2_b16_naflex",
    "scratch_eva02_t14",
    "scratch_eva02_b14",
    "scratch_eva02_l14_clip",
    "scratch_pe_core_t16",
    "scratch_pe_spatial_s16",
    "scratch_pe_lang_l14",
    "scratch_aimv2_l14",
)


def rows(names: Iterable[str]) -> list[str]:
    """``names`` (rows of the zoo), or those of them in :data:`REPRESENTATIVE_ROWS` unless the full sweep runs."""
    names = list(names)
    return names if FULL_SWEEP else [name for name in names if name in REPRESENTATIVE_ROWS]


def cases(every: Iterable[T], representative: Iterable[T]) -> list[T]:
    """``every`` case with the full sweep, else the ``representative`` ones (which must be among them)."""
    every = list(every)
    if FULL_SWEEP:
        return every
    chosen = list(representative)
    missing = [case for case in chosen if case not in every]
    if missing:
        raise ValueError(f"representative cases that are not cases: {missing}")
    return chosen
