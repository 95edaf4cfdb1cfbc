"""ReplicateConfig and SoftPinAction: how a write places its object (public
through mooncake.store)."""

import enum

class SoftPinAction(enum.IntEnum):
    PRESERVE = 0  # new objects: no pin (this store does not carry pins across upserts)
    ENABLE = 1
    DISABLE = 2


#: TTL of a soft pin when soft_pin_ttl_ms is None (Mooncake's default, 30 min).
DEFAULT_SOFT_PIN_TTL_MS = 30 * 60 * 1000

_PIN_NONE, _PIN_SOFT, _PIN_HARD = 0, 1, 2


class ReplicateConfig:
    """How put()/upsert() place an object: replica_num replicas (at most one
    per segment; an embedded store has one), a soft pin (evicted last, for
    soft_pin_ttl_ms) or a hard pin (never evicted). preferred_segment, a
    node's data address ("host:port"), asks the master to place the first
    replica there when it has room (best effort; the direct backend only);
    without it, the first of preferred_segments is used."""

    __slots__ = ("replica_num", "soft_pin_action", "_soft_pin_ttl_ms", "with_hard_pin",
                 "preferred_segment", "preferred_segments", "prefer_alloc_in_same_node")

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
        if value is not None and (type(value) is not int or value < 0):
            raise TypeError("soft_pin_ttl_ms must be None or a non-negative int")
        self._soft_pin_ttl_ms = value

    def _opts(self):
        """(replica_num, pin, soft_pin_ttl_ms, preferred segment or None) for
        the backends, or None if replica_num is not a positive int or the
        preferred segment is not a string."""
        n = self.replica_num
        if type(n) is not int or n < 1:
            return None
        pref = self.preferred_segment
        if not pref and self.preferred_segments:
            pref = self.preferred_segments[0]
        if pref is not None and not isinstance(pref, str):
            return None
        pref = pref or None
        if self.with_hard_pin:
            return (n, _PIN_HARD, 0, pref)
        if self.soft_pin_action == SoftPinAction.ENABLE:
            ttl = self._soft_pin_ttl_ms
            return (n, _PIN_SOFT, DEFAULT_SOFT_PIN_TTL_MS if ttl is None else ttl, pref)
        return (n, _PIN_NONE, 0, pref)

    def __repr__(self):
        return (f"ReplicateConfig(replica_num={self.replica_num}, "
                f"soft_pin_action={self.soft_pin_action.name}, "
                f"soft_pin_ttl_ms={self._soft_pin_ttl_ms}, with_hard_pin={self.with_hard_pin}, "
                f"preferred_segment={self.preferred_segment!r}, "
                f"preferred_segments={self.preferred_segments!r})")

    __str__ = __repr__
