"""vllm/v1/kv_offload/factory.py (0.20.2): how the connector finds a spec by name."""
import importlib

from vllm.v1.kv_offload.spec import OffloadingSpec


class OffloadingSpecFactory:
    _registry: dict = {}

    @classmethod
    def create_spec(cls, config, kv_cache_config) -> OffloadingSpec:
        extra_config = config.kv_transfer_config.kv_connector_extra_config
        spec_name = extra_config.get("spec_name", "CPUOffloadingSpec")
        if spec_name in cls._registry:
            spec_cls = cls._registry[spec_name]()
        else:
            spec_module_path = extra_config.get("spec_module_path")
            if spec_module_path is None:
                raise ValueError(f"Unsupported spec type: {spec_name}")
            spec_module = importlib.import_module(spec_module_path)
            spec_cls = getattr(spec_module, spec_name)
        assert issubclass(spec_cls, OffloadingSpec)
        return spec_cls(config, kv_cache_config)
