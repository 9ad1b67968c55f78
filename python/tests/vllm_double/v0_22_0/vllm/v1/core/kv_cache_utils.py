from typing import NewType

BlockHash = NewType("BlockHash", bytes)
