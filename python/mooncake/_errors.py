"""Mooncake's integer return codes (its ErrorCode values) and the mapping of
file-system errors (mount backend) onto them.

The direct backend maps libmooncake's results in C (mooncake/_store.c,
to_code()); tests check that both sides agree.
"""

import errno

OK = 0
INTERNAL_ERROR = -1
BUFFER_OVERFLOW = -10
SEGMENT_NOT_FOUND = -101  # create_*_task: a target or source that is no segment
NO_AVAILABLE_HANDLE = -200
INVALID_KEY = -400
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
OBJECT_HAS_LEASE = -706
RPC_FAIL = -900
UNAVAILABLE_IN_CURRENT_STATUS = -1010
UNAVAILABLE_IN_CURRENT_MODE = -1011
FILE_NOT_FOUND = -1100  # save_tensor_to_safetensor: no such tensor or directory; mount_segment
PERSISTENT_FAIL = -1503  # save_tensor_to_safetensor: the file could not be written
TASK_NOT_FOUND = -1400  # query_task: no such task (or pruned)
TASK_PENDING_LIMIT_EXCEEDED = -1401  # create_*_task: too many tasks waiting

#: What every operation returns on a store that is not set up or is closed.
STORE_CLOSED = UNAVAILABLE_IN_CURRENT_STATUS

NAMES = {
    value: name
    for name, value in globals().items()
    if name.isupper() and isinstance(value, int) and name != "STORE_CLOSED"
}

_ERRNO = {
    errno.ENOENT: OBJECT_NOT_FOUND,
    errno.EISDIR: OBJECT_NOT_FOUND,  # a directory of the mount is no object
    errno.ENOTDIR: OBJECT_NOT_FOUND,
    errno.EEXIST: OBJECT_ALREADY_EXISTS,
    errno.EBUSY: OBJECT_HAS_LEASE,
    errno.ENOSPC: NO_AVAILABLE_HANDLE,
    errno.EFBIG: NO_AVAILABLE_HANDLE,
    errno.EAGAIN: NO_AVAILABLE_HANDLE,  # every segment on hold, for a moment
    errno.ENAMETOOLONG: INVALID_KEY,
    errno.EINVAL: INVALID_PARAMS,
    errno.ENOTCONN: RPC_FAIL,  # the mount's daemon is gone
    errno.ECONNABORTED: RPC_FAIL,
    # The network (a mount of a cluster; the C side maps the same errnos).
    errno.ECONNREFUSED: RPC_FAIL,
    errno.ETIMEDOUT: RPC_FAIL,
    errno.EHOSTUNREACH: RPC_FAIL,
    errno.EHOSTDOWN: RPC_FAIL,
    errno.ENETUNREACH: RPC_FAIL,
    errno.ENETDOWN: RPC_FAIL,
    errno.ECONNRESET: RPC_FAIL,
    errno.EPIPE: RPC_FAIL,
    errno.EPROTO: RPC_FAIL,
    errno.ESTALE: RPC_FAIL,  # the master no longer knows the write
    errno.EIO: INTERNAL_ERROR,
    errno.ECHILD: STORE_CLOSED,  # a store inherited through fork(): not usable here
}


def from_oserror(e):
    """Returns the code for an OSError raised by the file system."""
    return _ERRNO.get(e.errno, INTERNAL_ERROR)


def name(code):
    """Returns the constant's name for a code, e.g. 'OBJECT_NOT_FOUND'."""
    return NAMES.get(code, str(code))
