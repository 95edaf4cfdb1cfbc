"""mooncake._loops - the objects a backend keeps per asyncio event loop (the
direct backend's Completer, the mount backend's FileReader): each resolves
its loop's futures from an eventfd that the loop watches (add_reader), is
made at the loop's first call, and is taken off every loop at close.

Such an object has fileno(), drain() (resolve what finished; the loop's
reader callback) and close() (after drain(): finish or drop the rest, close
the eventfd)."""

import asyncio
import threading


class PerLoop:
    """The objects of one backend, by event loop.

    make(loop) makes one; discard(obj) closes one whose loop is closed
    (nobody waits for its futures). With refuse_after_close, get() returns
    None once close_all() began instead of making one."""

    def __init__(self, make, discard, refuse_after_close=False):
        self._make = make
        self._discard = discard
        self._refuse = refuse_after_close
        self._by_loop = {}  # event loop -> object; guarded by _lock
        self._closed = False  # guarded by _lock
        self._lock = threading.Lock()

    def __len__(self):
        return len(self._by_loop)

    def get(self, loop):
        """loop's object, made (and watched by loop) at its first call."""
        o = self._by_loop.get(loop)
        return o if o is not None else self._attach(loop)

    def _attach(self, loop):
        with self._lock:
            o = self._by_loop.get(loop)
            if o is not None or (self._closed and self._refuse):
                return o
            for old in [lp for lp in self._by_loop if lp.is_closed()]:
                self._discard(self._by_loop.pop(old))  # its loop is gone: drop what it left
            o = self._make(loop)
            loop.add_reader(o.fileno(), o.drain)
            self._by_loop[loop] = o
            return o

    def drainable(self, current):
        """The objects whose loop is current or stopped but not closed: the
        ones a closing thread may drain itself."""
        with self._lock:
            return [o for lp, o in self._by_loop.items()
                    if lp is current or (not lp.is_running() and not lp.is_closed())]

    def close_all(self, current):
        """Takes every object off its loop: on this thread when its loop is
        current or stopped, through the loop when it runs in another thread;
        an object of a closed loop is discarded."""
        with self._lock:
            taken, self._by_loop, self._closed = self._by_loop, {}, True
        for loop, o in taken.items():
            if loop.is_closed():
                self._discard(o)
            elif loop is current or not loop.is_running():
                _detach(loop, o)
            else:
                try:
                    loop.call_soon_threadsafe(_detach, loop, o)
                except RuntimeError:  # closed since is_closed() said no
                    self._discard(o)


def running_loop():
    """The running event loop of this thread, or None."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _detach(loop, o):
    o.drain()
    loop.remove_reader(o.fileno())
    o.close()
