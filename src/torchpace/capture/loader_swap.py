"""The fewer-workers probe's switch: for a few steps, the user's loop takes its batches from
a stand-in iterator of the same DataLoader built with fewer workers, then from its own again.

The user's iterator is left as it is: its workers finish the batches they hold and then
sleep (a worker waits on its index queue without using a core), so the switched steps run
as they would with fewer workers, in the same process, on the same model. The stand-in
starts a fresh pass over the dataset: the probe's few steps train on other batches than the
user's own would have (the doctor's run is a measurement, and it ends the script). Random
states the stand-in's sampler and the dataset's transforms draw from are put back after each
use, so that the user's own draws go on as they would have.
"""

from __future__ import annotations

import contextlib
import random
import sys
import weakref

import torch


class LoaderSwap:
    def __init__(self):
        self._loaders: dict[int, weakref.ref] = {}  # DataLoader index -> the loader
        self._iterators: list[tuple[int, weakref.ref]] = []  # the user's, with their loader
        self._index: int | None = None  # the loader switched, while switched
        self._workers = 0
        self._stand_in = None
        self._building = False  # a stand-in is being built: its workers are torchpace's

    # --- what the hooks record ----------------------------------------------------
    def loader_built(self, index: int, loader) -> None:
        self._loaders[index] = weakref.ref(loader)

    def iterator_started(self, index: int | None, iterator) -> bool:
        """Keeps the user's iterators (their workers' pids); True for one of them, False for
        a stand-in's (its workers are torchpace's) or one of no loader the hooks saw."""
        if index is not None and not self._building:
            self._iterators = [(i, it) for i, it in self._iterators if it() is not None]
            self._iterators.append((index, weakref.ref(iterator)))
            return True
        return False

    def worker_pids(self) -> dict[int, int]:
        """The pid of each worker of the user's live iterators -> its loader's index. Read
        when asked: an iterator starts its workers after the hook on its __init__ has run."""
        out = {}
        for index, ref in self._iterators:
            iterator = ref()
            for worker in getattr(iterator, "_workers", None) or []:
                if isinstance(getattr(worker, "pid", None), int):
                    out[worker.pid] = index
        return out

    # --- the switch -----------------------------------------------------------------
    def switch(self, index: int | None, workers: int = 0) -> None:
        """Batches of loader ``index`` from a stand-in with ``workers`` workers from now on;
        None: from the user's own iterator again (the stand-in is shut down)."""
        if index != self._index or workers != self._workers:
            self._drop_stand_in()
        self._index, self._workers = index, workers

    def source(self, iterator):
        """The iterator the user's ``next()`` on ``iterator`` takes its batch from."""
        if self._index is None or getattr(iterator, "_torchpace_index", None) != self._index:
            return iterator
        if self._stand_in is None:
            loader = self._loaders[self._index]()
            if loader is None:  # the loader is gone: nothing to switch
                return iterator
            self._building = True
            try:
                with kept_random_states():
                    self._stand_in = _iterator_with(loader, self._workers)
            finally:
                self._building = False
        return self._stand_in

    def next_from(self, iterator, original_next):
        """``original_next`` on the iterator :meth:`source` names, random states kept for a
        stand-in; a stand-in at the end of its pass (a dataset shorter than the probe) gives
        way to the user's own iterator."""
        source = self.source(iterator)
        if source is iterator:
            return original_next(iterator)
        with kept_random_states():
            try:
                return original_next(source)
            except StopIteration:
                self._drop_stand_in()
        return original_next(iterator)  # a dataset shorter than the probe: the user's own

    def _drop_stand_in(self) -> None:
        stand_in, self._stand_in = self._stand_in, None
        shutdown = getattr(stand_in, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


def _iterator_with(loader, workers: int):
    """A new iterator of ``loader`` built as if ``num_workers`` were ``workers``."""
    own = loader.num_workers
    loader.num_workers = workers  # not one of the attributes DataLoader freezes after init
    try:
        return loader._get_iterator()
    finally:
        loader.num_workers = own


@contextlib.contextmanager
def kept_random_states():
    """torch's, Python's and (if loaded) NumPy's global random states, put back on exit."""
    torch_state = torch.random.get_rng_state()
    python_state = random.getstate()
    numpy = sys.modules.get("numpy")
    numpy_state = numpy.random.get_state() if numpy is not None else None
    try:
        yield
    finally:
        torch.random.set_rng_state(torch_state)
        random.setstate(python_state)
        if numpy_state is not None:
            numpy.random.set_state(numpy_state)
