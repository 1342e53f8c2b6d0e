/*
 * torchvision's image extensions (fileext.h).
 */
#include <string.h>
#include <strings.h>

#include "fileext.h"

static const char *const image_exts[FILEEXT_COUNT] = {
    ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp",
    ".wav", ".flac", ".ogg", ".mp3", /* audio (FILEEXT_IMAGE_COUNT..) */
};

int fileext_sample(const char *name, int audio)
{
    size_t n = strlen(name);
    int from = audio ? FILEEXT_IMAGE_COUNT : 0;
    int to = audio ? FILEEXT_COUNT : FILEEXT_IMAGE_COUNT;
    for (int i = from; i < to; i++) {
        size_t k = strlen(image_exts[i]);
        if (n >= k && strcasecmp(name + n - k, image_exts[i]) == 0)
            return i;
    }
    return -1;
}

int fileext_image(const char *name)
{
    return fileext_sample(name, 0);
}

int fileext_sample_ext(const char *ext, size_t len, int audio)
{
    int from = audio ? FILEEXT_IMAGE_COUNT : 0;
    int to = audio ? FILEEXT_COUNT : FILEEXT_IMAGE_COUNT;
    for (int i = from; i < to; i++)
        if (strlen(image_exts[i] + 1) == len && strncasecmp(ext, image_exts[i] + 1, len) == 0)
            return i;
    return -1;
}

int fileext_image_ext(const char *ext, size_t len)
{
    return fileext_sample_ext(ext, len, 0);
}

const char *fileext_image_name(int i)
{
    return i >= 0 && i < FILEEXT_IMAGE_COUNT ? image_exts[i] : NULL;
}

const char *fileext_name(int i)
{
    return i >= 0 && i < FILEEXT_COUNT ? image_exts[i] : NULL;
}

const char *fileext_list(int audio)
{
    return audio ? ".wav .flac .ogg .mp3" : ".jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp";
}
