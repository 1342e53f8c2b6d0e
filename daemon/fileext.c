/*
 * torchvision's image extensions (fileext.h).
 */
#include <string.h>
#include <strings.h>

#include "fileext.h"

static const char *const image_exts[FILEEXT_IMAGE_COUNT] = {
    ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp",
};

int fileext_image(const char *name)
{
    size_t n = strlen(name);
    for (int i = 0; i < FILEEXT_IMAGE_COUNT; i++) {
        size_t k = strlen(image_exts[i]);
        if (n >= k && strcasecmp(name + n - k, image_exts[i]) == 0)
            return i;
    }
    return -1;
}

int fileext_image_ext(const char *ext, size_t len)
{
    for (int i = 0; i < FILEEXT_IMAGE_COUNT; i++)
        if (strlen(image_exts[i] + 1) == len && strncasecmp(ext, image_exts[i] + 1, len) == 0)
            return i;
    return -1;
}

const char *fileext_image_name(int i)
{
    return i >= 0 && i < FILEEXT_IMAGE_COUNT ? image_exts[i] : NULL;
}
