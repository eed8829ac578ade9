"""Exceptions: one class per libringmaster status (RM_STATUS_MAP in
include/ringmaster/status.h), the names read from the library with
rm_status_name so a new code shows up as a plain RingmasterError."""
from . import _lib


class RingmasterError(RuntimeError):
    """A libringmaster call failed.

    status  -- the status name, "RM_ERR_PEER_LOST"
    code    -- its number
    message -- the library's words (rm_session_last_error / rm_comm_last_error)
    peer    -- the rank the failure names (rm_comm_failed_peer), or None
    call    -- the C function that failed
    """

    def __init__(self, status, message="", peer=None, code=None, call=None):
        self.status = status
        self.code = code
        self.message = message
        self.peer = peer
        self.call = call
        text = "%s%s" % (call + ": " if call else "", status)
        if message:
            text += ": " + message
        if peer is not None:
            text += " (peer rank %d)" % peer
        super().__init__(text)

    def __reduce__(self):
        return (type(self), (self.status, self.message, self.peer, self.code, self.call))


class MembershipError(RingmasterError):
    """The group this process belongs to changed or lost a member: re-form
    (ringmaster.reform()) and go on; ringmaster.torch.elastic does it."""


class PeerLost(MembershipError):
    pass


class Timeout(MembershipError):
    pass


class Reconfigured(MembershipError):
    pass


class Aborted(MembershipError):
    pass


class StaleGeneration(MembershipError):
    pass


class JobEnded(RingmasterError):
    pass


class InvalidArgument(RingmasterError, ValueError):
    pass


class OutOfMemory(RingmasterError, MemoryError):
    pass


class SystemCallError(RingmasterError):
    pass


class ProtocolError(RingmasterError):
    pass


class Unsupported(RingmasterError):
    pass


class Unavailable(RingmasterError):
    pass


class NotFound(RingmasterError):
    pass


class Denied(RingmasterError):
    pass


class InternalError(RingmasterError):
    pass


_BY_NAME = {
    "RM_ERR_INVALID_ARG": InvalidArgument,
    "RM_ERR_NOMEM": OutOfMemory,
    "RM_ERR_SYSTEM": SystemCallError,
    "RM_ERR_PEER_LOST": PeerLost,
    "RM_ERR_TIMEOUT": Timeout,
    "RM_ERR_PROTOCOL": ProtocolError,
    "RM_ERR_ABORTED": Aborted,
    "RM_ERR_STALE_GENERATION": StaleGeneration,
    "RM_ERR_UNSUPPORTED": Unsupported,
    "RM_ERR_UNAVAILABLE": Unavailable,
    "RM_ERR_NOT_FOUND": NotFound,
    "RM_ERR_DENIED": Denied,
    "RM_ERR_INTERNAL": InternalError,
    "RM_ERR_RECONFIGURED": Reconfigured,
    "RM_ERR_JOB_ENDED": JobEnded,
}

STATUS_NAMES = _lib.status_names()
# code -> class; codes the library has but we do not know: RingmasterError
CLASSES = {code: _BY_NAME.get(name, RingmasterError) for code, name in STATUS_NAMES.items()}
CODES = {name: code for code, name in STATUS_NAMES.items()}


def make(code, message="", peer=None, call=None):
    name = STATUS_NAMES.get(code, "RM_UNKNOWN(%d)" % code)
    return CLASSES.get(code, RingmasterError)(name, message, peer, code, call)


def unsupported(what):
    return Unsupported("RM_ERR_UNSUPPORTED", what, None, CODES.get("RM_ERR_UNSUPPORTED"))
