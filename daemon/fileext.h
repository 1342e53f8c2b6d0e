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

/* The index (0..FILEEXT_IMAGE_COUNT-1) of the image extension name ends
 * with (".jpg", ".JPEG", ... as torchvision lists them), or -1. */
int fileext_image(const char *name);
/* The same for a bare extension of len bytes without its dot ("png", as
 * WebDataset splits member names), or -1. */
int fileext_image_ext(const char *ext, size_t len);
/* ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff",
 * ".webp" for 0..8; NULL otherwise. */
const char *fileext_image_name(int i);

#endif
