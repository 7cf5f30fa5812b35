"""provgraph's own files for one memory root: the portable lock, the disposable cache,
and the state folder that holds them."""

from .folder import LockBusy
from .lock import LOCK_NAME, LockError

__all__ = ["LOCK_NAME", "LockBusy", "LockError"]
