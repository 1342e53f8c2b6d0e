#!/usr/bin/python3
"""Benchmark helper: a warm epoch consumed from Python as torch tensors, and the
machine's memcpy bandwidth, each printed as one JSON line.

    py_epoch.py epoch SOCKET DATASET TRANSPORT EPOCH... [--batch-size 64]
        Pulls the epochs, one after the other in this process as a training loop
        does, through one presto.torch.Loader (transport "shm" or "socket"),
        touching every batch as tests/bench/torch_baseline.py does (one element of
        the last image and the last label), and prints per epoch samples_per_s,
        seconds, samples and bytes_per_s (image bytes delivered per second).
    py_epoch.py memcpy [--mib 256] [--rounds 7]
        Copies a buffer of MIB MiB into another with numpy (one thread, one
        memcpy per round, after a warm-up round that faults the pages in) and
        prints the median bytes_per_s.

Run with PYTHONPATH=client/python and PRESTO_LIB pointing at the build's
libprestoclient.so.0 (bench.sh does).
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np


def cmd_epoch(a):
    from presto.torch import Loader

    loader = Loader(a.dataset, batch_size=a.batch_size, socket=a.socket,
                    transport=a.transport)
    for epoch in a.epochs:
        loader.set_epoch(epoch)
        samples = 0
        nbytes = 0
        touched = 0.0
        start = time.perf_counter()
        for images, labels in loader:
            # labels[-1]: a class index, or a row of soft targets (mixup/cutmix)
            touched += float(images[-1, 0, 0, 0]) + float(labels[-1].reshape(-1)[0])
            samples += images.shape[0]
            nbytes += images.numel() * images.element_size()
        seconds = time.perf_counter() - start
        print(json.dumps({"epoch": epoch, "transport": a.transport, "samples": samples,
                          "seconds": seconds, "samples_per_s": samples / seconds,
                          "bytes_per_s": nbytes / seconds, "skipped": 0}), flush=True)
    loader.close()


def cmd_memcpy(a):
    n = a.mib << 20
    src = np.ones(n, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # faults both buffers in
    rates = []
    for _ in range(a.rounds):
        t = time.perf_counter()
        np.copyto(dst, src)
        rates.append(n / (time.perf_counter() - t))
    print(json.dumps({"bytes_per_s": statistics.median(rates), "mib": a.mib,
                      "rounds": a.rounds}))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("epoch")
    e.add_argument("socket")
    e.add_argument("dataset")
    e.add_argument("transport", choices=["shm", "socket"])
    e.add_argument("epochs", type=int, nargs="+")
    e.add_argument("--batch-size", type=int, default=64)
    m = sub.add_parser("memcpy")
    m.add_argument("--mib", type=int, default=256)
    m.add_argument("--rounds", type=int, default=7)
    a = p.parse_args(argv)
    {"epoch": cmd_epoch, "memcpy": cmd_memcpy}[a.cmd](a)


if __name__ == "__main__":
    main(sys.argv[1:])
