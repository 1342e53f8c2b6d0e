#!/usr/bin/python3
"""Writes the real photos in every image format and mode presto decodes, with
what PIL makes of each file, for tests/unit/test_decode_formats.c.

    mkformats.py --out DIR [--photos DIR]

For each file DIR/NAME it writes DIR/NAME.rgb and DIR/NAME.l, the bytes of
PIL's Image.open(f).convert('RGB') and .convert('L'), and one line in
DIR/index.tsv:  NAME <tab> ok|error|refused <tab> WIDTH <tab> HEIGHT <tab> WHY.
"error" means PIL refuses the file (so presto must too); "refused" a file
PIL reads and presto refuses by design (GIF); WHY says what the case
exercises.

Files come from two writers: PIL's own encoders (PNG, WebP lossy, lossless
and animated, BMP, PPM/PGM/PBM, TIFF with libtiff's compressions), and the
small writers below for layouts PIL does not write: 2/4/16-bit and
interlaced PNGs, tRNS chunks, short palettes with indices past their end,
BMP bitfields, RLE, OS/2 and V5 headers, top-down rows, plain and odd-maxval
PNMs, tiled and planar TIFFs. Pixels always come from the photos (cropped
and scaled to keep the test quick; one file keeps a photo's full size).
"""

import argparse
import io
import os
import struct
import sys
import warnings
import zlib

warnings.simplefilter("ignore")
from pathlib import Path

import numpy as np
from PIL import Image

INDEX = []


def photos_dir(arg):
    if arg:
        return Path(arg)
    env = os.environ.get("PRESTO_PHOTOS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "photos"


def add(out, name, data, why, presto=None):
    """Writes a file and PIL's view of it; presto="error" marks a file PIL
    reads that presto refuses by design (the C test expects the error)."""
    (out / name).write_bytes(data)
    if presto == "error":
        INDEX.append((name, "refused", 0, 0, why))
        return
    try:
        im = Image.open(io.BytesIO(data))
        rgb = im.convert("RGB")
        im = Image.open(io.BytesIO(data))
        grey = im.convert("L")
    except Exception as e:  # PIL refuses it: presto must as well
        INDEX.append((name, "error", 0, 0, f"{why} (PIL: {type(e).__name__})"))
        return
    (out / (name + ".rgb")).write_bytes(rgb.tobytes())
    (out / (name + ".l")).write_bytes(grey.tobytes())
    INDEX.append((name, "ok", rgb.width, rgb.height, why))


def pil_bytes(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


# ---- PNG writer: any colour type, depth, interlace, extra chunks ----

def png_chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(
        ">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def png_rows(samples, depth):
    """Packs an h x w x c array of sample values into filtered rows (filter 0
    and 1 alternating, so libspng's unfiltering runs)."""
    h, w, c = samples.shape
    out = bytearray()
    for y in range(h):
        row = samples[y].reshape(-1)
        if depth == 16:
            raw = row.astype(">u2").tobytes()
        elif depth == 8:
            raw = row.astype(np.uint8).tobytes()
        else:
            per = 8 // depth
            vals = list(row.astype(int)) + [0] * ((-len(row)) % per)
            raw = bytes(
                sum(v << (8 - depth * (k + 1)) for k, v in enumerate(vals[i:i + per]))
                for i in range(0, len(vals), per))
        bpp = max(1, c * depth // 8)
        if y % 2:
            f = bytes((raw[i] - (raw[i - bpp] if i >= bpp else 0)) & 255 for i in range(len(raw)))
            out += b"\x01" + f
        else:
            out += b"\x00" + raw
    return bytes(out)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]


def png_file(samples, depth, ctype, interlace=False, chunks=(), idat_split=1, end=True):
    h, w, _ = samples.shape
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 1 if interlace else 0)
    if interlace:
        raw = b"".join(png_rows(samples[y0::dy, x0::dx], depth)
                       for x0, y0, dx, dy in ADAM7 if samples[y0::dy, x0::dx].size)
    else:
        raw = png_rows(samples, depth)
    z = zlib.compress(raw, 6)
    parts = [b"\x89PNG\r\n\x1a\n", png_chunk(b"IHDR", ihdr)]
    parts += [png_chunk(t, d) for t, d in chunks]
    step = -(-len(z) // idat_split)
    parts += [png_chunk(b"IDAT", z[i:i + step]) for i in range(0, len(z), step)]
    if end:
        parts.append(png_chunk(b"IEND", b""))
    return b"".join(parts)


# ---- BMP writer ----

def bmp_file(rows_bottom_up, bits, w, h, header=40, compression=0, palette=b"",
             masks=(), top_down=False, colors=None, offset=None):
    """rows_bottom_up: the pixel data as stored (already padded)."""
    pixels = rows_bottom_up
    if header == 12:
        info = struct.pack("<IHHHH", 12, w, h, 1, bits)
    else:
        info = struct.pack("<IiiHHIIiiII", header, w, -h if top_down else h, 1, bits,
                           compression, len(pixels), 2835, 2835,
                           len(palette) // (3 if header == 12 else 4) if colors is None else colors, 0)
        if header > 40:
            extra = b"".join(struct.pack("<I", m) for m in masks) if masks else b""
            info += extra + b"\0" * (header - 40 - len(extra))
            masks = ()
    mask_bytes = b"".join(struct.pack("<I", m) for m in masks)
    start = 14 + len(info) + len(mask_bytes) + len(palette) if offset is None else offset
    head = b"BM" + struct.pack("<IHHI", start + len(pixels), 0, 0, start)
    return head + info + mask_bytes + palette + pixels


def bmp_rows(arr, bits, top_down=False):
    """Packs an h x w array (indices, or h x w x k bytes) into padded rows."""
    h, w = arr.shape[:2]
    stride = ((w * bits + 31) >> 3) & ~3
    rows = []
    for y in range(h):
        r = arr[y]
        if bits < 8:
            per = 8 // bits
            vals = list(r.astype(int)) + [0] * ((-w) % per)
            b = bytes(sum(v << (8 - bits * (k + 1)) for k, v in enumerate(vals[i:i + per]))
                      for i in range(0, len(vals), per))
        else:
            b = r.astype(np.uint8).tobytes()
        rows.append(b + b"\0" * (stride - len(b)))
    if not top_down:
        rows.reverse()
    return b"".join(rows)


def rle8(idx):
    """RLE8 of rows (bottom-up) with runs, absolute runs and end-of-lines."""
    h, w = idx.shape
    out = bytearray()
    for y in range(h - 1, -1, -1):
        r = list(idx[y])
        x = 0
        while x < w:
            n = 1
            while x + n < w and n < 255 and r[x + n] == r[x]:
                n += 1
            if n >= 3 or w - x < 3:
                out += bytes((n, r[x]))
                x += n
            else:
                m = min(w - x, 40)
                out += bytes((0, m)) + bytes(r[x:x + m])
                if m % 2:
                    out += b"\0"
                x += m
        out += b"\0\0"
    out += b"\0\1"
    return bytes(out)


def rle4(idx):
    h, w = idx.shape
    out = bytearray()
    for y in range(h - 1, -1, -1):
        r = [int(v) for v in idx[y]]
        x = 0
        while x < w:
            n = min(w - x, 200)
            # encoded runs of alternating pairs, and absolute runs of even length
            if x % 3 == 0 and n >= 8:
                m = 8
                out += bytes((0, m)) + bytes((r[x + i] << 4 | r[x + i + 1]) for i in range(0, m, 2))
                if (m // 2) % 2:
                    out += b"\0"
                x += m
            else:
                m = min(n, 7)
                out += bytes((m, r[x] << 4 | (r[x + 1] if x + 1 < w else 0)))
                x += m
        out += b"\0\0"
    out += b"\0\1"
    return bytes(out)


# ---- TIFF writer (uncompressed): strips or tiles, contiguous or planar ----

def tiff_file(samples, bps, photometric, extra=(), tile=None, planar=1, colormap=None,
              big_endian=False, rows_per_strip=7, sample_format=None):
    h, w, c = samples.shape
    e = ">" if big_endian else "<"
    dt = {8: np.uint8, 16: np.dtype(e + "u2")}.get(bps)

    def pack(a):  # a: rows x cols x k
        if bps >= 8:
            return a.astype(dt).tobytes()
        per = 8 // bps
        out = bytearray()
        for row in a.reshape(a.shape[0], -1):
            vals = list(row.astype(int)) + [0] * ((-len(row)) % per)
            out += bytes(sum(v << (8 - bps * (k + 1)) for k, v in enumerate(vals[i:i + per]))
                         for i in range(0, len(vals), per))
        return bytes(out)

    planes = [samples[:, :, [i]] for i in range(c)] if planar == 2 else [samples]
    pieces = []
    for p in planes:
        if tile:
            tw, th = tile
            for y0 in range(0, h, th):
                for x0 in range(0, w, tw):
                    t = np.zeros((th, tw, p.shape[2]), dtype=np.int64)
                    sub = p[y0:y0 + th, x0:x0 + tw]
                    t[:sub.shape[0], :sub.shape[1]] = sub
                    pieces.append(pack(t))
        else:
            for y0 in range(0, h, rows_per_strip):
                pieces.append(pack(p[y0:y0 + rows_per_strip]))
    tags = {256: (4, [w]), 257: (4, [h]), 258: (3, [bps] * c), 259: (3, [1]),
            262: (3, [photometric]), 277: (3, [c]), 284: (3, [planar])}
    if sample_format:
        tags[339] = (3, [sample_format] * c)
    if extra:
        tags[338] = (3, list(extra))
    if colormap is not None:
        tags[320] = (3, list(colormap))
    if tile:
        tags[322] = (4, [tile[0]])
        tags[323] = (4, [tile[1]])
    else:
        tags[278] = (4, [rows_per_strip])
    # layout: header, pixel data, then the IFD and its out-of-line values
    data = b"".join(pieces)
    offsets, pos = [], 8
    for p in pieces:
        offsets.append(pos)
        pos += len(p)
    tags[324 if tile else 273] = (4, offsets)
    tags[325 if tile else 279] = (4, [len(p) for p in pieces])
    ifd_pos = 8 + len(data) + (len(data) % 2)
    entries = sorted(tags.items())
    extra_pos = ifd_pos + 2 + 12 * len(entries) + 4
    ifd, blob = b"", b""
    for tag, (typ, vals) in entries:
        size = {3: 2, 4: 4}[typ]
        fmt = e + ("H" if typ == 3 else "I") * len(vals)
        raw = struct.pack(fmt, *vals)
        if len(raw) <= 4:
            ifd += struct.pack(e + "HHI", tag, typ, len(vals)) + raw + b"\0" * (4 - len(raw))
        else:
            ifd += struct.pack(e + "HHII", tag, typ, len(vals), extra_pos + len(blob))
            blob += raw
            if len(blob) % 2:
                blob += b"\0"
        del size
    head = (b"MM\0*" if big_endian else b"II*\0") + struct.pack(e + "I", ifd_pos)
    pad = b"\0" * (ifd_pos - 8 - len(data))
    return head + data + pad + struct.pack(e + "H", len(entries)) + ifd + b"\0\0\0\0" + blob


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--photos")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    photos = sorted(photos_dir(a.photos).glob("*.jpg"))
    if not photos:
        print("mkformats: no photos", file=sys.stderr)
        return 2
    full = Image.open(photos[0]).convert("RGB")
    # Small odd-sized views of each photo: crops keep the photos' detail.
    smalls = []
    for i, p in enumerate(photos):
        im = Image.open(p).convert("RGB")
        box = (37 * i, 23 * i, 37 * i + 157, 23 * i + 101)
        smalls.append(im.crop(box))
    rgb = smalls[0]
    rgba = smalls[1].copy()
    rgba.putalpha(smalls[2].convert("L"))
    grey = smalls[2].convert("L")
    arr = np.asarray(rgb).astype(np.int64)
    garr = np.asarray(grey).astype(np.int64)
    alpha = np.asarray(smalls[1].convert("L")).astype(np.int64)

    # ---- PNG through PIL ----
    add(out, "full_rgb.png", pil_bytes(full, "PNG"), "full-size photo, PIL's adaptive filters")
    add(out, "rgb.png", pil_bytes(rgb, "PNG"), "RGB 8")
    add(out, "rgba.png", pil_bytes(rgba, "PNG"), "RGBA 8: alpha dropped")
    add(out, "l.png", pil_bytes(grey, "PNG"), "grey 8")
    add(out, "la.png", pil_bytes(grey.convert("LA"), "PNG"), "grey+alpha 8")
    add(out, "bw.png", pil_bytes(grey.convert("1"), "PNG"), "1-bit grey")
    for colors in (256, 16, 4, 2):
        p = rgb.quantize(colors)
        add(out, f"p{colors}.png", pil_bytes(p, "PNG"), f"palette of {colors} (PIL picks the depth)")
    p = rgb.quantize(64)
    add(out, "p_trns1.png", pil_bytes(p, "PNG", transparency=5), "palette, one transparent entry")
    trns = bytes((i * 7) & 255 for i in range(64))
    add(out, "p_trns.png", pil_bytes(p, "PNG", transparency=trns), "palette with per-entry alpha")
    i16 = Image.fromarray((garr * 257 // 3).astype(np.uint16))
    add(out, "i16_pil.png", pil_bytes(i16, "PNG"), "16-bit grey from PIL: clipped to 255")

    # ---- PNG through the writer ----
    add(out, "grey2.png", png_file((garr >> 6)[:, :, None], 2, 0), "2-bit grey x85")
    add(out, "grey4.png", png_file((garr >> 4)[:, :, None], 4, 0), "4-bit grey x17")
    add(out, "grey16.png", png_file((garr * 3)[:, :, None], 16, 0), "16-bit grey: clipped")
    add(out, "grey16_low.png", png_file((garr // 2)[:, :, None], 16, 0), "16-bit grey under 256")
    add(out, "rgb16.png", png_file(arr * 257 + (arr % 7), 16, 2), "16-bit RGB: high bytes")
    la16 = np.dstack([garr * 257, alpha * 257 + 3])
    add(out, "la16.png", png_file(la16, 16, 4), "16-bit grey+alpha")
    rgba16 = np.dstack([arr * 256 + 255 - arr, alpha * 257])
    add(out, "rgba16.png", png_file(rgba16, 16, 6), "16-bit RGBA")
    add(out, "rgb_interlaced.png", png_file(arr, 8, 2, interlace=True), "Adam7 RGB 8")
    add(out, "grey1_interlaced.png", png_file((garr >> 7)[:, :, None], 1, 0, interlace=True),
        "Adam7 1-bit grey")
    pal_idx = (garr >> 5)  # 0..7
    plte = bytes(v for i in range(8) for v in (i * 30, 255 - i * 20, (i * 90) & 255))
    add(out, "p3_interlaced.png",
        png_file(pal_idx[:, :, None], 4, 3, interlace=True, chunks=[(b"PLTE", plte)]),
        "Adam7 4-bit palette")
    short = bytes(v for i in range(3) for v in (200, i * 60, 10))
    add(out, "p_short.png", png_file(pal_idx[:, :, None], 8, 3, chunks=[(b"PLTE", short)]),
        "indices past a 3-entry PLTE: PIL's grey ramp")
    add(out, "rgb_trns.png",
        png_file(arr, 8, 2, chunks=[(b"tRNS", struct.pack(">HHH", 10, 20, 30)),
                                    (b"gAMA", struct.pack(">I", 45455))]),
        "RGB with tRNS and gAMA (ignored)")
    add(out, "l_trns.png", png_file(garr[:, :, None], 8, 0, chunks=[(b"tRNS", b"\0\x05")]),
        "grey with tRNS")
    add(out, "rgb_split.png", png_file(arr, 8, 2, idat_split=7), "seven IDAT chunks")
    add(out, "rgb_noend.png", png_file(arr, 8, 2, end=False), "no IEND (PIL does not need it)")
    good = png_file(arr, 8, 2)
    add(out, "trunc_half.png", good[:len(good) // 2], "truncated in IDAT")
    add(out, "trunc_header.png", good[:20], "truncated in IHDR")
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    add(out, "corrupt_idat.png", bytes(bad), "a flipped byte in IDAT")

    # ---- WebP ----
    add(out, "lossy.webp", pil_bytes(rgb, "WEBP", quality=80), "lossy: libwebp's fancy upsampling")
    add(out, "full_lossy.webp", pil_bytes(full, "WEBP", quality=90), "full-size lossy")
    add(out, "lossy_alpha.webp", pil_bytes(rgba, "WEBP", quality=70), "lossy with alpha")
    add(out, "lossless.webp", pil_bytes(rgb, "WEBP", lossless=True), "lossless")
    add(out, "lossless_alpha.webp", pil_bytes(rgba, "WEBP", lossless=True, exact=True),
        "lossless with alpha, exact")
    anim = pil_bytes(smalls[0], "WEBP", save_all=True,
                     append_images=[smalls[1], smalls[2]], duration=100, quality=85)
    add(out, "anim.webp", anim, "animation: the first frame")
    lossy = pil_bytes(rgb, "WEBP", quality=80)
    add(out, "trunc.webp", lossy[:len(lossy) * 2 // 3], "truncated lossy")

    # ---- BMP through PIL ----
    add(out, "rgb.bmp", pil_bytes(rgb, "BMP"), "24-bit")
    add(out, "rgba.bmp", pil_bytes(rgba, "BMP"), "32-bit BI_RGB: the fourth byte ignored")
    add(out, "l.bmp", pil_bytes(grey, "BMP"), "8-bit grey palette: read as grey")
    add(out, "bw.bmp", pil_bytes(grey.convert("1"), "BMP"), "1-bit black and white")
    add(out, "p.bmp", pil_bytes(rgb.quantize(200), "BMP"), "8-bit palette of 200")

    # ---- BMP through the writer ----
    h, w = garr.shape
    idx16 = garr >> 4
    pal16 = b"".join(bytes((i * 16, 255 - i * 10, i * 5, 0)) for i in range(16))
    add(out, "p4.bmp", bmp_file(bmp_rows(idx16, 4), 4, w, h, palette=pal16), "4-bit palette")
    pal2 = bytes((10, 200, 30, 0, 250, 40, 90, 0))
    add(out, "p1.bmp", bmp_file(bmp_rows(garr >> 7, 1), 1, w, h, palette=pal2),
        "1-bit coloured palette")
    short_pal = b"".join(bytes((i * 60, 30, 200 - i * 50, 0)) for i in range(4))
    add(out, "p8_short.bmp",
        bmp_file(bmp_rows(garr >> 2, 8), 8, w, h, palette=short_pal, colors=4),
        "indices past a 4-colour palette")
    add(out, "rgb_topdown.bmp", bmp_file(bmp_rows(arr[:, :, ::-1], 24, True), 24, w, h, top_down=True),
        "24-bit top-down")
    add(out, "rgb_v5.bmp", bmp_file(bmp_rows(arr[:, :, ::-1], 24), 24, w, h, header=124),
        "24-bit, V5 header")
    os2pal = b"".join(bytes((i * 16, 255 - i * 10, i * 5)) for i in range(16))
    add(out, "p4_os2.bmp", bmp_file(bmp_rows(idx16, 4), 4, w, h, header=12, palette=os2pal),
        "OS/2 1.x header, BGR palette")
    r5, g5, b5 = arr[:, :, 0] >> 3, arr[:, :, 1] >> 3, arr[:, :, 2] >> 3
    v555 = (r5 << 10) | (g5 << 5) | b5
    b555 = np.dstack([v555 & 255, v555 >> 8])
    add(out, "rgb555.bmp", bmp_file(bmp_rows(b555, 16), 16, w, h), "16-bit 5-5-5")
    g6 = arr[:, :, 1] >> 2
    v565 = (r5 << 11) | (g6 << 5) | b5
    b565 = np.dstack([v565 & 255, v565 >> 8])
    add(out, "rgb565.bmp",
        bmp_file(bmp_rows(b565, 16), 16, w, h, compression=3, masks=(0xF800, 0x7E0, 0x1F)),
        "16-bit 5-6-5 bitfields after a 40-byte header")
    ab = np.dstack([alpha, arr[:, :, 2], arr[:, :, 1], arr[:, :, 0]])  # A B G R
    add(out, "abgr.bmp",
        bmp_file(bmp_rows(ab, 32), 32, w, h, header=108, compression=3,
                 masks=(0xFF000000, 0xFF0000, 0xFF00, 0xFF)), "32-bit ABGR bitfields, V4")
    rgba_b = np.dstack([arr, alpha])
    add(out, "rgba_bf.bmp",
        bmp_file(bmp_rows(rgba_b, 32), 32, w, h, header=124, compression=3,
                 masks=(0xFF, 0xFF00, 0xFF0000, 0xFF000000)), "32-bit RGBA bitfields, V5")
    idx8 = (garr >> 3)
    pal32 = b"".join(bytes((i * 8, 255 - i * 8, (i * 40) & 255, 0)) for i in range(32))
    add(out, "rle8.bmp", bmp_file(rle8(idx8), 8, w, h, compression=1, palette=pal32, colors=32),
        "RLE8")
    add(out, "rle4.bmp", bmp_file(rle4(idx16), 4, w, h, compression=2, palette=pal16), "RLE4")
    rgbbmp = pil_bytes(rgb, "BMP")
    add(out, "trunc.bmp", rgbbmp[:len(rgbbmp) - 500], "truncated pixels")
    add(out, "bad_depth.bmp", rgbbmp[:28] + b"\x07\x00" + rgbbmp[30:], "7 bits a pixel")

    # ---- PNM ----
    add(out, "rgb.ppm", pil_bytes(rgb, "PPM"), "P6")
    add(out, "l.pgm", pil_bytes(grey, "PPM"), "P5")
    add(out, "bw.pbm", pil_bytes(grey.convert("1"), "PPM"), "P4")
    add(out, "i16.pgm", pil_bytes(i16.convert("I"), "PPM"), "P5 maxval 65535: clipped")
    hdr = f"P5\n# a comment\n{w} {h}\n# another\n100\n".encode()
    add(out, "l_max100.pgm", hdr + (garr * 100 // 255).astype(np.uint8).tobytes(), "P5 maxval 100")
    hdr = f"P5 {w} {h} 1000\n".encode()
    add(out, "l_max1000.pgm", hdr + (garr * 1000 // 255).astype(">u2").tobytes(),
        "P5 maxval 1000: mode I, clipped")
    hdr = f"P6\n{w} {h}\n65535\n".encode()
    add(out, "rgb16.ppm", hdr + (arr * 257 + arr % 5).astype(">u2").tobytes(), "P6 maxval 65535")
    hdr = f"P6\n{w} {h}\n15\n".encode()
    add(out, "rgb_max15.ppm", hdr + (arr >> 4).astype(np.uint8).tobytes(), "P6 maxval 15")
    ptxt = "\n".join(" ".join(str(v) for v in row) for row in (garr >> 7))
    add(out, "bw_plain.pbm", f"P1\n{w} {h}\n{ptxt}\n".encode(), "P1")
    ptxt = "\n".join(" ".join(str(v) for v in row) for row in (garr * 3))
    add(out, "l_plain.pgm", f"P2\n# plain\n{w} {h}\n765\n{ptxt}\n".encode(), "P2 maxval 765")
    ptxt = "\n".join(" ".join(str(v) for v in row.reshape(-1)) for row in arr)
    add(out, "rgb_plain.ppm", f"P3\n{w} {h}\n255\n{ptxt}\n".encode(), "P3")
    ppm = pil_bytes(rgb, "PPM")
    add(out, "trunc.ppm", ppm[:len(ppm) - 100], "truncated P6")
    add(out, "bad_maxval.pgm", f"P5 {w} {h} 0\n".encode() + b"\0" * (w * h), "maxval 0")
    add(out, "over_maxval.pgm", f"P2 2 1 10 5 11\n".encode(), "P2 sample over maxval")

    # ---- TIFF through PIL (libtiff for the compressed ones) ----
    add(out, "rgb.tif", pil_bytes(rgb, "TIFF"), "uncompressed RGB")
    add(out, "full_rgb_lzw.tif", pil_bytes(full, "TIFF", compression="tiff_lzw"),
        "full-size LZW")
    add(out, "rgb_deflate.tif", pil_bytes(rgb, "TIFF", compression="tiff_adobe_deflate"),
        "Deflate")
    add(out, "rgb_packbits.tif", pil_bytes(rgb, "TIFF", compression="packbits"), "PackBits")
    add(out, "rgb_jpeg.tif", pil_bytes(rgb, "TIFF", compression="jpeg"),
        "JPEG-in-TIFF (YCbCr, libjpeg's RGB)")
    add(out, "rgba.tif", pil_bytes(rgba, "TIFF", compression="tiff_lzw"), "RGBA")
    add(out, "l.tif", pil_bytes(grey, "TIFF", compression="tiff_adobe_deflate"), "grey 8")
    add(out, "la.tif", pil_bytes(grey.convert("LA"), "TIFF"), "grey+alpha")
    add(out, "bw.tif", pil_bytes(grey.convert("1"), "TIFF", compression="group4"), "1-bit G4")
    add(out, "p.tif", pil_bytes(rgb.quantize(100), "TIFF", compression="tiff_lzw"), "palette")
    add(out, "cmyk.tif", pil_bytes(rgb.convert("CMYK"), "TIFF"), "CMYK")
    add(out, "i16.tif", pil_bytes(i16, "TIFF", compression="tiff_lzw"), "16-bit grey: clipped")

    # ---- TIFF through the writer ----
    add(out, "rgb_tiled.tif", tiff_file(arr, 8, 2, tile=(32, 16)), "tiled RGB")
    add(out, "rgb_planar.tif", tiff_file(arr, 8, 2, planar=2), "separate planes")
    add(out, "rgb_planar_tiled.tif", tiff_file(arr, 8, 2, planar=2, tile=(48, 32)),
        "separate planes in tiles")
    add(out, "rgb16_be.tif", tiff_file(arr * 257 + 100, 16, 2, big_endian=True),
        "16-bit RGB big-endian")
    add(out, "rgb16.tif", tiff_file(arr * 257 + 100, 16, 2), "16-bit RGB little-endian")
    prem = np.dstack([arr * alpha[:, :, None] // 255, alpha])
    add(out, "rgba_assoc.tif", tiff_file(prem, 8, 2, extra=(1,)),
        "associated alpha: divided out as PIL does")
    add(out, "rgbx.tif", tiff_file(np.dstack([arr, alpha]), 8, 2, extra=(0,)), "RGBX")
    add(out, "grey4_white.tif", tiff_file((garr >> 4)[:, :, None], 4, 0),
        "4-bit min-is-white: inverted")
    add(out, "grey2.tif", tiff_file((garr >> 6)[:, :, None], 2, 1), "2-bit grey")
    cmap = [(i * 4000) & 0xFFFF for i in range(16)] + [65535 - i * 3000 for i in range(16)] + \
           [i * 257 for i in range(16)]
    add(out, "p4.tif", tiff_file(idx16[:, :, None], 4, 3, colormap=cmap), "4-bit palette")
    add(out, "grey16_white.tif", tiff_file((garr * 2)[:, :, None], 16, 0),
        "16-bit min-is-white (PIL does not invert)")
    add(out, "float.tif", tiff_file(garr[:, :, None], 8, 1, sample_format=3),
        "8-bit float samples: PIL has no mode")
    tif = pil_bytes(rgb, "TIFF", compression="tiff_lzw")
    add(out, "trunc.tif", tif[:len(tif) // 3], "truncated LZW")

    # ---- others ----
    add(out, "photo.gif", pil_bytes(rgb, "GIF"), "GIF: PIL reads it, presto does not",
        presto="error")

    with open(out / "index.tsv", "w") as f:
        for row in INDEX:
            f.write("\t".join(str(v) for v in row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
