"""Which registered variant a checkpoint is: architecture read from tensor shapes, checked against ``--model``."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from ..errors import ConversionError
from ..models.variants import ARCHITECTURES

Shape = Tuple[int, ...]
DEFAULT_NORM_EPS = 1e-6


@dataclass
class Arch:
    """The architecture a checkpoint's shapes (plus side config) describe."""

    patch_size: int
    embed_dim: int
    depth: int
    num_heads: Optional[int]  # None when the shapes cannot tell (fused or square projections)
    in_chans: int
    grid: Tuple[int, int]  # patch grid of the position table
    num_classes: int
    representation_size: Optional[int]
    distilled: bool
    mlp_hidden: int
    norm_eps: float = DEFAULT_NORM_EPS

    @property
    def num_prefix_tokens(self) -> int:
        return 2 if self.distilled else 1

    @property
    def img_size(self) -> Tuple[int, int]:
        return self.grid[0] * self.patch_size, self.grid[1] * self.patch_size

    def describe(self) -> str:
        heads = f", heads {self.num_heads}" if self.num_heads else ""
        rep = f", representation {self.representation_size}" if self.representation_size else ", no representation layer"
        return (f"patch {self.patch_size}, embed_dim {self.embed_dim}, depth {self.depth}{heads}{rep}, "
                f"{'distilled' if self.distilled else 'not distilled'}, {self.num_classes} classes, "
                f"img_size {self.img_size[0]}x{self.img_size[1]}")


def _need(shapes: Mapping[str, Shape], key: str, what: str, sources: Mapping[str, Tuple[str, ...]]) -> Shape:
    if key not in shapes:
        names = ", ".join(repr(s) for s in sources.get(key, (key,)))
        raise ConversionError(f"missing key: no {what} ({names})")
    return shapes[key]


def _no_variant(problem: str) -> ConversionError:
    return ConversionError(f"the tensor shapes match no ViT variant: {problem}")


def infer_arch(
    shapes: Mapping[str, Shape], depth: int, hints: Mapping[str, Any], sources: Mapping[str, Tuple[str, ...]]
) -> Arch:
    """Architecture from our-layout shapes (``sources`` names the source keys for error messages)."""
    if depth < 1:
        raise ConversionError("no transformer blocks found")
    patch = _need(shapes, "patch_embed.proj.weight", "patch embedding", sources)
    if len(patch) != 4 or patch[2] != patch[3]:
        raise _no_variant(f"patch embedding has shape {patch}, expected (embed_dim, channels, patch, patch)")
    embed_dim, in_chans, patch_size = patch[0], patch[1], patch[2]
    qkv = _need(shapes, "blocks.0.attn.qkv.weight", "attention projection in block 0", sources)
    if tuple(qkv) != (3 * embed_dim, embed_dim):
        raise _no_variant(f"attention q/k/v projection is {qkv}, expected {(3 * embed_dim, embed_dim)} for "
                          f"embed_dim {embed_dim}")
    fc1 = _need(shapes, "blocks.0.mlp.fc1.weight", "MLP in block 0", sources)
    if len(fc1) != 2 or fc1[1] != embed_dim:
        raise _no_variant(f"MLP input projection is {fc1}, expected (hidden, {embed_dim})")
    distilled = "dist_token" in shapes
    prefix = 2 if distilled else 1
    pos = _need(shapes, "pos_embed", "position embedding", sources)
    if len(pos) != 3 or pos[0] != 1 or pos[2] != embed_dim:
        raise _no_variant(f"position embedding is {pos}, expected (1, tokens, {embed_dim})")
    grid = _grid(pos[1] - prefix, hints.get("img_size"), patch_size, prefix, pos[1])
    representation = None
    if "pre_logits.fc.weight" in shapes:
        rep_shape = shapes["pre_logits.fc.weight"]
        if len(rep_shape) != 2 or rep_shape[1] != embed_dim:
            raise _no_variant(f"representation layer is {rep_shape}, expected (size, {embed_dim})")
        representation = rep_shape[0]
    num_classes = 0
    if "head.weight" in shapes:
        head = shapes["head.weight"]
        expected_in = representation or embed_dim
        if len(head) != 2 or head[1] != expected_in:
            raise _no_variant(f"classifier is {head}, expected (classes, {expected_in})")
        num_classes = head[0]
    return Arch(
        patch_size=patch_size, embed_dim=embed_dim, depth=depth, num_heads=hints.get("num_heads"),
        in_chans=in_chans, grid=grid, num_classes=num_classes, representation_size=representation,
        distilled=distilled, mlp_hidden=fc1[0], norm_eps=hints.get("norm_eps", DEFAULT_NORM_EPS),
    )


def _grid(num_patches: int, img_size: Any, patch_size: int, prefix: int, tokens: int) -> Tuple[int, int]:
    if img_size is not None:
        height, width = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        grid = (height // patch_size, width // patch_size)
        if grid[0] * grid[1] == num_patches:
            return grid
        raise _no_variant(f"position embedding has {num_patches} patch positions, but the side config's image size "
                          f"{height}x{width} at patch {patch_size} needs {grid[0] * grid[1]}")
    side = math.isqrt(max(num_patches, 0))
    if num_patches < 1 or side * side != num_patches:
        raise _no_variant(
            f"position embedding has {tokens} positions, which is not {prefix} prefix token(s) plus a square "
            f"patch grid (models that keep no class-token position, such as timm's no_embed_class, are not "
            f"supported)")
    return side, side


def _spec_core(spec: Mapping[str, Any]) -> Tuple[int, int, int, int, bool]:
    return spec["patch_size"], spec["embed_dim"], spec["depth"], spec["num_heads"], bool(spec.get("distilled"))


def _matches_core(spec: Mapping[str, Any], arch: Arch) -> bool:
    patch, dim, depth, heads, distilled = _spec_core(spec)
    return ((patch, dim, depth, distilled) == (arch.patch_size, arch.embed_dim, arch.depth, arch.distilled)
            and arch.num_heads in (None, heads) and arch.mlp_hidden == 4 * dim)


def _spec_text(name: str) -> str:
    spec = ARCHITECTURES[name]
    rep = spec.get("representation_size")
    return (f"patch {spec['patch_size']}, embed_dim {spec['embed_dim']}, depth {spec['depth']}, heads "
            f"{spec['num_heads']}, {f'representation {rep}' if rep else 'no representation layer'}, "
            f"{'distilled' if spec.get('distilled') else 'not distilled'}")


def choose_variant(arch: Arch, requested: Optional[str] = None) -> str:
    """The registered variant for ``arch``; with ``requested``, check it agrees with the shapes."""
    candidates = [name for name, spec in ARCHITECTURES.items() if _matches_core(spec, arch)]
    exact = [n for n in candidates if ARCHITECTURES[n].get("representation_size") == arch.representation_size]
    plain = [n for n in candidates if not ARCHITECTURES[n].get("representation_size")]
    if requested is not None:
        if requested not in ARCHITECTURES:
            raise ConversionError(f"unknown model {requested!r}; registered: {', '.join(ARCHITECTURES)}")
        spec_rep = ARCHITECTURES[requested].get("representation_size")
        agrees = requested in candidates and (
            requested in exact or (not spec_rep and arch.representation_size and not exact))
        if not agrees:
            better = (exact or plain or ["none of the registered variants"])[0]
            raise ConversionError(
                f"--model {requested} does not match the checkpoint: {requested} is {_spec_text(requested)}; the "
                f"checkpoint has {arch.describe()} (that is {better})")
        return requested
    if exact:
        return exact[0]
    if plain and arch.representation_size:
        return plain[0]  # e.g. a ViT-Ti with a representation layer: passed as a model argument
    if arch.mlp_hidden != 4 * arch.embed_dim:
        raise _no_variant(f"MLP width {arch.mlp_hidden} is not 4 x embed_dim {arch.embed_dim}")
    families = sorted({(s["patch_size"], s["embed_dim"], s["depth"], s["num_heads"]) for s in ARCHITECTURES.values()})
    known = "; ".join(f"patch {p}/width {w}/depth {d}/heads {h}" for p, w, d, h in families)
    raise _no_variant(f"{arch.describe()}; registered families: {known}")


def model_args(arch: Arch, name: str, img_size: Optional[Tuple[int, int]] = None) -> Dict[str, Any]:
    """The ``timm.create_model`` arguments that rebuild exactly this architecture from variant ``name``."""
    size = img_size or arch.img_size
    args: Dict[str, Any] = dict(img_size=size[0] if size[0] == size[1] else tuple(size), num_classes=arch.num_classes)
    if arch.representation_size != ARCHITECTURES[name].get("representation_size"):
        args["representation_size"] = arch.representation_size
    if arch.in_chans != 3:
        args["in_chans"] = arch.in_chans
    if arch.norm_eps != DEFAULT_NORM_EPS:
        args["norm_eps"] = arch.norm_eps
    return args
