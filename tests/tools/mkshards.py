#!/usr/bin/python3
"""Writes an ImageFolder tree as WebDataset tar shards.

    mkshards.py SRC_DIR OUT_PATTERN [--per-shard 256] [--labels int|names]

SRC_DIR is an ImageFolder root (SRC/CLASS/.../FILE with torchvision's image
extensions); OUT_PATTERN a file name with one "%06d" (the shard number), e.g.
/tmp/s/train-%06d.tar. The samples go in ImageFolder's order (classes sorted,
each class's files found recursively and sorted, as torchvision lists them),
PER_SHARD to a shard, each as two members: KEY.EXT (the file's bytes, its
extension lowercased) and KEY.cls (the class index, or with --labels names
the class name), where KEY is the file's path below SRC without its
extension, so epochs over the shards and over the tree hold the same samples
in the same order. Prints the number of shards written.
"""

import argparse
import io
import os
import sys
import tarfile

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def image_folder(root):
    """(path, class index, class name) as torchvision's ImageFolder orders them."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    out = []
    for idx, cls in enumerate(classes):
        for dirpath, _, files in sorted(os.walk(os.path.join(root, cls), followlinks=True)):
            for f in sorted(files):
                if f.lower().endswith(IMG_EXTENSIONS):
                    out.append((os.path.join(dirpath, f), idx, cls))
    return out


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("pattern")
    ap.add_argument("--per-shard", type=int, default=256)
    ap.add_argument("--labels", choices=["int", "names"], default="int")
    a = ap.parse_args()
    samples = image_folder(a.src)
    if not samples:
        print("mkshards: no images", file=sys.stderr)
        return 1
    shards = 0
    for start in range(0, len(samples), a.per_shard):
        path = a.pattern % shards
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
            for file, idx, cls in samples[start:start + a.per_shard]:
                rel = os.path.relpath(file, a.src)
                stem, ext = os.path.splitext(rel)
                key = stem.replace(".", "_")  # a key ends at the first dot
                with open(file, "rb") as f:
                    add(tar, key + ext.lower(), f.read())
                label = str(idx) if a.labels == "int" else cls
                add(tar, key + ".cls", label.encode())
        shards += 1
    print(shards)
    return 0


if __name__ == "__main__":
    sys.exit(main())
