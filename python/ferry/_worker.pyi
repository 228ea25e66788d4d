# Type stubs of ferry._worker's public names (ferry.worker_info, ferry.WorkerInfo).
from typing import Any, NamedTuple

class WorkerInfo(NamedTuple):
    id: int
    count: int
    seed: int
    dataset: Any

def worker_info() -> WorkerInfo | None: ...
