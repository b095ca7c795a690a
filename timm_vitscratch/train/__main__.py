"""``python -m timm_vitscratch.train`` / ``torchrun --nproc_per_node N -m timm_vitscratch.train``."""

import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
