"""ReplicateConfig and SoftPinAction: how a write places its object (public
through mooncake.store)."""

import enum

from ._errors import INVALID_PARAMS, UNAVAILABLE_IN_CURRENT_MODE

class SoftPinAction(enum.IntEnum):
    PRESERVE = 0  # new objects: no pin (this store does not carry pins across upserts)
    ENABLE = 1
    DISABLE = 2


class ObjectDataType(enum.IntEnum):
    """What an object holds (Mooncake's ObjectDataType; recorded by
    ReplicateConfig.data_type, not used by this store)."""

    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


#: TTL of a soft pin when soft_pin_ttl_ms is None (Mooncake's default, 30 min).
DEFAULT_SOFT_PIN_TTL_MS = 30 * 60 * 1000

_PIN_NONE, _PIN_SOFT, _PIN_HARD = 0, 1, 2


class ReplicateConfig:
    """How put()/upsert() place an object: replica_num replicas (at most one
    per segment; an embedded store has one), a soft pin (evicted last, for
    soft_pin_ttl_ms) or a hard pin (never evicted). preferred_segment, a
    node's data address ("host:port"), asks the master to place the first
    replica there when it has room (best effort; the direct backend only);
    without it, the first of preferred_segments is used.

    Mooncake's other fields are kept with its types: nof_replica_num and
    dfs_replica_num (NVMe-oF and DFS replicas: a write asking for any returns
    UNAVAILABLE_IN_CURRENT_MODE, this store has neither),
    preferred_nof_segments (the same when not empty), data_type
    (ObjectDataType), group_ids (None or a list of str), and
    prefer_alloc_in_same_node. Counts are unsigned: a negative one or one of
    2**32 or more raises TypeError or OverflowError at assignment, as
    Mooncake's binding does; soft_pin_ttl_ms likewise below 0 or from
    2**64."""

    __slots__ = ("_replica_num", "soft_pin_action", "_soft_pin_ttl_ms", "with_hard_pin",
                 "preferred_segment", "preferred_segments", "prefer_alloc_in_same_node",
                 "_nof_replica_num", "_dfs_replica_num", "preferred_nof_segments",
                 "_data_type", "group_ids")

    def __init__(self, replica_num=1, soft_pin_action=SoftPinAction.PRESERVE,
                 soft_pin_ttl_ms=None, with_hard_pin=False, preferred_segment="",
                 preferred_segments=None):
        self.replica_num = replica_num
        self.soft_pin_action = SoftPinAction(soft_pin_action)
        self.soft_pin_ttl_ms = soft_pin_ttl_ms
        self.with_hard_pin = with_hard_pin
        self.preferred_segment = preferred_segment
        self.preferred_segments = list(preferred_segments or [])
        self.prefer_alloc_in_same_node = False
        self.nof_replica_num = 0
        self.dfs_replica_num = 0
        self.preferred_nof_segments = []
        self.data_type = ObjectDataType.UNKNOWN
        self.group_ids = None

    replica_num = property(lambda self: self._replica_num,
                           lambda self, v: setattr(self, "_replica_num", _count(v, 32)))
    nof_replica_num = property(lambda self: self._nof_replica_num,
                               lambda self, v: setattr(self, "_nof_replica_num", _count(v, 32)))
    dfs_replica_num = property(lambda self: self._dfs_replica_num,
                               lambda self, v: setattr(self, "_dfs_replica_num", _count(v, 32)))
    data_type = property(lambda self: self._data_type,
                         lambda self, v: setattr(self, "_data_type", ObjectDataType(v)))

    @property
    def with_soft_pin(self):
        return self.soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, value):
        self.soft_pin_action = SoftPinAction.ENABLE if value else SoftPinAction.PRESERVE

    @property
    def soft_pin_ttl_ms(self):
        return self._soft_pin_ttl_ms

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, value):
        self._soft_pin_ttl_ms = None if value is None else _count(value, 64)

    def _opts(self):
        """(replica_num, pin, soft_pin_ttl_ms, preferred segment or None) for
        the backends, or a code: INVALID_PARAMS (replica_num 0, a preferred
        segment that is not a string, a soft-pin TTL without
        SoftPinAction.ENABLE), UNAVAILABLE_IN_CURRENT_MODE (NVMe-oF or DFS
        replicas asked for)."""
        n = self._replica_num
        if n < 1:
            return INVALID_PARAMS
        if self._nof_replica_num or self._dfs_replica_num or self.preferred_nof_segments:
            return UNAVAILABLE_IN_CURRENT_MODE
        pref = self.preferred_segment
        if not pref and self.preferred_segments:
            pref = self.preferred_segments[0]
        if pref is not None and not isinstance(pref, str):
            return INVALID_PARAMS
        pref = pref or None
        ttl = self._soft_pin_ttl_ms
        if ttl is not None and self.soft_pin_action != SoftPinAction.ENABLE:
            return INVALID_PARAMS
        if self.with_hard_pin:
            return (n, _PIN_HARD, 0, pref)
        if self.soft_pin_action == SoftPinAction.ENABLE:
            return (n, _PIN_SOFT, DEFAULT_SOFT_PIN_TTL_MS if ttl is None else ttl, pref)
        return (n, _PIN_NONE, 0, pref)

    def __repr__(self):
        return (f"ReplicateConfig(replica_num={self._replica_num}, "
                f"soft_pin_action={self.soft_pin_action.name}, "
                f"soft_pin_ttl_ms={self._soft_pin_ttl_ms}, with_hard_pin={self.with_hard_pin}, "
                f"preferred_segment={self.preferred_segment!r}, "
                f"preferred_segments={self.preferred_segments!r}, "
                f"nof_replica_num={self._nof_replica_num}, "
                f"dfs_replica_num={self._dfs_replica_num}, "
                f"data_type={self._data_type.name}, group_ids={self.group_ids!r})")

    __str__ = __repr__


def _count(v, bits):
    """v if it is an int in [0, 2**bits); else TypeError (not an int, or
    negative) or OverflowError (too large), as a pybind11 unsigned field."""
    if type(v) is not int:
        raise TypeError(f"expected an unsigned int, not {type(v).__name__}")
    if v < 0:
        raise TypeError(f"{v} is negative: expected an unsigned int")
    if v >> bits:
        raise OverflowError(f"{v} does not fit in {bits} bits")
    return v
