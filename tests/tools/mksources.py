#!/usr/bin/python3
"""Writes one set of images as every local source presto reads, for
tests/integration/test_sources.c and tests/python/test_fidelity.py.

    mksources.py SRC_DIR OUT_DIR [--per-shard 10]

SRC_DIR is an ImageFolder of JPEGs (mkdataset.py's). OUT_DIR gets:
  folder/       the same tree with the files re-encoded round robin as PNG
                (RGB, palette, grey 16-bit, RGBA), WebP (lossless), BMP, PPM,
                PGM, TIFF, or kept as JPEG, one extension upper-case (.PNG),
                plus files torchvision's ImageFolder does not take (.gif,
                .txt) that must be left out
  list.csv      the folder's samples in ImageFolder's order: relative paths,
                class names as labels
  list.jsonl    the same with absolute paths and integer labels
  shards/train-%06d.tar   WebDataset shards of the folder (mkshards.py)
Prints the number of samples and of shards.
"""

import argparse
import csv
import json
import os
import subprocess
import sys

from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mkshards import image_folder  # noqa: E402

# (extension, how to save): every one lossless but the JPEG kept as it is.
KINDS = [
    (".jpg", None),
    (".png", lambda im, p: im.save(p, "PNG")),
    (".webp", lambda im, p: im.save(p, "WEBP", lossless=True)),
    (".bmp", lambda im, p: im.save(p, "BMP")),
    (".ppm", lambda im, p: im.save(p, "PPM")),
    (".pgm", lambda im, p: im.convert("L").save(p, "PPM")),
    (".tif", lambda im, p: im.save(p, "TIFF", compression="tiff_lzw")),
    (".PNG", lambda im, p: im.quantize(64).save(p, "PNG")),
    (".tiff", lambda im, p: im.convert("RGBA").save(p, "TIFF")),
    (".png", lambda im, p: im.convert("L").convert("I").save(p, "PNG")),  # 16-bit grey
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--per-shard", type=int, default=10)
    a = ap.parse_args()
    folder = os.path.join(a.out, "folder")
    n = 0
    for i, (path, _, cls) in enumerate(image_folder(a.src)):
        ext, save = KINDS[i % len(KINDS)]
        stem = os.path.splitext(os.path.basename(path))[0]
        d = os.path.join(folder, cls)
        os.makedirs(d, exist_ok=True)
        dst = os.path.join(d, stem + ext)
        if save is None:
            with open(path, "rb") as f, open(dst, "wb") as g:
                g.write(f.read())
        else:
            with Image.open(path) as im:
                save(im.convert("RGB"), dst)
        n += 1
    # Not samples for torchvision: left out by every source.
    first = sorted(os.listdir(folder))[0]
    with Image.open(os.path.join(a.src, first, sorted(os.listdir(os.path.join(a.src, first)))[0])) as im:
        im.save(os.path.join(folder, first, "zz-not-a-sample.gif"), "GIF")
    with open(os.path.join(folder, first, "notes.txt"), "w") as f:
        f.write("not an image\n")

    samples = image_folder(folder)
    assert len(samples) == n, (len(samples), n)
    with open(os.path.join(a.out, "list.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "label"])
        for path, _, cls in samples:
            w.writerow([os.path.relpath(path, a.out), cls])
    with open(os.path.join(a.out, "list.jsonl"), "w") as f:
        for path, idx, _ in samples:
            f.write(json.dumps({"path": os.path.abspath(path), "label": idx}) + "\n")
    out = subprocess.run([sys.executable, os.path.join(HERE, "mkshards.py"), folder,
                          os.path.join(a.out, "shards", "train-%06d.tar"),
                          "--per-shard", str(a.per_shard)],
                         check=True, capture_output=True, text=True).stdout
    print(n, int(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
