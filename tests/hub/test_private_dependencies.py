"""Private details of timm that the Hub code relies on (no public equivalent exists), listed in one place:
each check fails here, by name, the day timm moves or changes it. huggingface_hub's one private detail
(its cache locks) is checked by tests/hub/test_pull_interrupted_and_concurrent.py."""
import inspect

import timm.models
import timm.models._hub


def test_timm_hub_helpers_that_timm_models_does_not_export():
    # hub/model_dir.py: save_config_for_hf(model, path, model_config=...); hub/model_card.py: generate_readme(card, name)
    wanted = {"save_config_for_hf": ("model", "config_path", "model_config"),
              "generate_readme": ("model_card", "model_name")}
    for name, params in wanted.items():
        helper = getattr(timm.models._hub, name)
        assert tuple(inspect.signature(helper).parameters)[:len(params)] == params, name
        assert not hasattr(timm.models, name), f"timm.models now exports {name}: import it from there instead"

