"""presto.torch: an iterable that drops in where a torch DataLoader is used.

    from presto.torch import Loader

    loader = Loader("imagenet", batch_size=64, seed=0)  # rank/world from torch.distributed
    for epoch in range(epochs):
        loader.set_epoch(epoch)                          # as with DistributedSampler
        for images, labels in loader:                    # uint8 NHWC, int64
            images = images.cuda(non_blocking=True)      # copy before the next batch
            ...

Epochs: after set_epoch(e), every iter() streams epoch e until the next
set_epoch (DistributedSampler semantics). If set_epoch was never called,
successive iter() calls stream epochs 0, 1, 2, ... (a fresh shuffle per pass,
as a DataLoader with shuffle=True gives).

!!! Unless copy=True, the tensors of a batch share the stream's buffer and are
overwritten by the next batch: move or copy them (.to(device), .clone(),
.float()) before the loop asks for the next one; never keep them in a list.
"""

import torch

import presto


def _distributed():
    """(rank, world) of an initialized torch.distributed, else None."""
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


class Loader:
    """One rank's batches of a presto dataset, as (images, labels).

    rank/world_size: the arguments, else torch.distributed's when it is
    initialized, else 0/1. as_tensors=False yields numpy arrays instead of
    tensors. channels_last_to_chw=True yields images as an (N, C, H, W) view
    (permuted strides, no copy; call .contiguous() if a kernel needs it).
    copy=True yields batches that own their memory. prefetch: batches the
    daemon prepares ahead (0: its default). transport: "auto" (shared
    memory where the daemon can, else the socket), "shm" or "socket"."""

    def __init__(self, dataset, batch_size=64, seed=0, shuffle=True, drop_last=False,
                 rank=None, world_size=None, socket=None, as_tensors=True,
                 channels_last_to_chw=False, copy=False, prefetch=0, transport="auto"):
        dist = _distributed()
        if rank is None:
            rank = dist[0] if dist else 0
        if world_size is None:
            world_size = dist[1] if dist else 1
        if not 0 <= rank < world_size:
            raise presto.InvalidArgumentError(
                presto.E_INVAL, "rank %d is not in [0, world_size %d)" % (rank, world_size))
        if batch_size < 1:
            raise presto.InvalidArgumentError(presto.E_INVAL, "batch_size must be at least 1")
        self.dataset = dataset
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.rank = rank
        self.world_size = world_size
        self.socket = socket
        self.as_tensors = as_tensors
        self.channels_last_to_chw = channels_last_to_chw
        self.copy = copy
        self.prefetch = prefetch
        self.transport = transport
        self.epoch = 0  # the epoch the next iter() streams
        self._epoch_set = False
        self._client = None

    def _connection(self):
        if self._client is None:
            self._client = presto.Client(self.socket)
        return self._client

    def set_epoch(self, epoch):
        """Streams epoch `epoch` from now on, until the next set_epoch."""
        self.epoch = int(epoch)
        self._epoch_set = True

    def __len__(self):
        """Batches per iteration for this rank, DistributedSampler-style: the
        dataset is padded to a multiple of world_size, each rank gets
        ceil(n / world_size) samples, batched with or without the short tail."""
        for d in self._connection().datasets()["datasets"]:
            if d["name"] == self.dataset:
                per_rank = -(-d["samples"] // self.world_size)
                if self.drop_last:
                    return per_rank // self.batch_size
                return -(-per_rank // self.batch_size)
        raise presto.NoDatasetError(presto.E_NODATASET,
                                    "prestod: no dataset named '%s'" % self.dataset)

    def __iter__(self):
        """Opens the stream for the current epoch (errors raise here)."""
        epoch = self.epoch
        if not self._epoch_set:
            self.epoch += 1
        stream = self._connection().stream(
            self.dataset, batch_size=self.batch_size, seed=self.seed, epoch=epoch,
            rank=self.rank, world=self.world_size, shuffle=self.shuffle,
            drop_last=self.drop_last, prefetch=self.prefetch, copy=self.copy,
            transport=self.transport)
        return self._batches(stream)

    def _batches(self, stream):
        with stream:
            for batch in stream:
                if self.as_tensors:
                    images, labels = batch.tensors()
                    if self.channels_last_to_chw:
                        images = images.permute(0, 3, 1, 2)
                else:
                    images, labels = batch.images, batch.labels
                    if self.channels_last_to_chw:
                        images = images.transpose(0, 3, 1, 2)
                yield images, labels

    def close(self):
        """Closes the control connection (a running iteration is unaffected)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
