#!/usr/bin/python3
"""The object-store baselines presto is measured against (the setting of the
ConcurrentDataloader paper): torchvision's transforms in a DataLoader whose
Dataset fetches every sample from S3 with boto3 (Debian's python3-boto3).

    s3_baseline.py ENDPOINT BUCKET PREFIX [--mode plain|threads] [--workers 2]
                   [--threads 16] [--epochs 1] [--batch-size 64]
                   [--access-key K --secret S] [--region us-east-1]

The sample list is PREFIX/CLASS/NAME keys from ListObjectsV2 (paginated),
classes sorted, keys sorted, image extensions as torchvision's: the
ImageFolder of the same files. Every sample is decoded with PIL and goes
through the eval transforms (Resize(256), CenterCrop(224),
RandomHorizontalFlip, PILToTensor: uint8), the same work as prestod's
default pipeline.
  --mode plain    (a) one GET after the other in each of --workers
                  DataLoader workers, each worker with its own boto3 client
  --mode threads  (b) the paper's fix: each worker fetches a whole batch's
                  samples with a pool of --threads threads, then transforms
                  them (batches come from a BatchSampler)
Each epoch is timed from creating its iterator to the last batch (every
batch touched). Prints one JSON line: {"epochs": [{"seconds", "samples",
"samples_per_s"}...]}.
"""

import argparse
import io
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import torch
from botocore.config import Config
from PIL import Image
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler
from torchvision import transforms

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def client(a):
    return boto3.client("s3", endpoint_url=a.endpoint, region_name=a.region,
                        aws_access_key_id=a.access_key, aws_secret_access_key=a.secret,
                        config=Config(s3={"addressing_style": "path"},
                                      max_pool_connections=max(10, a.threads),
                                      retries={"max_attempts": 10, "mode": "standard"}))


def list_samples(a):
    s3 = client(a)
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=a.bucket, Prefix=a.prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    by_class = {}
    prefix = a.prefix if a.prefix.endswith("/") or not a.prefix else a.prefix + "/"
    for k in keys:
        rest = k[len(prefix):]
        if "/" not in rest or not k.lower().endswith(IMG_EXTENSIONS):
            continue
        by_class.setdefault(rest.split("/", 1)[0], []).append(k)
    classes = sorted(by_class)
    return [(k, i) for i, c in enumerate(classes) for k in sorted(by_class[c])]


TRANSFORM = transforms.Compose([
    transforms.Resize(256),
    transforms.CenterCrop(224),
    transforms.RandomHorizontalFlip(),
    transforms.PILToTensor(),
])


class S3Images(Dataset):
    """One GET per sample (mode plain); a client per worker process."""

    def __init__(self, a, samples):
        self.a, self.samples, self.s3 = a, samples, None

    def __len__(self):
        return len(self.samples)

    def fetch(self, key):
        if self.s3 is None:
            self.s3 = client(self.a)
        return self.s3.get_object(Bucket=self.a.bucket, Key=key)["Body"].read()

    def load(self, data):
        return TRANSFORM(Image.open(io.BytesIO(data)).convert("RGB"))

    def __getitem__(self, i):
        key, label = self.samples[i]
        return self.load(self.fetch(key)), label


class S3Batches(S3Images):
    """A whole batch per item (mode threads): its GETs on a thread pool."""

    pool = None

    def __getitem__(self, indices):
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.a.threads)
            self.s3 = client(self.a)  # boto3 clients are thread-safe
        keys = [self.samples[i][0] for i in indices]
        datas = list(self.pool.map(self.fetch, keys))
        images = torch.stack([self.load(d) for d in datas])
        labels = torch.tensor([self.samples[i][1] for i in indices])
        return images, labels


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("endpoint")
    p.add_argument("bucket")
    p.add_argument("prefix")
    p.add_argument("--mode", choices=["plain", "threads"], default="plain")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--access-key", default="S3RVER")
    p.add_argument("--secret", default="S3RVER")
    p.add_argument("--region", default="us-east-1")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    samples = list_samples(a)
    if not samples:
        print("s3_baseline: no samples", file=sys.stderr)
        return 1
    if a.mode == "plain":
        loader = DataLoader(S3Images(a, samples), batch_size=a.batch_size, shuffle=True,
                            num_workers=a.workers, persistent_workers=False)
    else:
        sampler = BatchSampler(RandomSampler(range(len(samples))), a.batch_size, False)
        loader = DataLoader(S3Batches(a, samples), batch_size=None, sampler=sampler,
                            num_workers=a.workers, persistent_workers=False)
    epochs = []
    for _ in range(a.epochs):
        n = 0
        touched = 0
        start = time.perf_counter()
        for images, labels in loader:
            touched += float(images[-1, 0, 0, 0]) + int(labels[-1])
            n += images.shape[0]
        seconds = time.perf_counter() - start
        epochs.append({"seconds": round(seconds, 4), "samples": n,
                       "samples_per_s": round(n / seconds, 2)})
    print(json.dumps({"mode": a.mode, "workers": a.workers, "threads": a.threads,
                      "epochs": epochs}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
