#!/usr/bin/python3
"""Builds an ImageFolder JPEG data set from the real photos in shared/photos.

    mkdataset.py --out DIR --count N [--classes 10] [--seed 1] [--photos DIR]
                 [--min 300 --max 700] [--grey-every 0] [--subsampling mixed|420|444]

Writes DIR/class_00/img_00000.jpg ... (images dealt round-robin over the classes).
Each image is a random crop (40-100% of each side) of a random photo, rescaled so
that its longer side is a random size in [min, max] (portrait and landscape both
occur), randomly mirrored, saved as JPEG at quality 75-95 with 4:2:0 or 4:4:4 chroma
subsampling; with --grey-every K every K-th image is greyscale (mode L).
The output is a function of the arguments only (each image has its own RNG, so the
number of worker processes does not matter). DIR/.complete, holding the arguments,
is written last; when it already matches, the run does nothing.
"""

import argparse
import json
import multiprocessing
import os
import random
import sys
from pathlib import Path

from PIL import Image

SUBSAMPLING = {"420": 2, "444": 0}
MARKER = ".complete"

_photos = []  # per worker process: the decoded photos, loaded once by _init


def default_photos_dir():
    env = os.environ.get("PRESTO_PHOTOS")
    if env:
        return Path(env)
    repo_root = Path(__file__).resolve().parents[2]
    return repo_root.parent / "shared" / "photos"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--count", required=True, type=int, help="number of images")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--photos", type=Path, default=None,
                   help="source photos (default $PRESTO_PHOTOS, else ../shared/photos)")
    p.add_argument("--min", dest="min_side", type=int, default=300,
                   help="smallest longer side, pixels")
    p.add_argument("--max", dest="max_side", type=int, default=700,
                   help="largest longer side, pixels")
    p.add_argument("--grey-every", type=int, default=0,
                   help="make every K-th image greyscale (0: none)")
    p.add_argument("--subsampling", choices=("mixed", "420", "444"), default="mixed")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="worker processes (does not change the output)")
    a = p.parse_args(argv)
    if a.count < 0 or a.classes < 1:
        p.error("--count must be >= 0 and --classes >= 1")
    if not 16 <= a.min_side <= a.max_side:
        p.error("need 16 <= --min <= --max")
    if a.grey_every < 0:
        p.error("--grey-every must be >= 0")
    if a.photos is None:
        a.photos = default_photos_dir()
    return a


def class_dir_name(label, classes):
    return "class_%0*d" % (max(2, len(str(classes - 1))), label)


def image_path(out, index, classes):
    return out / class_dir_name(index % classes, classes) / ("img_%05d.jpg" % index)


def _init(photo_paths):
    _photos.clear()
    for path in photo_paths:
        with Image.open(path) as im:
            _photos.append(im.convert("RGB"))


def make_image(job):
    """Renders and writes image number `index`; job = (index, path, settings)."""
    index, path, s = job
    rng = random.Random("%d:%d" % (s["seed"], index))
    photo = _photos[rng.randrange(len(_photos))]
    pw, ph = photo.size
    # The photos are mostly landscape: pick the orientation first, then draw crops
    # until one has it (a 40-100% crop of any of them can have either).
    want_portrait = rng.random() < 0.5
    for _ in range(64):
        cw = max(1, round(pw * rng.uniform(0.4, 1.0)))
        ch = max(1, round(ph * rng.uniform(0.4, 1.0)))
        if (ch > cw) == want_portrait:
            break
    x = rng.randint(0, pw - cw)
    y = rng.randint(0, ph - ch)
    img = photo.crop((x, y, x + cw, y + ch))
    longer = rng.randint(s["min_side"], s["max_side"])
    scale = longer / max(cw, ch)
    size = (max(1, round(cw * scale)), max(1, round(ch * scale)))
    img = img.resize(size, Image.Resampling.BICUBIC)
    if rng.random() < 0.5:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    quality = rng.randint(75, 95)
    if s["subsampling"] == "mixed":
        subsampling = rng.choice((2, 0))
    else:
        subsampling = SUBSAMPLING[s["subsampling"]]
    k = s["grey_every"]
    if k and (index + 1) % k == 0:
        img = img.convert("L")
    img.save(path, "JPEG", quality=quality, subsampling=subsampling)
    return index


def clear_previous(out, dirs, pattern, extra=()):
    """Removes what an earlier (different or unfinished) run wrote, nothing else:
    the marker, the files named in extra, and in each of dirs the files matching
    pattern (then the directory, when that leaves it empty)."""
    for name in (MARKER,) + tuple(extra):
        (out / name).unlink(missing_ok=True)
    for d in dirs:
        if not d.is_dir():
            continue
        for f in d.glob(pattern):
            f.unlink()
        try:
            d.rmdir()
        except OSError:
            pass  # holds files we did not write: leave it


def is_complete(out, marker_text):
    """Whether an earlier run with the same settings (marker_text) finished."""
    marker = out / MARKER
    return marker.is_file() and marker.read_text() == marker_text


def mark_complete(out, marker_text):
    """Writes the marker last, atomically: the data set is complete."""
    tmp = out / (MARKER + ".tmp")
    tmp.write_text(marker_text)
    tmp.replace(out / MARKER)


def main(argv):
    a = parse_args(argv)
    photo_paths = sorted(str(p) for p in a.photos.glob("*.jpg"))
    if not photo_paths:
        sys.exit("mkdataset: no *.jpg photos in %s (set PRESTO_PHOTOS or --photos)" % a.photos)
    settings = {
        "count": a.count, "classes": a.classes, "seed": a.seed,
        "min_side": a.min_side, "max_side": a.max_side,
        "grey_every": a.grey_every, "subsampling": a.subsampling,
        "photos": [os.path.basename(p) for p in photo_paths],
        "version": 1,
    }
    marker_text = json.dumps(settings, sort_keys=True) + "\n"
    if is_complete(a.out, marker_text):
        print("mkdataset: %s is complete (%d images), reusing it" % (a.out, a.count))
        return 0

    a.out.mkdir(parents=True, exist_ok=True)
    clear_previous(a.out, a.out.glob("class_*"), "img_*.jpg")
    for label in range(a.classes):
        (a.out / class_dir_name(label, a.classes)).mkdir(exist_ok=True)

    jobs = [(i, str(image_path(a.out, i, a.classes)), settings) for i in range(a.count)]
    nproc = max(1, min(a.jobs, a.count // 64 or 1))
    if nproc == 1:
        _init(photo_paths)
        for job in jobs:
            make_image(job)
    else:
        with multiprocessing.Pool(nproc, initializer=_init, initargs=(photo_paths,)) as pool:
            for _ in pool.imap_unordered(make_image, jobs, chunksize=32):
                pass

    mark_complete(a.out, marker_text)
    print("mkdataset: wrote %d images in %d classes to %s" % (a.count, a.classes, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
