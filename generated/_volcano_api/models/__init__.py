"""Contains all the data models used in inputs/outputs"""

from .acquire_request import AcquireRequest
from .capabilities_request import CapabilitiesRequest
from .capabilities_type_0 import CapabilitiesType0
from .error import Error
from .error_detail import ErrorDetail
from .force_release_result import ForceReleaseResult
from .group_list import GroupList
from .group_member import GroupMember
from .group_state import GroupState
from .health import Health
from .health_status import HealthStatus
from .holder_list import HolderList
from .join_request import JoinRequest
from .lease_check import LeaseCheck
from .lease_refused import LeaseRefused
from .lease_renewal import LeaseRenewal
from .lease_renewed import LeaseRenewed
from .leave_request import LeaveRequest
from .lock_holder import LockHolder
from .lock_lease import LockLease
from .lock_list import LockList
from .lock_mode import LockMode
from .lock_state import LockState
from .member_list import MemberList
from .member_removal import MemberRemoval
from .membership import Membership
from .membership_refused import MembershipRefused
from .membership_renewal import MembershipRenewal
from .membership_renewed import MembershipRenewed
from .release_request import ReleaseRequest
from .renew_leases_request import RenewLeasesRequest
from .renew_leases_result import RenewLeasesResult
from .renew_membership_request import RenewMembershipRequest
from .renew_memberships_request import RenewMembershipsRequest
from .renew_memberships_result import RenewMembershipsResult
from .renew_request import RenewRequest
from .shown_capabilities import ShownCapabilities

__all__ = (
    "AcquireRequest",
    "CapabilitiesRequest",
    "CapabilitiesType0",
    "Error",
    "ErrorDetail",
    "ForceReleaseResult",
    "GroupList",
    "GroupMember",
    "GroupState",
    "Health",
    "HealthStatus",
    "HolderList",
    "JoinRequest",
    "LeaseCheck",
    "LeaseRefused",
    "LeaseRenewal",
    "LeaseRenewed",
    "LeaveRequest",
    "LockHolder",
    "LockLease",
    "LockList",
    "LockMode",
    "LockState",
    "MemberList",
    "MemberRemoval",
    "Membership",
    "MembershipRefused",
    "MembershipRenewal",
    "MembershipRenewed",
    "ReleaseRequest",
    "RenewLeasesRequest",
    "RenewLeasesResult",
    "RenewMembershipRequest",
    "RenewMembershipsRequest",
    "RenewMembershipsResult",
    "RenewRequest",
    "ShownCapabilities",
)
