"""What a caller or a file may choose: the names each named option takes, the checkpoint sources, the
dtypes of written weights, and the bounds of the sizes a file may ask for.

Plain data that imports nothing, so that the console script reads it for ``--help`` without importing the
package (and with it torch); the library checks against the same tuples.
"""

# --- the model's named options (VisionTransformer's arguments) ---------------------------------------------
#: ``global_pool``: pooling before the head ('map': attention pooling; '': none)
GLOBAL_POOLS = ("token", "avg", "avgmax", "max", "map", "")
#: ``pos_embed``: a learned table, a fixed sincos table, or none
POS_EMBEDS = ("learn", "sincos", "none", "")
#: ``pos_embed_interp_mode``: how a learned position table is resampled to another grid (antialiased)
POS_EMBED_INTERP_MODES = ("bicubic", "bilinear")
#: ``rope_type``: rotary position in attention (models/rotary.py), or none
ROPE_TYPES = ("", "dinov3", "cat")
#: ``rope_grid_indexing``: the axial rotary terms' channel order, rows first or columns first
ROPE_GRID_INDEXINGS = ("ij", "xy")
#: ``attn_type``: with Eva's names, its attention layouts (``q_bias`` / ``v_bias``, or the bias in ``qkv``)
ATTN_TYPES = ("eva", "rope")
#: ``weight_init``: timm's init schemes (models/weight_init.py)
WEIGHT_INITS = ("", "jax", "jax_nlhb", "moco", "reset", "skip")
#: ``attn_impl``: ``F.scaled_dot_product_attention`` or the attention matrix made explicit
ATTN_IMPLS = ("sdpa", "eager")
#: ``act_layer`` names that mean GELU, the default (as does None)
GELU_NAMES = ("", "gelu")
#: ``act_layer``: the other timm activation names a file may give, and a converted model may record
ACT_NAMES = ("quick_gelu", "gelu_tanh", "silu", "swish", "relu")
#: ``norm_layer`` / ``embed_norm_layer`` names a file may give (None: LayerNorm with ``norm_eps``; every norm takes
#: ``norm_eps``); models/layers.py's NORM_KINDS builds them
NORM_NAMES = ("layernorm", "rmsnorm")
#: ``mlp_layer``: the blocks' MLP named outright, as timm's ``mlp_layer=SwiGLU`` ('': by ``swiglu_mlp``)
MLP_LAYERS = ("", "swiglu")

# --- checkpoint sources ---------------------------------------------------------------------------------------
#: every checkpoint source, by the name ``convert --from`` takes; registering one is adding its name here.
#: Source NAME is two modules: ``layouts/NAME.py`` (its key map; defines ``LAYOUT``) and
#: ``convert/NAME_format.py`` (what conversion adds; defines ``FORMAT``). See docs/architecture.md.
SOURCES = ("timm", "torchvision", "transformers", "jax", "meta_dinov3", "meta_pe", "baai_eva")
#: the sources ``export`` also writes (their format has ``export_map`` and ``export_suffixes``)
EXPORT_TARGETS = ("timm", "torchvision", "jax", "transformers")
#: dtypes ``convert`` / ``export`` may write (``--dtype``), by torch's names
DTYPE_NAMES = ("float32", "float16", "bfloat16")

# --- images from outside (gate/images.py reads them; the console script checks the kind before torch) -------
#: the formats a picture from outside may be in (Pillow's names): no plugin that runs another program (EPS)
IMAGE_FORMATS = ("PNG", "JPEG", "GIF", "BMP", "TIFF", "WEBP", "PPM")
IMAGE_EXPECTED = "expected an image file (PNG, JPEG, GIF, BMP, TIFF, WebP or PPM)"
#: what an image whose bytes no reader in IMAGE_FORMATS takes is told
NOT_A_PICTURE = "its bytes are not a picture in any of the formats read"

# --- bounds of the sizes a file may ask for (models/model_args.py checks them) ------------------------------
# the largest published ViTs (ViT-H, ViT-G, ViT-22B) fit inside
MAX_DEPTH = 64
MAX_EMBED_DIM = 8192
MAX_HEADS = 128
MAX_NUM_CLASSES = 100_000
MAX_IMG_SIDE = 4096
MAX_PATCH_SIZE = 64
MAX_PATCHES = 16_384  # patch-grid cells of one image (a 128x128 grid: 2048 px at patch 16)
MAX_IN_CHANS = 64
MAX_REG_TOKENS = 64
MAX_MLP_RATIO = 16.0
#: the whole model, counted on ``meta`` before building: 8e9 parameters is 16 GB in bf16 (DINOv3 7B has 6.7e9)
MAX_PARAMETERS = 8_000_000_000
