"""The part of KVConnectorBase_V1 kvoffload.vllm relies on: the load-error hook the model runner
reads after get_finished() (empty unless a connector overrides it)."""


class KVConnectorBase_V1:
    def get_block_ids_with_load_errors(self) -> set[int]:
        return set()
