/*
 * random_erasing on float32 images (see erase.h).
 */
#include <math.h>
#include <stddef.h>

#include "draw.h"
#include "erase.h"

void erase_draw(const struct erase_params *p, uint64_t *st, uint32_t h, uint32_t w,
                struct erase_box *box)
{
    box->top = box->left = box->h = box->w = 0;
    if (!draw_chance(st, p->p))
        return;
    double area = (double)h * w;
    double lr0 = log(p->ratio[0]), lr1 = log(p->ratio[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        double erase_area = area * draw_uniform(st, p->scale[0], p->scale[1]);
        double aspect = exp(draw_uniform(st, lr0, lr1));
        double eh = nearbyint(sqrt(erase_area * aspect));
        double ew = nearbyint(sqrt(erase_area / aspect));
        if (!(eh < h && ew < w))
            continue;
        box->h = (uint32_t)eh;
        box->w = (uint32_t)ew;
        box->top = draw_below(st, h - box->h + 1);
        box->left = draw_below(st, w - box->w + 1);
        return;
    }
}

void erase_apply(const struct erase_params *p, const struct erase_box *box, uint64_t *st,
                 float *x, uint32_t h, uint32_t w, uint32_t c, int nchw)
{
    if (box->h == 0 || box->w == 0)
        return;
    double spare = 0.0; /* Box-Muller makes normals in pairs */
    int have = 0;
    for (uint32_t ch = 0; ch < c; ch++) {
        float v = p->value[p->nvalue == 1 ? 0 : ch];
        for (uint32_t y = box->top; y < box->top + box->h; y++) {
            for (uint32_t xx = box->left; xx < box->left + box->w; xx++) {
                size_t at = nchw ? ((size_t)ch * h + y) * w + xx
                                 : ((size_t)y * w + xx) * c + ch;
                if (p->random) {
                    double a = spare;
                    if (!have)
                        draw_normal2(st, &a, &spare);
                    have = !have;
                    v = (float)a;
                }
                x[at] = v;
            }
        }
    }
}
