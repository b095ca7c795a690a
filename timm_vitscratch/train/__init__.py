"""Fine-tuning from one process to many machines: ``torchrun -m timm_vitscratch.train``.

Built from timm's own parts (its data set, transforms, optimizer, scheduler and loss factories) and PyTorch's
distributed ones: plain with one process, ``DistributedDataParallel`` under ``torchrun``, and with ``--fsdp``
PyTorch's FSDP2 (``fully_shard`` on every :class:`~timm_vitscratch.models.block.TransformerBlock`, then the root).
Checkpoints are Distributed Checkpoint (DCP) shards that resume at another world size; ``--export DIR`` (and
``vitscratch export-checkpoint``) writes a model directory from them tensor by tensor.

- :mod:`.options`: the command line (timm ``train.py``'s flag names where it has them; imports no torch)
- :mod:`.parallel`: the process group, and the model plain, under DDP or sharded with FSDP2
- :mod:`.build`: the model built whole, or on ``meta`` and sharded before it has storage (``--fsdp``)
- :mod:`.data`: timm's data set and transforms, in an order every world size shares, from any batch
- :mod:`.ema`: the average of the weights (``--model-ema``), whole or sharded as the model is
- :mod:`.memory`: per-rank bytes of training state, counted and by formula
- :mod:`.checkpoint`: DCP checkpoints written under a temporary name, marked complete, then renamed
- :mod:`.export`: a checkpoint's model tensors, one at a time, into a model directory
- :mod:`.run`: the training loop
"""
