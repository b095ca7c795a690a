"""Code written against the former path ``timm_vitscratch.hub.model_dir`` gets the one model-directory module's
names, not copies."""

import timm_vitscratch.model_dir as model_dir
from timm_vitscratch.hub.model_dir import check_model_directory, read_config, save_model_directory


def test_former_path_resolves_to_the_same_objects():
    assert check_model_directory is model_dir.check_model_directory
    assert save_model_directory is model_dir.save_model_directory
    assert read_config is model_dir.read_config
