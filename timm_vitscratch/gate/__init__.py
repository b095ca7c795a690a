"""The gate: the one place where bytes from outside become Python objects, with bounds checked first.

Outside means anything this process did not make: a file a user points at, a model directory, a
checkpoint, the Hub's answers, an image, a NaFlex batch. Each kind enters through one module here,
which checks sizes, counts and shapes before anything is parsed, built or allocated, and raises the
caller's error type with a message that says what was wrong and what was expected:

- :mod:`.files`: regular files only (no FIFO, device or link out of their directory), bounded reads;
- :mod:`.json_data`: JSON bounded in bytes, values, depth, string length and digits before parsing
  (timm's own ``local-dir:`` / ``hf-hub:`` config reads are routed here too);
- :mod:`.naflex_batch`: NaFlex batches handed to a model, checked entry by entry, coordinates bounded by
  each image's valid patches and the position table's resample bound;
- :mod:`.hub_answers`: the Hub's answers to a pull (commit id, file list, sizes, hashes, download headers),
  each of one exact form before a path or a size is taken from it;
- :mod:`.config_fields`: the ``pretrained_cfg`` fields a config may set (data only: nothing that chooses
  what is loaded or run), where a config file holds them, and the form of its ``label_names`` and ``input_size``;
- :mod:`.hub_config`: a Hub repo's ``config.json`` at the 40-hex commit it came from, parsed bounded;
- :mod:`.images`: pictures (``vitscratch attention``): regular files in a few known formats, bounded in
  pixels by their header before they are decoded;
- :mod:`.containers`: which container a checkpoint file is (safetensors, a torch.save zip or pickle, an ``.npz``),
  from its first bytes; the one place that reads container magic;
- :mod:`.checkpoints`: what every checkpoint container shares: its file opened once, and the bounds on
  what it claims about its tensors (count, shape, strides, logical bytes);
- :mod:`.safetensors_data`: safetensors files, the header bounded in bytes and tensors before parsing;
- :mod:`.zip_archive`: zip archives, their directory and expansion bounded before ``zipfile`` reads them;
- :mod:`.dcp_metadata`: a Distributed Checkpoint's ``.metadata`` pickle, bounded, DCP's own record types only;
- :mod:`.torch_pickle`: a ``torch.save`` pickle read as tensor records, nothing run;
- :mod:`.torch_save`: ``torch.save`` files, loaded by ``torch.load`` only once their records are in bounds
  (a single-stream file is read one tensor at a time from the storages' offsets, never whole);
- :mod:`.weight_dtypes`: the one rule on the dtypes of weights (float32, float16, bfloat16, float64), which
  every route applies to the tensors that become model weights;
- :mod:`.npz_data`: numpy ``.npz`` archives of plain numeric arrays;
- :mod:`.license_files`: what a source's files say of its licence (a model card's front matter, read line by
  line with no YAML parser; a licence file's bytes), bounded.

``tests/packaging/test_gate.py`` holds the rest of the package to it: no other module calls a parser of
outside bytes (``json.load``, ``torch.load``, ``safe_open``, ``np.load``, ``PIL.Image.open`` ...).
docs/guarantees.md lists the bounds.
"""
