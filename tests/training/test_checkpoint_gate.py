"""A checkpoint's ``.metadata`` (a pickle) is read through the gate: DCP's own record types, bounded in size."""

from __future__ import annotations

import os
import pickle

import pytest
import torch
import torch.distributed.checkpoint as dcp

from timm_vitscratch.gate import dcp_metadata
from timm_vitscratch.train.checkpoint import CheckpointError, GatedReader, one_process_quiet


class _RunsACommand:
    def __reduce__(self):
        return (os.system, ("echo never",))


def test_dcps_own_metadata_reads_and_loads_through_the_gate(tmp_path):
    state = {"model": {"w": torch.arange(6.0).reshape(2, 3), "b": torch.zeros(3, dtype=torch.bfloat16)}, "n": 3}
    with one_process_quiet():
        dcp.save(state, checkpoint_id=str(tmp_path), no_dist=True)
    metadata = dcp_metadata.read_dcp_metadata(tmp_path / ".metadata", CheckpointError)
    assert tuple(metadata.state_dict_metadata["model.w"].size) == (2, 3)
    loaded = {"model": {"w": torch.empty(2, 3), "b": torch.empty(3, dtype=torch.bfloat16)}, "n": 0}
    with one_process_quiet():
        dcp.load(loaded, storage_reader=GatedReader(str(tmp_path)), no_dist=True)
    assert torch.equal(loaded["model"]["w"], state["model"]["w"]) and loaded["n"] == 3


def test_a_metadata_pickle_that_calls_anything_else_is_refused_by_name(tmp_path):
    (tmp_path / ".metadata").write_bytes(pickle.dumps(_RunsACommand()))
    with pytest.raises(CheckpointError, match=r"may not refer to (posix|os|nt)\.system"):
        dcp_metadata.read_dcp_metadata(tmp_path / ".metadata", CheckpointError)
    with pytest.raises(CheckpointError, match="may not refer to"):
        GatedReader(str(tmp_path)).read_metadata()


def test_metadata_that_is_not_dcps_or_too_large_is_refused(tmp_path, monkeypatch):
    (tmp_path / ".metadata").write_bytes(pickle.dumps({"not": "metadata"}))
    with pytest.raises(CheckpointError, match="not a checkpoint's metadata"):
        dcp_metadata.read_dcp_metadata(tmp_path / ".metadata", CheckpointError)
    (tmp_path / ".metadata").write_bytes(b"\x80\x05garbage")
    with pytest.raises(CheckpointError, match="not a checkpoint's metadata"):
        dcp_metadata.read_dcp_metadata(tmp_path / ".metadata", CheckpointError)
    monkeypatch.setattr(dcp_metadata, "MAX_METADATA_BYTES", 8)
    with pytest.raises(CheckpointError):
        dcp_metadata.read_dcp_metadata(tmp_path / ".metadata", CheckpointError)
