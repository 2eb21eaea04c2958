"""The torch side of num-workers' switch: imported only inside its ``switch`` (in the child).

A DataLoader's worker count is fixed for the life of an iterator: its workers were started
with it. A switched trial's blocks therefore each read from a fresh iterator built with the
arm's count, while the script keeps calling ``next`` on its own iterator: ``LoaderArms``
puts itself in front of ``_BaseDataLoaderIter.__next__`` and serves the script's call from
the arm's iterator.

The data stay the script's own, in its order: the arms share one stream of batch indices,
the sampler pass of the script's iterator (taken over at its first call), and an iterator
that an arm leaves first hands over the batches it already has in flight (its workers
prefetch them) before the next arm's first. Each switch happens at the next ``next`` call,
in the block's first (untimed) step; the new workers start while the old ones' batches are
served; the block's other settling steps (``knobs.base.Switch``) pass while its buffer
fills, so that a block's timed steps never read a buffer refilling or one made by the other
arm. An epoch's end reaches the script as ever; its next iterator, started with the arm's count
(the loader's ``num_workers`` follows the arm, and num-workers builds a new loader with the
arm's), is adopted with its pass as the new stream.
"""

from __future__ import annotations

from torch.utils.data.dataloader import _BaseDataLoaderIter


class _Stream:
    """A sampler stand-in whose iteration continues an index stream already under way."""

    def __init__(self, stream, length: int | None):
        self.stream, self.length = stream, length

    def __iter__(self):
        return self.stream

    def __len__(self) -> int:
        if self.length is None:
            raise TypeError("the script's sampler has no length")
        return self.length


class _Arms:
    """One DataLoader's arms: the iterator serving the script, those still draining."""

    def __init__(self, loader, workers: dict[int, int]):
        self.loader = loader
        self.workers = workers  # arm (0: the script's) -> num_workers
        self.wanted = 1
        self.owner = None  # the script's iterator whose index stream the arms share
        self.serving = None
        self.draining: list = []

    def next_batch(self, script_iterator, original_next):
        if script_iterator is not self.owner or self.serving is None:
            self._adopt(script_iterator)
        if _workers(self.serving) != self.workers[self.wanted]:
            self._rearm(self.workers[self.wanted])
        while self.draining:
            if _in_flight(self.draining[0]):
                return original_next(self.draining[0])
            self._retire(self.draining.pop(0))
        try:
            return original_next(self.serving)
        except StopIteration:  # the pass is over: the script's next iterator brings another
            self.draining.append(self.serving)
            self.serving = None
            raise

    def _adopt(self, script_iterator) -> None:
        """The script's iterator (a new epoch's, or the persistent one reset): its pass is
        the arms' stream from here. What is left of the pass before, the script dropped
        (its loop broke off): those batches were never to be seen."""
        for iterator in (*self.draining, self.serving):
            if iterator is not None and iterator is not script_iterator:
                self._retire(iterator)
        self.owner, self.serving, self.draining = script_iterator, script_iterator, []

    def _rearm(self, workers: int) -> None:
        """A fresh iterator with ``workers``, continuing the stream; the one it replaces
        gives no more indices to its workers and drains what they hold."""
        old = self.serving
        stream, old._sampler_iter = old._sampler_iter, iter(())
        self.draining.append(old)
        self.serving = _iterator(self.loader, workers, stream)

    def close(self) -> None:
        for iterator in self.draining:
            self._retire(iterator)
        self.draining = []

    def _retire(self, iterator) -> None:
        """A drained iterator's workers stopped; a persistent one the script will reuse at
        its next epoch (the loader's own) keeps them."""
        if iterator is not self.loader._iterator and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()


def _workers(iterator) -> int:
    return getattr(iterator, "_num_workers", 0)


def _in_flight(iterator) -> int:
    """Batches asked of the iterator's workers and not yet returned (0 in-process)."""
    return getattr(iterator, "_send_idx", 0) - getattr(iterator, "_rcvd_idx", 0)


def _iterator(loader, workers: int, stream):
    """``loader``'s iterator with ``workers`` workers over ``stream``: the loader's own
    settings put back after (its sampler read through the attribute torch's iterator
    reads it by; DataLoader refuses a plain assignment of it after construction)."""
    attribute = "batch_sampler" if loader._auto_collation else "sampler"
    sampler = getattr(loader, attribute)
    try:
        length = len(sampler)
    except TypeError:
        length = None
    saved = loader.num_workers, loader.prefetch_factor
    set_workers(loader, workers)
    object.__setattr__(loader, attribute, _Stream(stream, length))
    try:
        return loader._get_iterator()
    finally:
        object.__setattr__(loader, attribute, sampler)
        loader.num_workers, loader.prefetch_factor = saved


def set_workers(loader, workers: int) -> None:
    """The worker count ``loader``'s next iterator starts with (DataLoader reads it there)."""
    loader.num_workers = workers
    if workers and loader.prefetch_factor is None:
        loader.prefetch_factor = 2  # DataLoader's default with workers


class LoaderArms:
    """Every switched loader's arms, in front of the iterators' ``__next__``.

    ``counts(dataset)`` gives a loader's worker count per arm ({0: the script's, 1: the
    knob's value, 2..: its further values}), or None for a loader the knob left alone.
    Arms are made at a loader's first call after the switch: a script that builds its
    loader anew each epoch gets new arms with each, in the arm in force."""

    def __init__(self, counts):
        self.counts = counts
        self.wanted = 1
        self.arms: dict[int, _Arms] = {}  # id(dataset) -> its loader's arms
        self._install()

    def set(self, arm: int) -> None:
        """The arm the next ``next`` call of each loader's script iterator is served by, and
        the count its next iterator (the script's next epoch) starts with: an epoch's first
        batches come from the arm's own workers, started as the script starts them."""
        self.wanted = arm
        for arms in self.arms.values():
            arms.wanted = arm
            set_workers(arms.loader, arms.workers[arm])

    def _arms_of(self, iterator) -> _Arms | None:
        dataset = getattr(iterator, "_dataset", None)
        arms = self.arms.get(id(dataset))
        if arms is not None and arms.loader.dataset is dataset:
            return arms
        counts = self.counts(dataset)
        loader = getattr(iterator, "_torchpace_loader", None)  # capture/runtime.py
        if counts is None or loader is None:
            return None
        for key, old in list(self.arms.items()):  # the loaders of passes over: let go
            if old.serving is None:
                old.close()
                del self.arms[key]
        arms = self.arms[id(dataset)] = _Arms(loader, counts)
        arms.wanted = self.wanted
        set_workers(loader, counts[self.wanted])
        return arms

    def _install(self) -> None:
        # the capture's and other knobs' patches included: the arms call it on their own
        # iterators directly, so that each batch is fetched, timed and filtered once
        original_next = _BaseDataLoaderIter.__next__

        def next_(iterator):
            arms = self._arms_of(iterator)
            if arms is None:  # another loader's: as the script built it
                return original_next(iterator)
            return arms.next_batch(iterator, original_next)

        _BaseDataLoaderIter.__next__ = next_
