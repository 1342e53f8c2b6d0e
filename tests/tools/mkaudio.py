#!/usr/bin/python3
"""Builds a spoken-words audio data set (a CLASS/ tree) with espeak-ng, flac, lame, oggenc.

    mkaudio.py --out DIR --count N [--seed 1] [--formats wav,flac,mp3,ogg]
               [--rates 16000,22050,44100,48000] [--stereo-every 5] [--jobs N]

Writes DIR/WORD/clip_00000.EXT for ten words (the classes: yes no up down left
right on off stop go, dealt round-robin; the directories sort as torchvision's
and presto's ImageFolder order them). Each clip is the word spoken by espeak-ng
with a voice, variant, speed, pitch and amplitude drawn from the clip's own
RNG, placed at a random offset in leading and trailing silence, with a little
white noise (30-50 dB below the speech), resampled (FFT, band-limited) from
espeak's 22050 Hz to a rate from --rates, made stereo every --stereo-every
clips on average (the second channel delayed by a few samples and quieter),
then encoded in a format dealt in turn over rounds of the ten words (so every
word comes in every format):

  wav   16-bit PCM, 24-bit PCM (WAVE_FORMAT_EXTENSIBLE), 32-bit float or 8-bit
        unsigned, in the ratio 4:1:1:1 (written here, in Python)
  flac  flac(1) from a 16-bit WAV, a quarter from a 24-bit one, level 0-8
  mp3   lame(1), CBR 48-192 kbit/s or VBR -V 2..6
  ogg   oggenc(1), quality 1-6, a fixed serial number per clip

The output is a function of the arguments only: every clip has its own RNG
and every encoder is deterministic given its arguments (oggenc's serial number
is set), so the number of worker processes does not matter. DIR/.complete,
holding the arguments, is written last; when it already matches, the run
does nothing. DIR/index.json lists every clip (path, label, word, rate,
channels, format, voice) for the tests.
"""

import argparse
import io
import json
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

import numpy as np

from mkdataset import clear_previous, is_complete, mark_complete

WORDS = ["yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go"]
VOICES = ["en", "en-us", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp",
          "en-gb-x-gbcwmd", "en-029", "en-us-nyc"]
VARIANTS = ["", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5",
            "croak", "klatt", "klatt2", "klatt4"]
ESPEAK_RATE = 22050
TOOLS = {"wav": None, "flac": "flac", "mp3": "lame", "ogg": "oggenc"}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--count", required=True, type=int, help="number of clips")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--formats", default="wav,flac,mp3,ogg",
                   help="comma-separated, dealt in turn (default wav,flac,mp3,ogg)")
    p.add_argument("--rates", default="16000,22050,44100,48000",
                   help="sample rates to draw from (Hz)")
    p.add_argument("--stereo-every", type=int, default=5,
                   help="one clip in K is stereo (0: none)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="worker processes (does not change the output)")
    a = p.parse_args(argv)
    a.formats = a.formats.split(",")
    for f in a.formats:
        if f not in TOOLS:
            p.error("unknown format %r (wav, flac, mp3, ogg)" % f)
    a.rates = [int(r) for r in a.rates.split(",")]
    if a.count < 0 or a.stereo_every < 0 or any(r < 4000 or r > 192000 for r in a.rates):
        p.error("need --count >= 0, --stereo-every >= 0, rates in 4000..192000")
    return a


def class_dir(out, label):
    return out / WORDS[label]


def clip_path(out, index, fmt):
    return class_dir(out, index % len(WORDS)) / ("clip_%05d.%s" % (index, fmt))


def speak(word, voice, speed, pitch, amplitude):
    """espeak-ng's 22050 Hz mono 16-bit output as float64 in [-1, 1)."""
    r = subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch),
                        "-a", str(amplitude), "-z", "--stdout", word],
                       check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    with wave.open(io.BytesIO(r.stdout)) as w:
        if w.getframerate() != ESPEAK_RATE or w.getsampwidth() != 2 or w.getnchannels() != 1:
            raise RuntimeError("unexpected espeak-ng output format")
        # espeak-ng writes 0x7fffffff as the length when writing to a pipe: read all
        pcm = w.readframes(1 << 30)
    return np.frombuffer(pcm, dtype="<i2").astype(np.float64) / 32768.0


def resample(x, rate_in, rate_out):
    """Band-limited resampling by zero-padding or truncating the spectrum."""
    if rate_in == rate_out:
        return x
    n_out = int(round(len(x) * rate_out / rate_in))
    spec = np.fft.rfft(x)
    keep = n_out // 2 + 1
    if keep <= len(spec):
        spec = spec[:keep]
    else:
        spec = np.concatenate([spec, np.zeros(keep - len(spec), dtype=spec.dtype)])
    return np.fft.irfft(spec, n_out) * (n_out / len(x))


def render(index, s):
    """The clip's samples (channels x frames, float64, within [-1, 1)) and its settings."""
    rng = random.Random("%d:%d" % (s["seed"], index))
    word = WORDS[index % len(WORDS)]
    voice = rng.choice(VOICES)
    variant = rng.choice(VARIANTS)
    if variant:
        voice += "+" + variant
    speed = rng.randint(110, 230)
    pitch = rng.randint(15, 85)
    amplitude = rng.randint(60, 140)
    x = speak(word, voice, speed, pitch, amplitude)
    lead = int(rng.uniform(0.0, 0.25) * ESPEAK_RATE)
    trail = int(rng.uniform(0.0, 0.25) * ESPEAK_RATE)
    x = np.concatenate([np.zeros(lead), x, np.zeros(trail)])
    nrng = np.random.default_rng(rng.getrandbits(63))
    rms = float(np.sqrt(np.mean(x * x))) or 1e-3
    x = x + nrng.standard_normal(len(x)) * rms * 10 ** (-rng.uniform(30, 50) / 20)
    rate = rng.choice(s["rates"])
    x = resample(x, ESPEAK_RATE, rate)
    k = s["stereo_every"]
    if k and rng.randrange(k) == 0:
        delay = rng.randint(1, 40)
        right = np.concatenate([np.zeros(delay), x[:-delay]]) * rng.uniform(0.5, 0.9)
        x = np.stack([x, right])
    else:
        x = x[None, :]
    peak = float(np.abs(x).max())
    target = rng.uniform(0.3, 0.95)
    x = x * (target / peak if peak > 0 else 1.0)
    info = {"word": word, "voice": voice, "speed": speed, "pitch": pitch,
            "amplitude": amplitude, "rate": rate, "channels": int(x.shape[0])}
    return x, info, rng


def pcm16(x):
    return np.clip(np.round(x * 32768.0), -32768, 32767).astype("<i2")


def write_wav(path, x, rate, kind):
    """A canonical RIFF WAVE file: kind s16, s24, f32 or u8."""
    inter = np.ascontiguousarray(x.T)  # frames x channels
    if kind == "s16":
        data, fmt_tag, bits = pcm16(inter).tobytes(), 1, 16
    elif kind == "s24":
        v = np.clip(np.round(inter * 8388608.0), -8388608, 8388607).astype("<i4")
        data = v.view(np.uint8).reshape(-1, 4)[:, :3].tobytes()
        fmt_tag, bits = 1, 24
    elif kind == "f32":
        data, fmt_tag, bits = inter.astype("<f4").tobytes(), 3, 32
    elif kind == "u8":
        data = (np.clip(np.round(inter * 128.0), -128, 127) + 128).astype(np.uint8).tobytes()
        fmt_tag, bits = 1, 8
    else:
        raise ValueError(kind)
    ch = x.shape[0]
    block = ch * bits // 8
    tag = 0xFFFE if bits == 24 else fmt_tag  # WAVE_FORMAT_EXTENSIBLE, as 24-bit should be
    fmt = (tag.to_bytes(2, "little") + ch.to_bytes(2, "little") +
           rate.to_bytes(4, "little") + (rate * block).to_bytes(4, "little") +
           block.to_bytes(2, "little") + bits.to_bytes(2, "little"))
    if tag == 0xFFFE:
        mask = 4 if ch == 1 else 3
        guid = fmt_tag.to_bytes(2, "little") + bytes.fromhex("000000001000800000aa00389b71")
        fmt += ((22).to_bytes(2, "little") + bits.to_bytes(2, "little") +
                mask.to_bytes(4, "little") + guid)
    chunks = b"fmt " + len(fmt).to_bytes(4, "little") + fmt
    if fmt_tag == 3:  # non-PCM formats carry a fact chunk
        chunks += b"fact" + (4).to_bytes(4, "little") + inter.shape[0].to_bytes(4, "little")
    chunks += b"data" + len(data).to_bytes(4, "little") + data
    if len(data) % 2:
        chunks += b"\0"
    with open(path, "wb") as f:
        f.write(b"RIFF" + (4 + len(chunks)).to_bytes(4, "little") + b"WAVE" + chunks)


def clip_format(index, formats):
    """Formats dealt in turn over rounds of the ten words (each word gets every format)."""
    return formats[(index // len(WORDS)) % len(formats)]


def make_clip(job):
    index, path, s = job
    x, info, rng = render(index, s)
    fmt = clip_format(index, s["formats"])
    rate = info["rate"]
    r = index // len(WORDS) // len(s["formats"])  # this format's round
    with tempfile.TemporaryDirectory(prefix="mkaudio.") as tmp:
        src = os.path.join(tmp, "in.wav")
        if fmt == "wav":
            kind = ("s16", "s16", "s24", "s16", "f32", "s16", "u8")[(r + index) % 7]
            write_wav(path, x, rate, kind)
            info["encoding"] = kind
        elif fmt == "flac":
            kind = "s24" if (r + index) % 4 == 1 else "s16"
            write_wav(src, x, rate, kind)
            level = rng.randint(0, 8)
            subprocess.run(["flac", "-s", "-f", "-%d" % level, "--no-seektable", src,
                            "-o", path], check=True)
            info["encoding"] = "%s level %d" % (kind, level)
        elif fmt == "mp3":
            write_wav(src, x, rate, "s16")
            if rng.random() < 0.5:
                opts = ["-b", str(rng.choice([48, 64, 96, 128, 160, 192]))]
            else:
                opts = ["-V", str(rng.randint(2, 6))]
            subprocess.run(["lame", "--quiet", "--noreplaygain"] + opts + [src, path],
                           check=True)
            info["encoding"] = " ".join(opts)
        else:  # ogg
            write_wav(src, x, rate, "s16")
            q = rng.randint(1, 6)
            subprocess.run(["oggenc", "-Q", "-q", str(q), "--serial", str(1000 + index),
                            "-o", path, src], check=True)
            info["encoding"] = "q%d" % q
    info["format"] = fmt
    return index, info


def main(argv):
    a = parse_args(argv)
    for f in a.formats:
        if TOOLS[f] and not shutil.which(TOOLS[f]):
            sys.exit("mkaudio: %s is missing (make deps installs it)" % TOOLS[f])
    if not shutil.which("espeak-ng"):
        sys.exit("mkaudio: espeak-ng is missing (make deps installs it)")
    settings = {"count": a.count, "seed": a.seed, "formats": a.formats, "rates": a.rates,
                "stereo_every": a.stereo_every, "words": WORDS, "version": 2}
    marker_text = json.dumps(settings, sort_keys=True) + "\n"
    if is_complete(a.out, marker_text):
        print("mkaudio: %s is complete (%d clips), reusing it" % (a.out, a.count))
        return 0

    a.out.mkdir(parents=True, exist_ok=True)
    clear_previous(a.out, [class_dir(a.out, i) for i in range(len(WORDS))], "clip_*.*",
                   ["index.json"])
    for label in range(len(WORDS)):
        class_dir(a.out, label).mkdir(exist_ok=True)
    jobs = []
    for i in range(a.count):
        fmt = clip_format(i, a.formats)
        jobs.append((i, str(clip_path(a.out, i, fmt)), settings))
    nproc = max(1, min(a.jobs, a.count // 16 or 1))
    if nproc == 1:
        results = [make_clip(j) for j in jobs]
    else:
        with multiprocessing.Pool(nproc) as pool:
            results = list(pool.imap_unordered(make_clip, jobs, chunksize=8))
    results.sort()
    index = []
    for (i, info), (_, path, _) in zip(results, jobs):
        info["path"] = os.path.relpath(path, a.out)
        info["label"] = sorted(WORDS).index(info["word"])  # ImageFolder order
        index.append(info)
    with open(a.out / "index.json", "w") as f:
        json.dump(index, f, indent=0)
    mark_complete(a.out, marker_text)
    print("mkaudio: wrote %d clips of %d words to %s" % (a.count, len(WORDS), a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
