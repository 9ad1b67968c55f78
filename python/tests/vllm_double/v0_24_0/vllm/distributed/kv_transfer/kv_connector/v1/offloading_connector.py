"""The OffloadingConnector class as far as kvoffload.vllm touches it: 0.20.2's does not override
get_block_ids_with_load_errors (kvoffload.vllm wires its load errors into it)."""
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1


class OffloadingConnector(KVConnectorBase_V1):
    pass
