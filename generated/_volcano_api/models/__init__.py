"""Contains all the data models used in inputs/outputs"""

from .acquire_request import AcquireRequest
from .error import Error
from .error_detail import ErrorDetail
from .force_release_result import ForceReleaseResult
from .health import Health
from .health_status import HealthStatus
from .lease_check import LeaseCheck
from .lease_refused import LeaseRefused
from .lease_renewal import LeaseRenewal
from .lease_renewed import LeaseRenewed
from .lock_holder import LockHolder
from .lock_lease import LockLease
from .lock_list import LockList
from .lock_mode import LockMode
from .lock_state import LockState
from .release_request import ReleaseRequest
from .renew_leases_request import RenewLeasesRequest
from .renew_leases_result import RenewLeasesResult
from .renew_request import RenewRequest

__all__ = (
    "AcquireRequest",
    "Error",
    "ErrorDetail",
    "ForceReleaseResult",
    "Health",
    "HealthStatus",
    "LeaseCheck",
    "LeaseRefused",
    "LeaseRenewal",
    "LeaseRenewed",
    "LockHolder",
    "LockLease",
    "LockList",
    "LockMode",
    "LockState",
    "ReleaseRequest",
    "RenewLeasesRequest",
    "RenewLeasesResult",
    "RenewRequest",
)
