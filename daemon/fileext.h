/*
 * The file extensions a dataset indexes as images: torchvision's
 * IMG_EXTENSIONS (datasets/folder.py), matched as ImageFolder matches them,
 * case-insensitively at the end of the name (Python's str.lower() of an
 * ASCII extension: a name whose last characters are non-ASCII never
 * matches), so a directory, a manifest and a tar shard agree with
 * torchvision on which files are samples.
 */
#ifndef PRESTO_FILEEXT_H
#define PRESTO_FILEEXT_H

#include <stddef.h>

#define FILEEXT_IMAGE_COUNT 9
/* Audio (issue 18): .wav .flac .ogg .mp3 for a pipeline that starts with
 * decode_audio, indices FILEEXT_IMAGE_COUNT.. FILEEXT_COUNT-1. */
#define FILEEXT_AUDIO_COUNT 4
#define FILEEXT_COUNT (FILEEXT_IMAGE_COUNT + FILEEXT_AUDIO_COUNT)

/* The index (0..FILEEXT_IMAGE_COUNT-1) of the image extension name ends
 * with (".jpg", ".JPEG", ... as torchvision lists them), or -1. */
int fileext_image(const char *name);
/* The same for a bare extension of len bytes without its dot ("png", as
 * WebDataset splits member names), or -1. */
int fileext_image_ext(const char *ext, size_t len);
/* ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff",
 * ".webp" for 0..8; NULL otherwise. */
const char *fileext_image_name(int i);

/* A dataset's samples: image files, or (audio set) audio files. The index
 * in 0..FILEEXT_COUNT-1 of the extension name ends with among those, or
 * -1; fileext_sample_ext the same for a bare extension (WebDataset). */
int fileext_sample(const char *name, int audio);
int fileext_sample_ext(const char *ext, size_t len, int audio);
/* Any extension of the table: ".wav" for FILEEXT_IMAGE_COUNT, ... */
const char *fileext_name(int i);
/* The list a dataset of that kind indexes, for messages: ".jpg .jpeg ...". */
const char *fileext_list(int audio);

#endif
