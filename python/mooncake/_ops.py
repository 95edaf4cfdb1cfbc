"""The machinery the store's methods are built from: an argument check plus
a backend method (_op), shared by the sync class, its mixins and the async
class (which makes its native async_<name> from the same parts)."""

import functools

from ._config import ReplicateConfig
from ._errors import STORE_CLOSED


class _Early:
    """What an argument check returns to end the call at once with `value`."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _opts(config):
    if config is None:
        return None
    if not isinstance(config, ReplicateConfig):
        raise TypeError(f"config must be a ReplicateConfig, not {type(config).__name__}")
    o = config._opts()
    return _Early(o) if isinstance(o, int) else o


def _closed_list(args):
    return [STORE_CLOSED] * len(args[0])


def _first_error(results, args):
    return next((r for r in results if r != 0), 0)


def _start(self, check, closed, a, kw):
    """Runs an op's argument check (see _op) for the store self. Returns
    (None, result) when the call ends before the backend: the check gave an
    _Early, or the store is not set up (result: closed's); otherwise
    (backend, args) with the check's whole tuple."""
    args = check(self, *a, **kw)
    if type(args) is _Early:
        return None, args.value
    b = self._b  # read once: close() on another thread may clear it
    if b is None:
        return None, closed(args) if callable(closed) else closed
    return b, args


def _op(backend_method, closed, post=None, nargs=None):
    """Makes a store method from an argument check: `check(self, ...)` returns
    the backend method's arguments (a tuple; only the first nargs are passed
    when given) or an _Early. `closed` is the result on a store that is not
    set up (a value, or a function of the arguments); `post(result, args)`
    shapes the result. The async class builds its native async_<name> from the
    same parts."""

    def deco(check):
        @functools.wraps(check)
        def method(self, *a, **kw):
            b, args = _start(self, check, closed, a, kw)
            if b is None:
                return args
            r = getattr(b, backend_method)(*(args if nargs is None else args[:nargs]))
            return post(r, args) if post else r

        method._mc_op = (backend_method, closed, post, check, nargs)
        return method

    return deco
